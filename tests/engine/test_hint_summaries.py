"""Provider hint summaries are formatted when read (status), not during the admission the runtime waits on."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from gpu_box import engine_for, write_gpu_box

from nri_pinner.engine.admission_engine import AdmissionRequest
from nri_pinner.engine.devicemanager.hints import Device
from nri_pinner.engine.topologymanager import explain


@pytest.fixture(scope="module")
def box(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_gpu_box(tmp_path_factory.mktemp("gpu-box"))


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    seen: list[object] = []
    real = explain.summarize

    def counting(answer: Any, limit: int = 6) -> dict[str, str]:
        seen.append(answer)
        return real(answer, limit)

    monkeypatch.setattr(explain, "summarize", counting)
    return seen


def gpu_request(pod: str, cpus: int, node: int) -> AdmissionRequest:
    return AdmissionRequest(pod, "c", "guaranteed", cpus * 1000, cpus * 1000,
                            devices={"nvidia": [Device(f"gpu{node}", frozenset({node}))]})


def test_admission_formats_no_summary_and_names_its_providers(box: Path, calls: list[object]) -> None:
    e = engine_for(box, "single-numa-node", memory=False)
    _, d = e.admit(e.initial_state(), gpu_request("a", 2, 1))
    assert d.admitted
    assert calls == []  # nothing formatted while the reply waits
    assert sorted(d.provider_hints) == ["cpu", "devices"] and len(d.provider_hints) == 2
    assert calls == []  # the providers are known without formatting
    assert d.provider_hints["devices"] == {"nvidia": "{1} {0,1}~"}
    assert len(calls) == 2  # both formatted at the first read ...
    assert d.provider_hints["cpu"] == {"cpu": "{0} {1} {0,1}~"} and len(calls) == 2  # ... and only once


def test_a_rejection_keeps_its_summaries_and_blame(box: Path, calls: list[object]) -> None:
    e = engine_for(box, "single-numa-node", memory=False)
    state = e.initial_state()
    for i in range(8):  # fill node 1 so a GPU there cannot get its CPUs
        state, d = e.admit(state, gpu_request(f"f{i}", 2, 1))
    _, d = e.admit(state, gpu_request("late", 16, 1))
    assert not d.admitted and d.blamed
    explained = d.explain()
    assert explained["provider_hints"]["devices"] == {"nvidia": "{1} {0,1}~"}
    assert explained["blamed"] == list(d.blamed)


def test_the_lazy_form_serializes_as_the_eager_one(box: Path) -> None:
    e = engine_for(box, "best-effort", memory=False)
    _, d = e.admit(e.initial_state(), gpu_request("a", 2, 0))
    lazy = json.loads(json.dumps({"hints": d.explain(lazy=True)}, default=dict))  # as status_server sends it
    assert lazy == {"hints": d.explain()}
    assert lazy["hints"]["provider_hints"]["devices"] == {"nvidia": "{0} {0,1}~"}


def test_readers_on_several_threads_all_see_every_provider(box: Path) -> None:
    e = engine_for(box, "best-effort", memory=False)
    state = e.initial_state()
    decisions = []
    for i in range(40):
        _, d = e.admit(state, gpu_request(f"p{i}", 2, i % 2))
        decisions.append(d)
    want = [dict(e.admit(state, gpu_request(f"p{i}", 2, i % 2))[1].provider_hints) for i in range(40)]
    seen: list[list[dict[str, Any]]] = [[] for _ in range(6)]
    start = threading.Barrier(6)

    def read(slot: int) -> None:
        start.wait()
        for d in decisions:
            seen[slot].append({k: dict(v) for k, v in d.provider_hints.items()})

    threads = [threading.Thread(target=read, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for got in seen:
        assert got == want
