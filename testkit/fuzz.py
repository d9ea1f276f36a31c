"""TEST TOOL: a seeded mutation fuzzer for everything the plugin decodes from the runtime.

Not used in production. One input is a byte stream built from a valid ttrpc conversation (a
Synchronize and a CreateContainer of kubelet-shaped pods carrying nri-pinner annotations), mutated
(bit flips, byte edits, splices, cuts, hostile annotation and cpuset values), then fed to the real
decoder in random pieces; every decoded request goes through the real protobuf parser, the intent
reader and the CPU list parser. The allowed outcomes are the specific errors (ProtocolError,
DecodeError, IntentError, CPUSetError); anything else is a finding, raised with the input's seed.

tests/nri/test_fuzz_codec.py runs it in CI with a fixed budget; benchmarks/bench_fuzz_decoder.py
runs it long and prints the count of inputs.
"""

from __future__ import annotations

import contextlib
import random
import time
from dataclasses import dataclass

from google.protobuf.message import DecodeError

from nri_pinner.core.intent import IntentError, intent_from_nri
from nri_pinner.engine.cpuset import CPUSet, CPUSetError
from nri_pinner.nri import codec
from nri_pinner.nri.codec import Decoder, ProtocolError
from nri_pinner.nri.gen import api_pb2 as api

PLUGIN = "nri.pkg.api.v1alpha1.Plugin"
HOSTILE_VALUES = ["abc", "inf", "-1", "nan", "1e999", "0", "\u00b2", "9" * 5000, "0-999999999", "99999999999",
                  "1/inf", "500m/", "", " ", "0.0000001", "\u0663", "1,,2", "-", "8192", "4-2"]


class FuzzFinding(AssertionError):
    """An input made a decoding step fail with something other than its specific error."""


@dataclass
class FuzzReport:
    inputs: int
    messages: int  # ttrpc messages the decoder produced
    requests: int  # NRI requests that parsed as protobuf
    intents: int  # containers whose intent was read (or refused with IntentError)
    seconds: float


def _pod(rng: random.Random) -> api.PodSandbox:
    p = api.PodSandbox(id=f"sb{rng.randrange(99)}", name="p", uid="u", namespace="default")
    p.linux.cgroup_parent = rng.choice(["/kubepods/podu", "/kubepods/burstable/podu", "/kubepods/besteffort/podu"])
    key = rng.choice(["nri-pinner.io/cpu.c", "nri-pinner.io/exclusive-cpus.c", "nri-pinner.io/init-containers"])
    p.annotations[key] = rng.choice([*HOSTILE_VALUES, "2", "500m/1", "1"])
    return p


def _container(rng: random.Random, pod: api.PodSandbox) -> api.Container:
    c = api.Container(id=f"c{rng.randrange(999)}", pod_sandbox_id=pod.id, name="c")
    cpu = c.linux.resources.cpu
    cpu.shares.value = rng.choice([2, 1024, 2048, (1 << 64) - 1])
    cpu.quota.value, cpu.period.value = rng.choice([(200_000, 100_000), (-1, 0), ((1 << 63) - 1, 1)])
    cpu.cpus = rng.choice([*HOSTILE_VALUES, "0-3", "1"])
    if rng.random() < 0.3:
        c.annotations["nri-pinner.io/exclusive-cpus"] = rng.choice(HOSTILE_VALUES)
    return c


def _seed_stream(rng: random.Random) -> bytes:
    pods = [_pod(rng) for _ in range(rng.randrange(1, 3))]
    ctrs = [_container(rng, p) for p in pods]
    sync = api.SynchronizeRequest(pods=pods, containers=ctrs)
    create = api.CreateContainerRequest(pod=pods[0], container=ctrs[0])
    out = b""
    for stream, (method, msg) in enumerate([("Synchronize", sync), ("CreateContainer", create)]):
        body = codec.encode_request(PLUGIN, method, msg.SerializeToString(), 2_000_000_000)
        out += codec.encode_message(1, 2 * stream + 1, codec.MSG_REQUEST, body)
    return out


def _mutate(rng: random.Random, data: bytes) -> bytes:
    buf = bytearray(data)
    for _ in range(rng.randrange(0, 6)):
        if not buf:
            break
        op = rng.randrange(5)
        i = rng.randrange(len(buf))
        if op == 0:
            buf[i] ^= 1 << rng.randrange(8)
        elif op == 1:
            buf[i] = rng.randrange(256)
        elif op == 2:
            del buf[i:i + rng.randrange(1, 9)]
        elif op == 3:
            buf[i:i] = rng.randbytes(rng.randrange(1, 9))
        else:
            j = rng.randrange(len(buf))
            buf[i:i] = buf[j:j + rng.randrange(1, 33)]
    return bytes(buf)


def _requests(payload: bytes, method: str) -> list[tuple[api.PodSandbox, api.Container]]:
    if method == "Synchronize":
        sync = api.SynchronizeRequest.FromString(payload)
        pods = {p.id: p for p in sync.pods}
        return [(pods.get(c.pod_sandbox_id, api.PodSandbox()), c) for c in sync.containers]
    if method == "CreateContainer":
        req = api.CreateContainerRequest.FromString(payload)
        return [(req.pod, req.container)]
    return []


def run(inputs: int, seed: int = 0, max_message: int = 1 << 20) -> FuzzReport:
    """Fuzz `inputs` streams from `seed`; raises FuzzFinding on the first unexpected exception."""
    report = FuzzReport(inputs, 0, 0, 0, 0.0)
    started = time.perf_counter()
    for n in range(inputs):
        rng = random.Random(seed * 1_000_003 + n)
        data = _mutate(rng, _seed_stream(rng))
        decoder = Decoder(max_message=max_message)
        step = "decode"
        try:
            cuts = sorted(rng.randrange(len(data) + 1) for _ in range(rng.randrange(4)))
            pieces = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
            messages = [m for piece in pieces for m in decoder.feed(piece)]
            report.messages += len(messages)
            for m in messages:
                step = "request"
                _service, method, payload, _timeout = codec.decode_request(m.payload)
                step = "protobuf"
                pairs = _requests(payload, method)
                report.requests += 1
                for pod, container in pairs:
                    step = "intent"
                    report.intents += 1
                    with contextlib.suppress(IntentError):
                        intent_from_nri(pod, container)
                    step = "cpuset"
                    with contextlib.suppress(CPUSetError):
                        CPUSet.parse(container.linux.resources.cpu.cpus)
        except (ProtocolError, DecodeError):
            pass
        except Exception as exc:
            raise FuzzFinding(f"input {n} (seed {seed}) at {step}: {exc!r}; data {data[:200].hex()}") from exc
    report.seconds = time.perf_counter() - started
    return report
