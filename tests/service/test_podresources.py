"""The PodResources fetcher against a fake kubelet: real gRPC over a real unix socket.

The fake kubelet (testkit/fake_kubelet.py) stands in for the kubelet, which cannot run on this VM.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
import structlog
from prometheus_client import CollectorRegistry, generate_latest

from nri_pinner.edge.clients.podresources import PodResources, PodResourcesMetrics
from nri_pinner.engine.devicemanager.hints import Device
from nri_pinner.nri.gen import api_pb2 as api
from testkit.fake_kubelet import FakeKubelet

GPU = "nvidia.com/gpu"


@pytest.fixture
def kubelet(workdir: Path) -> Iterator[FakeKubelet]:
    k = FakeKubelet(str(workdir / "kubelet.sock"))
    k.set_pod("default", "train", {"cuda": [(GPU, ["GPU-1"], [1])], "sidecar": []})
    k.allocatable = [(GPU, ["GPU-0"], [0]), (GPU, ["GPU-1"], [1])]
    with k:
        yield k


def fetcher(path: str, refresh: float = 60.0, timeout: float = 2.0) -> tuple[PodResources, CollectorRegistry]:
    registry = CollectorRegistry()
    pr = PodResources(path, refresh, timeout)
    pr.metrics = PodResourcesMetrics(registry)
    return pr, registry


def counted(registry: CollectorRegistry, sample: str) -> float:
    for line in generate_latest(registry).decode().splitlines():
        if line.startswith(sample + " "):
            return float(line.split()[-1])
    raise AssertionError(f"no sample {sample}")


def sandbox(name: str = "train", namespace: str = "default") -> api.PodSandbox:
    return api.PodSandbox(id=f"sb-{name}", name=name, namespace=namespace, uid=f"uid-{name}")


def wait_for(check: object, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def test_fetch_on_start_then_on_the_timer(kubelet: FakeKubelet) -> None:
    pr, registry = fetcher(kubelet.socket_path, refresh=0.2)
    pr.pod_started(sandbox())  # noted before the first List: its hint is then in the first view
    pr.start()
    try:
        assert kubelet.wait_calls("GetAllocatableResources", 1) and kubelet.wait_calls("List", 1)
        wait_for(lambda: pr.view.pod("default", "train") is not None)
        assert pr.held("uid-train", "cuda") == {GPU: (Device("GPU-1", frozenset({1})),)}
        assert pr.held("uid-train", "sidecar") == {}
        assert pr.allocatable() == {GPU: (Device("GPU-0", frozenset({0})), Device("GPU-1", frozenset({1})))}
        # the timer: both calls again
        assert kubelet.wait_calls("List", 3) and kubelet.wait_calls("GetAllocatableResources", 2)
        kubelet.set_pod("default", "later", {"app": [(GPU, ["GPU-0"], [0])]})
        pr.pod_started(sandbox("later"))
        wait_for(lambda: pr.held("uid-later", "app") is not None)
    finally:
        pr.close()
    assert counted(registry, 'nri_pinner_podresources_calls_total{method="List",outcome="ok"}') >= 3


def test_run_pod_sandbox_asks_for_a_list_without_waiting_for_the_timer(kubelet: FakeKubelet) -> None:
    pr, _ = fetcher(kubelet.socket_path, refresh=3600)
    pr.start()
    try:
        assert kubelet.wait_calls("List", 1)
        wait_for(lambda: pr.available)
        kubelet.set_pod("default", "new", {"app": [(GPU, ["GPU-0"], [0])]})
        started = time.monotonic()
        pr.pod_started(sandbox("new"))  # returns at once: the List runs on the fetcher thread
        assert time.monotonic() - started < 0.05
        assert kubelet.wait_calls("List", 2)
        wait_for(lambda: pr.held("uid-new", "app") == {GPU: (Device("GPU-0", frozenset({0})),)})
        assert kubelet.calls["GetAllocatableResources"] == 1  # only on the timer
    finally:
        pr.close()


def test_a_create_before_the_list_goes_on_without_the_hint_and_is_counted(kubelet: FakeKubelet) -> None:
    pr, registry = fetcher(kubelet.socket_path)
    pr.pod_started(sandbox())  # before the very first List
    assert pr.held("uid-train", "cuda") is None
    assert counted(registry, 'nri_pinner_podresources_misses_total{reason="pending"}') == 1
    assert pr.fetch()
    assert pr.held("uid-train", "cuda") == {GPU: (Device("GPU-1", frozenset({1})),)}
    kubelet.set_pod("default", "fresh", {"app": [(GPU, ["GPU-0"], [0])]})
    pr.pod_started(sandbox("fresh"))  # its List has not run yet
    assert pr.held("uid-fresh", "app") is None
    assert counted(registry, 'nri_pinner_podresources_misses_total{reason="pending"}') == 2
    assert pr.fetch()
    assert pr.held("uid-fresh", "app") == {GPU: (Device("GPU-0", frozenset({0})),)}
    pr.pod_started(sandbox("ghost"))  # never admitted by this kubelet
    assert pr.fetch()
    assert pr.held("uid-ghost", "app") is None  # its List is done and does not have it
    assert counted(registry, 'nri_pinner_podresources_misses_total{reason="unlisted"}') == 1
    # a pod known only from its containers' kubelet labels, not in the latest List: a miss, listed again
    c = api.Container(id="c9", pod_sandbox_id="sb-other", name="app")
    c.labels.update({"io.kubernetes.pod.namespace": "default", "io.kubernetes.pod.name": "other",
                     "io.kubernetes.pod.uid": "uid-other"})
    assert pr.reported(c) == {}
    assert pr.held("uid-other", "app") is None
    assert counted(registry, 'nri_pinner_podresources_misses_total{reason="unlisted"}') == 2
    assert counted(registry, 'nri_pinner_podresources_misses_total{reason="pending"}') == 2


def test_absent_socket_is_logged_once_and_retried_quietly(workdir: Path) -> None:
    path = str(workdir / "kubelet.sock")
    pr, registry = fetcher(path)
    with structlog.testing.capture_logs() as logs:
        assert not pr.fetch() and not pr.fetch() and not pr.fetch()
        pr.pod_started(sandbox())
        assert pr.held("uid-train", "cuda") is None  # no kubelet: no hint, nothing counted
        with FakeKubelet(path) as k:
            k.set_pod("default", "train", {"cuda": [(GPU, ["GPU-1"], [1])]})
            assert pr.fetch()
            assert pr.held("uid-train", "cuda") == {GPU: (Device("GPU-1", frozenset({1})),)}
    absent = [e for e in logs if "absent" in e["event"]]
    assert len(absent) == 1 and absent[0]["log_level"] == "info" and absent[0]["socket"] == path
    assert [e["log_level"] for e in logs if "found" in e["event"]] == ["info"]
    assert counted(registry, 'nri_pinner_podresources_misses_total{reason="pending"}') == 0


def test_server_errors_are_counted_logged_once_and_never_raise(kubelet: FakeKubelet) -> None:
    pr, registry = fetcher(kubelet.socket_path)
    assert pr.fetch()
    kubelet.fail["List"] = grpc.StatusCode.UNAVAILABLE
    kubelet.fail["GetAllocatableResources"] = grpc.StatusCode.INTERNAL
    with structlog.testing.capture_logs() as logs:
        assert not pr.fetch()
        assert not pr.fetch()
    failed = [e for e in logs if e["event"].startswith("PodResources call failed")]
    assert len(failed) == 1 and failed[0]["log_level"] == "warning"  # rate-limited
    assert failed[0]["code"] == "INTERNAL" and failed[0]["method"] == "GetAllocatableResources"
    assert counted(registry, 'nri_pinner_podresources_calls_total{method="List",outcome="error"}') == 2
    assert counted(registry, 'nri_pinner_podresources_calls_total{method="GetAllocatableResources",'
                             'outcome="error"}') == 2
    # the last good view stays in use
    pr.pod_started(sandbox())
    assert pr.held("uid-train", "cuda") == {GPU: (Device("GPU-1", frozenset({1})),)}
    assert pr.allocatable()[GPU][0].id == "GPU-0"


def test_a_slow_kubelet_times_out_and_is_counted(kubelet: FakeKubelet) -> None:
    pr, registry = fetcher(kubelet.socket_path, timeout=0.2)
    kubelet.delay["List"] = 1.0
    started = time.monotonic()
    assert not pr.fetch()
    assert time.monotonic() - started < 0.9  # the deadline, not the kubelet, ended the call
    assert counted(registry, 'nri_pinner_podresources_calls_total{method="List",outcome="timeout"}') == 1
    assert counted(registry, 'nri_pinner_podresources_calls_total{method="GetAllocatableResources",'
                             'outcome="ok"}') == 1


def test_container_labels_name_the_pod(kubelet: FakeKubelet) -> None:
    pr, _ = fetcher(kubelet.socket_path)
    assert pr.fetch()
    c = api.Container(id="c1", pod_sandbox_id="sb-x", name="cuda")
    c.labels.update({"io.kubernetes.pod.namespace": "default", "io.kubernetes.pod.name": "train",
                     "io.kubernetes.pod.uid": "uid-t", "io.kubernetes.container.name": "cuda"})
    assert pr.reported(c) == {GPU: (Device("GPU-1", frozenset({1})),)}
    assert pr.held("uid-t", "cuda") == pr.reported(c)  # the labels taught it the pod key
    bare = api.Container(id="c2", pod_sandbox_id="sb-unknown", name="cuda")
    assert pr.reported(bare) == {}


def test_pods_gone_from_the_node_are_forgotten(kubelet: FakeKubelet) -> None:
    pr, _ = fetcher(kubelet.socket_path)
    for i in range(300):
        pr.pod_started(sandbox(f"gone-{i}"))
    assert len(pr._pods) == 600  # uid and sandbox id each; all still waiting for their List
    assert pr.fetch()  # the List has none of them
    pr.pod_started(sandbox())
    assert set(pr._pods) == {"uid-train", "sb-train"}
    assert pr.held("uid-train", "cuda") == {GPU: (Device("GPU-1", frozenset({1})),)}  # in the last List
