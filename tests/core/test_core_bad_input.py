"""Bad input never fails Synchronize and never unpins the node (issue 20, defects 1, 2 and 4), at the
core: one pod whose data cannot be read next to a Guaranteed container that must keep its exclusive
CPUs. (Was the rule tests of tests/service/test_service_bad_input.py, through the whole stack; the
refusal's way through the stub stays there.)"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

import pytest
import structlog.testing
from core_harness import container, cpus_of, create, make_core, mems_for, pod

from nri_pinner.core.effects import Refusal
from nri_pinner.engine.cpuset import CPUSet
from nri_pinner.nri.gen import api_pb2 as api

GOLD = pod("gold")
GOLD_CPUS = CPUSet.parse("2,8")  # one core of socket 0

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


def events(logs: list[MutableMapping[str, Any]], name: str) -> list[MutableMapping[str, Any]]:
    return [e for e in logs if str(e["event"]).startswith(name)]


def gold_running() -> api.Container:
    return container(GOLD, "app", 2000, 2000, cpus=str(GOLD_CPUS), mems="0")


@pytest.mark.parametrize(("key", "value"), BAD_ANNOTATIONS)
def test_bad_annotation_never_fails_synchronize(key: str, value: str) -> None:
    bad_pod = pod("bad", annotations={f"nri-pinner.io/{key}": value})
    bad = container(bad_pod, "app", 2000, 2000, cpus="0-11")
    gold = gold_running()
    e = make_core(synchronized=False)
    assert gold.linux.resources.cpu.mems == mems_for(e.topology, GOLD_CPUS)
    with structlog.testing.capture_logs() as logs:
        e.sync([GOLD, bad_pod], [gold, bad])  # answered, never raised
    rows = e.assignments()
    assert rows[gold.id]["exclusive"] and rows[gold.id]["cpus"] == str(GOLD_CPUS)
    shared = e.topology.online - GOLD_CPUS
    assert not rows[bad.id]["exclusive"] and rows[bad.id]["cpus"] == str(shared)
    # the rest of the node keeps working: a new Guaranteed container avoids gold's CPUs
    assert cpus_of(e.handle(create(GOLD, container(GOLD, "next", 2000, 2000))).reply).isdisjoint(GOLD_CPUS)
    assert e.metric("nri_pinner_bad_input_total", {"source": "annotation"}) == 1
    [warning] = events(logs, "container data unreadable")
    assert f"nri-pinner.io/{key}" in str(warning["error"]) and warning["container"] == "app"


@pytest.mark.parametrize("value", ["\u00b2", "0-999999999", "99999999999", "8192", "2,8,x"])
def test_hostile_checkpoint_value_never_fails_synchronize(value: str) -> None:
    gold = gold_running()
    entry = {"container_id": gold.id, "sandbox_id": GOLD.id, "pod": "uid-gold", "container": "app",
             "admitted": value, "current": value, "exclusive": True, "init": False, "restartable": False,
             "numa_affinity": None}
    # the body of a checkpoint file with a valid checksum over a hostile value
    e = make_core(prior={"policy": "static", "reserved": "0", "shared": "", "entries": [entry]}, synchronized=False)
    e.sync([GOLD], [gold])
    row = e.assignments()[gold.id]
    assert row["exclusive"] and row["cpus"] == str(GOLD_CPUS)  # adopted from the runtime's view
    assert e.entries()[gold.id]["current"] == str(GOLD_CPUS)


@pytest.mark.parametrize(("key", "value"), BAD_ANNOTATIONS)
def test_bad_annotation_at_create_names_annotation_and_value(key: str, value: str) -> None:
    e = make_core()
    bad_pod = pod("bad", annotations={f"nri-pinner.io/{key}": value})
    refusal = e.handle(create(bad_pod, container(bad_pod, "app", 2000, 2000))).reply
    assert isinstance(refusal, Refusal) and refusal.kind == "admission"  # the stub fails the create with it
    message = refusal.message
    assert "nri-pinner: " in message and f"nri-pinner.io/{key}" in message
    assert repr(value[:40])[1:-1] in message  # the value (cut short when huge), quoted
    assert "Exceeds the limit" not in message and "float infinity" not in message
    assert e.metric("nri_pinner_pinning_errors_total", {"reason": "BadAnnotation"}) == 1
    assert e.metric("nri_pinner_bad_input_total", {"source": "annotation"}) == 1
    assert e.document()["pools"]["exclusive"] == ""
