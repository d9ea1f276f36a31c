"""Health that means pinning: the metrics listener's /healthz, /readyz and /metrics over real HTTP,
`nri-pinner status`'s exit code, with the real service and stub against the fake runtime."""

from __future__ import annotations

import asyncio
import http.client
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from svc_harness import container, create, make_settings, new_service, pod

from nri_pinner import cli
from nri_pinner.edge.app import Service
from nri_pinner.edge.observe.metrics import REJECTIONS, RESIZE_KINDS, RESIZE_REFUSALS
from nri_pinner.edge.observe.metrics_http import Listener
from nri_pinner.edge.observe.status_server import start_server
from nri_pinner.engine.cpuset import CPUSet
from nri_pinner.nri.gen import api_pb2 as api
from nri_pinner.nri.handlers import ParkedReply, UpdatesReply
from nri_pinner.nri.stub.wire import TtrpcStatusError
from testkit.fake_runtime import CONTAINERD_2_3_0, FakeRuntime, running_stub

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def get(port: int, path: str) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path)
        reply = conn.getresponse()
        return reply.status, reply.read().decode()
    finally:
        conn.close()


async def aget(port: int, path: str) -> tuple[int, str]:
    return await asyncio.to_thread(get, port, path)


async def scrape(port: int) -> Samples:
    code, text = await aget(port, "/metrics")
    assert code == 200
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(text) for s in f.samples}


