"""Bad input never fails Synchronize and never unpins the node (issue 20, defects 1, 2 and 4).

Each case starts the plugin against the fake runtime (real stub, real protobuf) with one pod whose
data cannot be read next to a Guaranteed container that must keep its exclusive CPUs.
"""

from __future__ import annotations

import json
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

import pytest
import structlog.testing
from svc_harness import (
    DUAL_SOCKET,
    assignments,
    checkpoint_entries,
    container,
    create,
    document,
    make_settings,
    mems_for,
    pod,
    running,
)

from nri_pinner.engine.cpuset import CPUSet
from nri_pinner.engine.topology.sysfs import discover
from nri_pinner.nri.gen import api_pb2 as api
from nri_pinner.nri.stub_wire import TtrpcStatusError
from nri_pinner.service import checkpoint_file
from nri_pinner.service.app import Service
from testkit.fake_runtime import CONTAINERD_1_7_24, CONTAINERD_2_1_9, RuntimeProfile

GOLD = pod("gold")
PROFILES = [pytest.param(CONTAINERD_1_7_24, id="1.7"), pytest.param(CONTAINERD_2_1_9, id="2.1")]

# (annotation key suffix, value): every one of these once made `synchronize` raise
BAD_ANNOTATIONS = [
    pytest.param("cpu.app", "abc", id="cpu-abc"),
    pytest.param("cpu.app", "inf", id="cpu-inf"),
    pytest.param("cpu.app", "-1", id="cpu-negative"),
    pytest.param("cpu.app", "1e999", id="cpu-overflow"),
    pytest.param("cpu.app", "nan", id="cpu-nan"),
    pytest.param("cpu.app", "9" * 5000, id="cpu-5000-digits"),
    pytest.param("cpu.app", "1/inf", id="cpu-limit-inf"),
    pytest.param("exclusive-cpus.app", "0", id="exclusive-zero"),
    pytest.param("exclusive-cpus.app", "\u00b2", id="exclusive-superscript-two"),
    pytest.param("exclusive-cpus.app", "99999999999", id="exclusive-huge"),
]


def metric(svc: Service, name: str, labels: dict[str, str] | None = None) -> float:
    value = svc.metrics.registry.get_sample_value(name, labels or {})
    return 0.0 if value is None else float(value)


def events(logs: list[MutableMapping[str, Any]], name: str) -> list[MutableMapping[str, Any]]:
    return [e for e in logs if str(e["event"]).startswith(name)]


def gold_running() -> tuple[api.Container, CPUSet]:
    topo = discover(str(DUAL_SOCKET))
    cpus = CPUSet.parse("2,8")  # one core of socket 0
    return container(GOLD, "app", 2000, 2000, cpus=str(cpus), mems=mems_for(topo, cpus)), cpus


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize(("key", "value"), BAD_ANNOTATIONS)
async def test_bad_annotation_never_fails_synchronize(
        workdir: Path, profile: RuntimeProfile, key: str, value: str) -> None:
    settings = make_settings(workdir)
    bad_pod = pod("bad", annotations={f"nri-pinner.io/{key}": value})
    bad = container(bad_pod, "app", 2000, 2000, cpus="0-11")
    gold, gold_cpus = gold_running()
    with structlog.testing.capture_logs() as logs:
        async with running(settings, profile, pods=[GOLD, bad_pod], containers=[gold, bad]) as r:
            assert not r.conn.closed
            rows = assignments(r.svc)
            assert rows[gold.id]["exclusive"] and rows[gold.id]["cpus"] == str(gold_cpus)
            shared = r.topology.online - gold_cpus
            assert not rows[bad.id]["exclusive"] and rows[bad.id]["cpus"] == str(shared)
            # the rest of the node keeps working: a new Guaranteed container avoids gold's CPUs
            reply = await r.conn.create_container(create(GOLD, container(GOLD, "next", 2000, 2000)))
            assert reply is not None
            assert CPUSet.parse(reply.adjust.linux.resources.cpu.cpus).isdisjoint(gold_cpus)
            assert metric(r.svc, "nri_pinner_bad_input_total", {"source": "annotation"}) == 1
    [warning] = events(logs, "container data unreadable")
    assert f"nri-pinner.io/{key}" in str(warning["error"]) and warning["container"] == "app"


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("value", ["\u00b2", "0-999999999", "99999999999", "8192", "2,8,x"])
async def test_hostile_checkpoint_value_never_fails_synchronize(
        workdir: Path, profile: RuntimeProfile, value: str) -> None:
    settings = make_settings(workdir)
    gold, gold_cpus = gold_running()
    entry = {"container_id": gold.id, "sandbox_id": GOLD.id, "pod": "uid-gold", "container": "app",
             "admitted": value, "current": value, "exclusive": True, "init": False, "restartable": False,
             "numa_affinity": None}
    checkpoint_file.write(settings.state.checkpoint, {"policy": "static", "reserved": "0", "shared": "",
                                                  "entries": [entry]})  # a valid checksum over a hostile value
    async with running(settings, profile, pods=[GOLD], containers=[gold]) as r:
        assert not r.conn.closed
        row = assignments(r.svc)[gold.id]
        assert row["exclusive"] and row["cpus"] == str(gold_cpus)  # adopted from the runtime's view
        assert checkpoint_entries(settings)[gold.id]["current"] == str(gold_cpus)


@pytest.mark.parametrize(("key", "value"), BAD_ANNOTATIONS)
async def test_bad_annotation_at_create_names_annotation_and_value(workdir: Path, key: str, value: str) -> None:
    settings = make_settings(workdir)
    async with running(settings) as r:
        bad_pod = pod("bad", annotations={f"nri-pinner.io/{key}": value})
        with pytest.raises(TtrpcStatusError) as failed:
            await r.conn.create_container(create(bad_pod, container(bad_pod, "app", 2000, 2000)))
        message = failed.value.status_message
        assert "nri-pinner: " in message and f"nri-pinner.io/{key}" in message
        assert repr(value[:40])[1:-1] in message  # the value (cut short when huge), quoted
        assert "Exceeds the limit" not in message and "float infinity" not in message
        assert not r.conn.closed
        assert metric(r.svc, "nri_pinner_pinning_errors_total", {"reason": "BadAnnotation"}) == 1
        assert metric(r.svc, "nri_pinner_bad_input_total", {"source": "annotation"}) == 1
        assert document(r.svc)["pools"]["exclusive"] == ""


async def test_admission_rejection_is_logged_as_a_decision_not_an_error(workdir: Path) -> None:
    settings = make_settings(workdir, topology_manager={"policy": "single-numa-node"})
    with structlog.testing.capture_logs() as logs:
        async with running(settings) as r:
            big_pod = pod("big")
            with pytest.raises(TtrpcStatusError, match="TopologyAffinityError"):
                await r.conn.create_container(create(big_pod, container(big_pod, "app", 8000, 8000)))
    refused = [e for e in logs if "TopologyAffinityError" in json.dumps(e, default=str)]
    assert refused and all(e["log_level"] == "info" for e in refused), refused
    assert not [e for e in logs if e["log_level"] == "error"]
