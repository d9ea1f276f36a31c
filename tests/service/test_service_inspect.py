"""The inspection socket, `nri-pinner status`, and the Prometheus metrics after a scenario."""

from __future__ import annotations

import asyncio
import json
import stat
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from svc_harness import Running, container, create, document, make_settings, pod, running

from nri_pinner import cli
from nri_pinner.edge.observe.status_server import query, start_server
from nri_pinner.engine.cpuset import CPUSet
from nri_pinner.nri.gen import api_pb2 as api
from nri_pinner.nri.stub.wire import TtrpcStatusError
from testkit.fake_runtime import CONTAINERD_2_3_0


async def scenario(r: Running) -> CPUSet:
    """Burstable + guaranteed (2 CPUs) + a rejected 3-CPU container + one stopped; returns the pinned CPUs."""
    bpod, gpod = pod("web", "burstable", namespace="shop"), pod("db", namespace="shop")
    await r.conn.create_container(create(bpod, container(bpod, "nginx", 250, 500)))
    reply = await r.conn.create_container(create(gpod, container(gpod, "postgres", 2000, 2000)))
    assert reply is not None
    with pytest.raises(TtrpcStatusError):
        await r.conn.create_container(create(gpod, container(gpod, "odd", 3000, 3000)))
    temp = container(gpod, "temp", 1500, 1500)  # shared: a stopped exclusive one keeps its CPUs for the pod
    await r.conn.create_container(create(gpod, temp))
    await r.conn.stop_container(api.StopContainerRequest(pod=gpod, container=temp))
    return CPUSet.parse(reply.adjust.linux.resources.cpu.cpus)


async def test_status_over_the_inspection_socket(workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    settings = make_settings(workdir, cpu_manager={"policy_options": ["full-pcpus-only"]})
    sock = settings.inspect.socket
    async with running(settings, CONTAINERD_2_3_0) as r:
        pinned = await scenario(r)
        server = await start_server(sock, r.svc.document)
        try:
            assert stat.S_IMODE(Path(sock).stat().st_mode) == 0o600
            doc = await asyncio.to_thread(query, sock)
            assert doc == json.loads(json.dumps(document(r.svc)))
            pools = await asyncio.to_thread(query, sock, "Pools")
            assert pools["exclusive"] == str(pinned)

            assert await asyncio.to_thread(cli.main, ["status", "--socket", sock]) == 0
            table = capsys.readouterr().out
            assert "containerd v2.3.0 (NRI v0.12.0)" in table and "connected=True" in table
            [row] = [line.split() for line in table.splitlines() if line.startswith("shop") and "postgres" in line]
            mems = doc["assignments"][0]["mems"]
            assert row == ["shop", "db", "postgres", "guaranteed", "exclusive", str(pinned), mems]
            [row] = [line.split() for line in table.splitlines() if line.startswith("shop") and "nginx" in line]
            assert row[3:5] == ["burstable", "shared"]
            assert any("temp" in line and "stopped" in line for line in table.splitlines())
            assert "db/postgres" in table  # the CPU map names the owner of the pinned CPUs
            assert "recent rejections:" in table and "SMTAlignmentError" in table

            assert await asyncio.to_thread(cli.main, ["status", "--socket", sock, "--json"]) == 0
            printed = json.loads(capsys.readouterr().out)
            assert printed["pools"] == doc["pools"]
            assert {a["container"] for a in printed["assignments"]} == {"nginx", "postgres", "temp"}
        finally:
            await server.stop(None)


def test_status_on_a_dead_socket_fails_with_one_line(workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sock = str(workdir / "gone.sock")
    assert cli.main(["status", "--socket", sock]) == 3  # not connected (documented exit code)
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1 and sock in lines[0] and lines[0].startswith("nri-pinner status: ")


def samples(r: Running) -> tuple[set[str], dict[tuple[str, tuple[tuple[str, str], ...]], float]]:
    """(metric family names, {(sample name, labels): value}) from the exposition text."""
    families = list(text_string_to_metric_families(generate_latest(r.svc.metrics.registry).decode()))
    return ({f.name for f in families},
            {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families for s in f.samples})


async def test_metrics_after_a_scenario(workdir: Path) -> None:
    settings = make_settings(workdir, cpu_manager={"policy_options": ["full-pcpus-only"]})
    async with running(settings, CONTAINERD_2_3_0) as r:
        pinned = await scenario(r)
        families, m = samples(r)
    # labelled counters with no sample yet are still exposed (HELP/TYPE)
    assert {"nri_pinner_reconcile_repairs", "nri_pinner_late_handler_replies", "nri_pinner_fail_open"} <= families
    assert m[("nri_pinner_pinning_requests_total", ())] == 4
    assert m[("nri_pinner_pinning_errors_total", (("reason", "SMTAlignmentError"),))] == 1
    assert m[("nri_pinner_fail_open_total", (("cause", "rejected"),))] == 0  # on_reject = "fail"
    assert m[("nri_pinner_exclusive_cpus", ())] == len(pinned)
    assert m[("nri_pinner_shared_pool_cpus", ())] == 12 - len(pinned)
    assert m[("nri_pinner_allocation_duration_seconds_count", ())] == 4
    assert m[("nri_pinner_allocation_duration_seconds_bucket", (("le", "+Inf"),))] == 4
    assert 0 < m[("nri_pinner_allocation_duration_seconds_sum", ())] < 4
    assert m[("nri_pinner_nri_reconnects_total", ())] == 1
    info = (("nri_version", "v0.12.0"), ("runtime", "containerd"), ("version", "v2.3.0"))
    assert m[("nri_pinner_runtime_info", info)] == 1