def series(m: Samples, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {labels: v for (n, labels), v in m.items() if n == name}


async def status_exit(sock: str) -> int:
    code: int = await asyncio.to_thread(cli.main, ["status", "--socket", sock])
    return code


@pytest.fixture
async def listening(workdir: Path) -> AsyncIterator[tuple[Service, Listener, str]]:
    """A service (not yet connected) with its metrics listener and inspection socket up."""
    settings = make_settings(workdir, cpu_manager={"reserved_cpus": "0", "policy_options": ["full-pcpus-only"]})
    svc = new_service(settings)
    listener = Listener(svc.metrics, "127.0.0.1", 0, asyncio.get_running_loop())
    server = await start_server(settings.inspect.socket, svc.document)
    try:
        yield svc, listener, settings.inspect.socket
    finally:
        await server.stop(None)
        listener.stop()


async def test_readyz_and_status_follow_the_runtime_connection(
        listening: tuple[Service, Listener, str], capsys: pytest.CaptureFixture[str]) -> None:
    svc, listener, sock = listening
    port = listener.port
    # Never connected: alive, not ready, no runtime identity, status exits 3.
    assert await aget(port, "/healthz") == (200, "ok\n")
    code, body = await aget(port, "/readyz")
    assert code == 503 and "not connected" in body
    m = await scrape(port)
    assert m[("nri_pinner_connected", ())] == 0 and m[("nri_pinner_synchronized", ())] == 0
    assert series(m, "nri_pinner_runtime_info") == {}
    assert await status_exit(sock) == 3
    captured = capsys.readouterr()
    assert "connected=False" in captured.out and "not connected" in captured.err

    # While the runtime's Synchronize is being handled: connected, still not ready.
    during: list[tuple[int, str]] = []
    real_synchronize = svc.plugin.synchronize

    def observed_synchronize(pods: list[api.PodSandbox], ctrs: list[api.Container]
                             ) -> UpdatesReply | ParkedReply[UpdatesReply]:
        during.append(get(port, "/readyz"))
        return real_synchronize(pods, ctrs)

    svc.plugin.synchronize = observed_synchronize  # type: ignore[method-assign,assignment]
    async with FakeRuntime(CONTAINERD_2_3_0) as runtime:
        await runtime.listen(svc.settings.nri.socket)
        async with running_stub(svc.stub):
            await runtime.wait_ready()
            [(code, body)] = during
            assert code == 503 and "waiting for the runtime's Synchronize" in body
            assert await aget(port, "/readyz") == (200, "ready: registered and synchronized\n")
            m = await scrape(port)
            assert m[("nri_pinner_connected", ())] == 1 and m[("nri_pinner_synchronized", ())] == 1
            info = (("nri_version", "v0.12.0"), ("runtime", "containerd"), ("version", "v2.3.0"))
            assert series(m, "nri_pinner_runtime_info") == {info: 1}
            assert await status_exit(sock) == 0
            capsys.readouterr()

            # The runtime goes away: not ready again, identity gone, status exits 3; still alive.
            await runtime.stop_listening()
            for _ in range(100):
                if not svc.stub.connected:
                    break
                await asyncio.sleep(0.02)
            code, body = await aget(port, "/readyz")
            assert code == 503 and "not connected" in body
            m = await scrape(port)
            assert m[("nri_pinner_connected", ())] == 0 and series(m, "nri_pinner_runtime_info") == {}
            assert await status_exit(sock) == 3
            assert await aget(port, "/healthz") == (200, "ok\n")


async def test_only_three_paths_are_served(listening: tuple[Service, Listener, str]) -> None:
    port = listening[1].port
    for path in ("/", "/metrics/", "/health", "/readyz/x", "/favicon.ico"):
        code, body = await aget(port, path)
        assert code == 404, path
        assert "/metrics, /healthz, /readyz" in body
    code, _ = await aget(port, "/metrics?name[]=process_cpu_seconds_total")  # a query string is fine
    assert code == 200


def head(port: int, path: str) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("HEAD", path)
        reply = conn.getresponse()
        return reply.status, dict(reply.getheaders()), reply.read()
    finally:
        conn.close()


async def test_head_is_answered_as_get_without_a_body(listening: tuple[Service, Listener, str]) -> None:
    port = listening[1].port
    for path, code in (("/healthz", 200), ("/readyz", 503), ("/metrics", 200), ("/nope", 404)):
        got, headers, body = await asyncio.to_thread(head, port, path)
        assert (got, body) == (code, b""), path
        assert headers["Content-Type"].startswith("text/plain") and int(headers["Content-Length"]) > 0

    def twice_on_one_connection() -> list[tuple[int, bytes]]:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        try:
            replies = []
            for path in ("/healthz", "/readyz"):
                conn.request("HEAD", path)
                reply = conn.getresponse()
                replies.append((reply.status, reply.read()))
            return replies
        finally:
            conn.close()

    # the connection stays usable: HEAD wrote no body that a client would read as the next reply
    assert await asyncio.to_thread(twice_on_one_connection) == [(200, b""), (503, b"")]


async def test_a_host_name_address_is_listened_on(workdir: Path) -> None:
    svc = new_service(make_settings(workdir))
    listener = Listener(svc.metrics, "localhost", 0, asyncio.get_running_loop())
    try:
        assert await aget(listener.port, "/healthz") == (200, "ok\n")
    finally:
        listener.stop()


async def test_healthz_fails_while_the_event_loop_is_wedged(workdir: Path) -> None:
    svc = new_service(make_settings(workdir))
    listener = Listener(svc.metrics, "127.0.0.1", 0, asyncio.get_running_loop(), alive_timeout=0.3)
    try:
        result: list[tuple[int, str]] = []
        probe = threading.Thread(target=lambda: result.append(get(listener.port, "/healthz")))
        probe.start()
        time.sleep(1.0)  # blocks this loop, as a handler stuck on the wire loop would
        await asyncio.to_thread(probe.join, 10)
        [(code, body)] = result
        assert code == 503 and "did not answer within 0.3s" in body
        assert await aget(listener.port, "/healthz") == (200, "ok\n")
    finally:
        listener.stop()


async def test_series_exist_at_zero_and_count_per_numa_node(listening: tuple[Service, Listener, str]) -> None:
    svc, listener, _ = listening
    port = listener.port
    m = await scrape(port)
    # Every labelled series exists before its first event.
    assert series(m, "nri_pinner_admission_errors_total") == {
        (("provider", provider), ("reason", reason)): 0 for reason, provider in REJECTIONS.items()}
    assert series(m, "nri_pinner_pinning_errors_total") == {(("reason", r),): 0 for r in REJECTIONS}
    assert series(m, "nri_pinner_fail_open_total") == {(("cause", "rejected"),): 0, (("cause", "timeout"),): 0}
    assert series(m, "nri_pinner_late_handler_replies_total") == {
        (("method", "CreateContainer"),): 0, (("method", "StartContainer"),): 0, (("method", "UpdateContainer"),): 0}
    assert series(m, "nri_pinner_resizes_total") == {
        **{(("outcome", k), ("reason", "")): 0 for k in RESIZE_KINDS},
        **{(("outcome", "refused"), ("reason", r)): 0 for r in RESIZE_REFUSALS}}
    assert series(m, "nri_pinner_reconcile_repairs_total") == {(("path", "cri"),): 0, (("path", "next-reply"),): 0}
    # process_* from the process itself (not a custom registry without them)
    assert m[("process_resident_memory_bytes", ())] > 0 and ("process_cpu_seconds_total", ()) in m
    # dual-socket fixture: CPUs 0-5 on node 0, 6-11 on node 1; CPU 0 reserved (in the shared pool)
    topo = svc.plugin.node.engine.topology
    assert series(m, "nri_pinner_numa_online_cpus") == {(("numa_node", "0"),): 6, (("numa_node", "1"),): 6}
    assert series(m, "nri_pinner_numa_exclusive_cpus") == {(("numa_node", "0"),): 0, (("numa_node", "1"),): 0}
    assert series(m, "nri_pinner_numa_shared_cpus") == {(("numa_node", "0"),): 6, (("numa_node", "1"),): 6}
    assert m[("nri_pinner_shared_pool_cpus", ())] == 12 == len(svc.plugin.view().shared_pool)  # before any event

    async with FakeRuntime(CONTAINERD_2_3_0) as runtime:
        await runtime.listen(svc.settings.nri.socket)
        async with running_stub(svc.stub):
            conn = await runtime.wait_ready()
            gpod = pod("db")
            reply = await conn.create_container(create(gpod, container(gpod, "postgres", 2000, 2000)))
            assert reply is not None
            pinned = CPUSet.parse(reply.adjust.linux.resources.cpu.cpus)
            with pytest.raises(TtrpcStatusError, match="SMTAlignmentError"):  # 3 CPUs, full-pcpus-only
                await conn.create_container(create(gpod, container(gpod, "odd", 3000, 3000)))
            bad = pod("bad", annotations={"nri-pinner.io/cpu.app": "???"})
            with pytest.raises(TtrpcStatusError, match="nri-pinner"):
                await conn.create_container(create(bad, container(bad, "app", 1000, 1000)))
            m = await scrape(port)
    by_node: dict[tuple[tuple[str, str], ...], float] = {
        (("numa_node", str(n)),): float(len(pinned & topo.numa_cpus[n])) for n in topo.numa_nodes}
    assert series(m, "nri_pinner_numa_exclusive_cpus") == by_node
    assert sum(by_node.values()) == 2
    assert sum(series(m, "nri_pinner_numa_shared_cpus").values()) == 12 - 2
    errors: dict[Any, float] = series(m, "nri_pinner_admission_errors_total")
    assert errors[(("provider", "cpu"), ("reason", "SMTAlignmentError"))] == 1
    assert errors[(("provider", "annotations"), ("reason", "BadAnnotation"))] == 1
    assert sum(errors.values()) == 2
