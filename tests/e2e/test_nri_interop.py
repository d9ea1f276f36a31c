"""Our NRI stub against a real containerd (1.7 and 2.x): registration, Configure, Synchronize, events,
cpuset adjustments and updates of other containers, external and pre-installed plugins."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from nri_pinner.engine.cpuset import CPUSet
from nri_pinner.nri import versions

from .harness import PrivateContainerd
from .pin_plugin import (
    LOGGER_MODULE,
    PIN_MODULE,
    cmdline_of,
    online_cpus,
    plugin_argv,
    processes_with,
    read_events,
    wait_for_event,
    wait_gone,
    write_launcher,
)
from .plugins import PluginProcess

pytestmark = pytest.mark.e2e

StartPlugin = Callable[..., PluginProcess]


def _two_cpus() -> tuple[str, str]:
    """(cpu to pin to, cpu(s) for everything else) on this machine; skips on a 1-CPU machine."""
    cpus = online_cpus()
    if len(cpus) < 2:
        pytest.skip("pinning tests need at least 2 CPUs")
    return str(cpus[-1]), str(CPUSet.parse(",".join(map(str, cpus[:-1]))))


def _syncs_preinstalled_plugins(containerd_version: str) -> bool:
    nri = versions.infer_nri_version("containerd", containerd_version)
    return nri is not None and nri >= (0, 7, 0)


def test_logger_registers_configures_synchronizes_and_sees_create(
    containerd: PrivateContainerd, start_plugin: StartPlugin, tmp_path: Path
) -> None:
    existing = containerd.run_pod("burstable", 250, 500)
    log = tmp_path / "logger.jsonl"
    plugin = start_plugin(
        plugin_argv(LOGGER_MODULE, "--socket", str(containerd.nri_socket), "--log", str(log), "--idx", "40"),
        name="40-logger",
    )
    assert plugin.name == "40-logger"

    configure = wait_for_event(log, "Configure")
    print(f"\ncontainerd {containerd.runtime_key}: NRI Configure from {configure['runtime_name']} "
          f"{configure['runtime_version']} (CRI version {containerd.version})")
    assert configure["runtime_name"] == "containerd"
    assert configure["runtime_version"] == containerd.version
    sync = wait_for_event(log, "Synchronize")
    assert [p["id"] for p in sync.get("pods", [])] == [existing.sandbox_id]
    assert [c["id"] for c in sync.get("containers", [])] == existing.container_ids
    names = [e["event"] for e in read_events(log)]
    assert names[:3] == ["Connect", "Configure", "Synchronize"]

    pod = containerd.run_pod("guaranteed", 1000, 1000)
    (cid,) = pod.container_ids
    create = wait_for_event(log, "CreateContainer", lambda e: e["container"]["id"] == cid)
    assert create["pod"]["id"] == pod.sandbox_id
    assert create["container"]["linux"]["cgroups_path"] == f"{pod.cgroup_parent}/{cid}"
    # The state events around it arrive too, in the runtime's order.
    wait_for_event(log, "PostStartContainer", lambda e: e["container"]["id"] == cid)
    order = [e["event"] for e in read_events(log) if e.get("container", {}).get("id") == cid]
    assert order == ["CreateContainer", "PostCreateContainer", "StartContainer", "PostStartContainer"]


def test_pin_plugin_pins_new_container_and_updates_a_running_one(
    containerd: PrivateContainerd, start_plugin: StartPlugin, tmp_path: Path
) -> None:
    pinned, shared = _two_cpus()
    everything = CPUSet.parse(",".join(map(str, online_cpus())))
    running = containerd.run_pod("burstable", 250, 500)
    (running_id,) = running.container_ids
    assert CPUSet.parse(containerd.cgroup_cpuset(running_id)) == everything  # before: nobody touched it

    log = tmp_path / "pin.jsonl"
    start_plugin(
        plugin_argv(PIN_MODULE, "--socket", str(containerd.nri_socket), "--log", str(log),
                    "--cpus", pinned, "--others", shared),
        name="50-pin-fixed",
    )
    assert wait_for_event(log, "Synchronize")["containers"] == 1

    pod = containerd.run_pod("guaranteed", 1000, 1000)
    (cid,) = pod.container_ids
    create = wait_for_event(log, "CreateContainer", lambda e: e["container"] == cid)
    assert create["updates"] == {running_id: shared}  # the running container, updated in the same reply

    assert containerd.cgroup_cpuset(cid) == pinned
    assert containerd.cpus_allowed_list(cid) == pinned
    assert CPUSet.parse(containerd.cgroup_cpuset(running_id)) == CPUSet.parse(shared)
    assert CPUSet.parse(containerd.cpus_allowed_list(running_id)) == CPUSet.parse(shared)
    print(f"\ncontainerd {containerd.version}: new container pinned to {pinned}, "
          f"running container moved {everything} -> {shared}")


def test_preinstalled_plugin_registers_and_pins(containerd: PrivateContainerd, tmp_path: Path) -> None:
    pinned, _ = _two_cpus()
    log = tmp_path / "pre.jsonl"
    launcher = write_launcher(
        tmp_path / "launch-pin-fixed", plugin_argv(PIN_MODULE, "--cpus", pinned, "--log", str(log)),
        tmp_path / "pre.stderr",
    )
    index_name = "60-pinfixed"
    config = b"# pin-fixed config, handed over verbatim\n"
    installed = containerd.install_preinstalled_plugin(index_name, launcher, config)
    since = containerd.log_offset()
    try:
        containerd.restart()  # pre-installed plugins are launched only at containerd start
        containerd.wait_plugin_active(index_name, since=since)
        assert f"pre-connected:{index_name}[" in containerd.log_text(since)

        # Launched by containerd itself: a child of the daemon, running our launcher's command.
        procs = processes_with(str(log))
        assert len(procs) == 1, procs
        assert str(containerd.config_path) in cmdline_of(procs[0][1])
        configure = wait_for_event(log, "Configure")
        assert configure["config"] == config.decode()
        assert configure["runtime_version"] == containerd.version

        pod = containerd.run_pod("guaranteed", 1000, 1000)
        (cid,) = pod.container_ids
        wait_for_event(log, "CreateContainer", lambda e: e["container"] == cid)
        synced = [e for e in read_events(log) if e["event"] == "Synchronize"]
        if _syncs_preinstalled_plugins(containerd.version):
            assert [(e["pods"], e["containers"]) for e in synced] == [(0, 0)]  # empty node
        else:
            # NRI v0.6.1 starts pre-installed plugins before it can sync them and never does later
            # (upstream b881bc4, in v0.7.0, added that): such a plugin learns nothing of existing pods.
            assert synced == []
        print(f"\ncontainerd {containerd.version}: pre-installed {index_name} active, "
              f"Synchronize calls before the first container: {len(synced)}")
        assert containerd.cgroup_cpuset(cid) == pinned
        assert containerd.cpus_allowed_list(cid) == pinned
        containerd.remove_pod(pod)
    finally:
        installed.unlink(missing_ok=True)
        since = containerd.log_offset()
        containerd.restart()  # without the plugin: later tests get a plain runtime
        containerd.wait_for_log("Registered namespace .*k8s.io.* with NRI", since=since)
    # The old daemon's socket closed: a pre-installed plugin is never relaunched, so it must exit.
    assert wait_gone(str(log)), f"pre-installed plugin outlived its containerd: {processes_with(str(log))}"
