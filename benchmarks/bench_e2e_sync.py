"""How long a real containerd waits for our stub's Synchronize answer, by node state size.

For each installed runtime (private instance, see tests/e2e/harness.py; needs root and the runtimes
from scripts/install-runtimes.sh): fill the node with BestEffort pods whose sandboxes carry a ballast
annotation, then connect the pin_fixed example plugin ``--rounds`` times and read, from containerd's
own log, the time from ``synchronizing plugin`` to the invocation-order entry listing the plugin
(the runtime's request timeout, 2 s here, bounds exactly this). Prints median / max per state size,
the encoded sync size and how many messages it took (1 = unchunked).

    .venv/bin/python benchmarks/bench_e2e_sync.py [--runtimes 1.7 2.1] [--pods 0 7 14] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the e2e harness lives in tests/e2e

from tests.e2e.conftest import e2e_base_dir  # noqa: E402
from tests.e2e.harness import PodHandle, PrivateContainerd, claim_workdir  # noqa: E402
from tests.e2e.pin_plugin import PIN_MODULE, online_cpus, plugin_argv, sync_seconds, wait_for_event  # noqa: E402


def measure(runtime: PrivateContainerd, rounds: int, logs: Path) -> tuple[list[float], int, int]:
    """(runtime-side sync seconds per round, encoded sync bytes, sync messages) for the current node."""
    all_cpus = ",".join(map(str, online_cpus()))  # pins to everything: no effect on later pods
    times: list[float] = []
    size = messages = 0
    for i in range(rounds):
        log = logs / f"round-{i}.jsonl"
        since = runtime.log_offset()
        plugin = runtime.start_plugin(
            plugin_argv(PIN_MODULE, "--socket", str(runtime.nri_socket), "--log", str(log), "--cpus", all_cpus),
            name="50-pin-fixed",
        )
        sync = wait_for_event(log, "Synchronize")
        times.append(sync_seconds(runtime.log_text(since), plugin.name))
        size, messages = sync["encoded_bytes"], sync["stub_requests"] - 1
        plugin.stop()
        runtime.plugins.remove(plugin)
    return times, size, messages


def bench_runtime(key: str, pod_counts: list[int], ballast: int, rounds: int) -> None:
    workdir, lock = claim_workdir(e2e_base_dir() / f"bench-sync-{key}")
    runtime = PrivateContainerd(key, workdir)
    pods: list[PodHandle] = []
    try:
        runtime.start()
        print(f"containerd {runtime.version} ({key}), {rounds} rounds, ballast {ballast // 1024} KiB/pod")
        with tempfile.TemporaryDirectory(prefix="bench-sync-") as tmp:
            for count in sorted(pod_counts):
                while len(pods) < count:
                    value = f"{len(pods):04d}" + "x" * max(ballast - 4, 0)
                    pods.append(runtime.run_pod("besteffort", annotations={"bench.nri-pinner.io/ballast": value}))
                logs = Path(tmp) / f"pods-{count}"
                logs.mkdir()
                times, size, messages = measure(runtime, rounds, logs)
                print(
                    f"  {count:3d} pods + {count:3d} containers, {size / 2**20:6.2f} MiB in {messages} msg: "
                    f"median {statistics.median(times) * 1000:6.1f} ms, max {max(times) * 1000:6.1f} ms"
                )
    finally:
        runtime.stop()
        lock.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runtimes", nargs="+", default=["1.7", "2.1"])
    parser.add_argument("--pods", nargs="+", type=int, default=[0, 7, 14])
    parser.add_argument("--ballast-kib", type=int, default=800)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    if args.rounds < 1 or min(args.pods) < 0 or args.ballast_kib < 0:
        parser.error("need --rounds >= 1, --pods >= 0, --ballast-kib >= 0")
    for key in args.runtimes:
        bench_runtime(key, args.pods, args.ballast_kib * 1024, args.rounds)


if __name__ == "__main__":
    main()
