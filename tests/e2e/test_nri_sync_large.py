"""A plugin connecting to a node whose Synchronize exceeds ttrpc's 4 MiB message limit.

NRI v0.6.1 (containerd 1.7) sends the whole state in one message (its frame cap is 16 MiB); Go plugins
with ttrpc's 4 MiB receive limit drop out there. From NRI v0.7 the runtime retries an oversized sync in
chunks flagged ``more``, which the plugin must echo. Our stub must synchronize in both cases, within the
runtime's request timeout (the runtime enforces it: a late answer fails the sync).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from nri_pinner.nri import versions

from .harness import PodHandle, PrivateContainerd
from .pin_plugin import PIN_MODULE, online_cpus, plugin_argv, read_events, sync_seconds, wait_for_event
from .plugins import PluginProcess

pytestmark = pytest.mark.e2e

PODS = 7
BALLAST_BYTES = 800 * 1024  # per pod: 7 x 800 KiB ~ 5.5 MiB of sync, under containerd's 16 MiB CRI limit
TTRPC_MESSAGE_LIMIT = 4 << 20
BALLAST_KEY = "e2e.nri-pinner.io/ballast"


@pytest.fixture
def ballast_pods(containerd: PrivateContainerd) -> Iterator[list[PodHandle]]:
    """PODS running BestEffort pods, each sandbox carrying a BALLAST_BYTES annotation; removed after."""
    pods: list[PodHandle] = []
    try:
        for i in range(PODS):
            ballast = f"{i:02d}" + "x" * (BALLAST_BYTES - 2)
            pods.append(containerd.run_pod("besteffort", annotations={BALLAST_KEY: ballast}))
        yield pods
    finally:
        for pod in pods:
            containerd.remove_pod(pod, stop_timeout_s=2)


_SENT_RE = re.compile(r"sending sync message, (\d+)/\d+, \d+/\d+ \(more: (true|false)\)")


def accepted_sync_messages(runtime_log: str) -> list[tuple[int, bool]]:
    """(pods, more) of each sync message NRI >= v0.7 logged as sent, minus those it then retried
    as oversized (``oversized message, retrying in smaller chunks`` follows them)."""
    sent: list[tuple[int, bool]] = []
    for line in runtime_log.splitlines():
        found = _SENT_RE.search(line)
        if found:
            sent.append((int(found.group(1)), found.group(2) == "true"))
        elif "oversized message, retrying" in line and sent:
            sent.pop()
    return sent


def _chunked_sync(containerd_version: str) -> bool:
    nri = versions.infer_nri_version("containerd", containerd_version)
    return nri is not None and nri >= (0, 7, 0)


def test_oversized_sync_is_accepted_and_answered(
    containerd: PrivateContainerd,
    ballast_pods: list[PodHandle],
    start_plugin: Callable[..., PluginProcess],
    tmp_path: Path,
) -> None:
    pinned = str(online_cpus()[-1])
    since = containerd.log_offset()
    log = tmp_path / "pin.jsonl"
    plugin = start_plugin(
        plugin_argv(PIN_MODULE, "--socket", str(containerd.nri_socket), "--log", str(log), "--cpus", pinned),
        name="50-pin-fixed",
    )
    runtime_log = containerd.log_text(since)
    assert "failed to synchronize" not in runtime_log

    sync = wait_for_event(log, "Synchronize")
    assert (sync["pods"], sync["containers"]) == (PODS, PODS)
    assert sync["encoded_bytes"] > TTRPC_MESSAGE_LIMIT
    chunks = sync["stub_requests"] - 1  # requests served before the handler ran: Configure + sync chunks
    sent = accepted_sync_messages(runtime_log)
    if _chunked_sync(containerd.version):
        # The runtime rejects a chunk reply that does not echo `more`; it accepted every chunk.
        assert chunks >= 2 and [more for _, more in sent] == [True] * (chunks - 1) + [False], (chunks, sent)
        assert sum(pods for pods, _ in sent) == PODS
        assert re.search(r'plugin \\?"50-pin-fixed\\?" connected and synchronized', runtime_log)
    else:
        assert chunks == 1 and sent == []  # one unchunked message of > 4 MiB, no sync debug lines
    seconds = sync_seconds(runtime_log, plugin.name)
    print(f"\ncontainerd {containerd.version}: sync of {PODS} pods / {PODS} containers, "
          f"{sync['encoded_bytes'] / 2**20:.2f} MiB in {chunks} message(s), answered in {seconds * 1000:.0f} ms "
          f"(runtime side; plugin handler {sync['handler_s'] * 1000:.1f} ms)")

    # Synchronized plugins are in the event path: the next container is created through it.
    pod = containerd.run_pod("besteffort")
    (cid,) = pod.container_ids
    wait_for_event(log, "CreateContainer", lambda e: e["container"] == cid)
    assert containerd.cgroup_cpuset(cid) == pinned
    containerd.remove_pod(pod)
    assert [e["event"] for e in read_events(log)].count("Synchronize") == 1


def test_pinner_synchronizes_an_oversized_node(containerd: PrivateContainerd, ballast_pods: list[PodHandle]) -> None:
    """nri-pinner itself on a > 4 MiB sync (chunked on 2.x, one message on 1.7): its state afterwards
    lists every running container, and it pins the next Guaranteed container."""
    from .pinner import PLUGIN_NAME, start_pinner

    since = containerd.log_offset()
    pinner = start_pinner(containerd)
    started = time.monotonic()
    doc = pinner.status()
    known = {a["container_id"] for a in doc["assignments"]}
    running = {cid for pod in ballast_pods for cid in pod.container_ids}
    assert running <= known, f"missing {running - known}"
    log = containerd.log_text(since)
    chunks = accepted_sync_messages(log)
    if _chunked_sync(containerd.version):
        assert len(chunks) >= 2 and chunks[-1][1] is False and all(more for _, more in chunks[:-1])
    synced = [line for line in pinner.process.log_text().splitlines() if '"synchronized"' in line]
    assert synced, pinner.process.log_text()[-2000:]
    from .pin_plugin import sync_seconds

    took = sync_seconds(log, PLUGIN_NAME)
    assert took < 2.0  # the runtime's request timeout covers every chunk together
    print(f"\ncontainerd {containerd.version}: nri-pinner synchronized {len(running)} containers "
          f"({sum(len(p.sandbox_config.annotations.get(BALLAST_KEY, '')) for p in ballast_pods) / 2**20:.1f} MiB of "
          f"annotations) in {max(len(chunks), 1)} message(s), {took * 1000:.0f} ms runtime-side; "
          f"status answered {time.monotonic() - started:.2f}s after start")
    guar = containerd.run_pod("guaranteed", 1000, 1000)
    assert containerd.cpus_allowed_list(guar.container_ids[0]) == "1"
    containerd.remove_pod(guar)


def test_sync_beyond_16_mib_is_reported_and_recovers(containerd: PrivateContainerd) -> None:
    """containerd 1.7 (NRI v0.6.1) cannot send a sync over its 16 MiB frame limit: nri-pinner must say
    so in its log and reconnect, and synchronize once the node's state has shrunk."""
    if _chunked_sync(containerd.version):
        pytest.skip(f"containerd {containerd.version} chunks Synchronize: no single message over 16 MiB")
    from .kubelet_model import ContainerResources
    from .pinner import PLUGIN_NAME, start_pinner

    pods: list[PodHandle] = []
    try:
        # pod and container annotations share the ballast, so no single CRI list reply passes 16 MiB
        for i in range(11):
            pod = containerd.run_pod("besteffort", containers=0, annotations={BALLAST_KEY: "p" * BALLAST_BYTES})
            ballast = {BALLAST_KEY: f"{i:02d}" + "c" * BALLAST_BYTES}
            containerd.add_container(pod, "c0", ContainerResources(), annotations=ballast)
            pods.append(pod)
        since = containerd.log_offset()
        with pytest.raises(Exception, match="not connected"):
            start_pinner(containerd, timeout=5, nri={"reconnect_max_seconds": 1.0})
        pinner_log = containerd.plugins[-1].log_text()
        assert "message too large" in pinner_log and "more than the 16777216 allowed" in pinner_log, pinner_log[-3000:]
        while len(pods) > 3:
            containerd.remove_pod(pods.pop(), stop_timeout_s=2)
        containerd.wait_plugin_active(PLUGIN_NAME, since=since, timeout=30)
        guar = containerd.run_pod("guaranteed", 1000, 1000)
        assert containerd.cpus_allowed_list(guar.container_ids[0]) == "1"
        print(f"\ncontainerd {containerd.version}: sync over 16 MiB refused and logged, nri-pinner reconnected "
              f"and synchronized after the state shrank")
        containerd.remove_pod(guar)
    finally:
        for pod in pods:
            containerd.remove_pod(pod, stop_timeout_s=2)
