"""The Kubernetes manifests parse, and the DaemonSet mounts everything its ConfigMap's config uses."""

from __future__ import annotations

import dataclasses
import posixpath
import tomllib
from importlib.resources import files

import pytest

yaml = pytest.importorskip("yaml", reason="PyYAML is needed to parse the manifests (pip install pyyaml==6.0.3)")

from k8s_manifests import (  # noqa: E402  (after the importorskip above)
    CONFIG_MOUNT,
    KUBE_DIR,
    Mount,
    configmap_config_text,
    configmap_settings,
    covering_mount,
    load_manifest,
    mounts,
    plugin_container,
    pod_spec,
)

from nri_pinner.config import load  # noqa: E402
from nri_pinner.install import DEPLOYMENT_ENV  # noqa: E402


def test_every_manifest_is_one_object_of_the_namespace() -> None:
    names = sorted(p.name for p in KUBE_DIR.glob("*.yaml"))
    assert names == ["configmap.yaml", "daemonset.yaml", "namespace.yaml"]
    ns = load_manifest("namespace.yaml")
    assert (ns["kind"], ns["metadata"]["name"]) == ("Namespace", "nri-pinner")
    for name in ("configmap.yaml", "daemonset.yaml"):
        assert load_manifest(name)["metadata"]["namespace"] == "nri-pinner"
    ds = load_manifest("daemonset.yaml")
    assert ds["kind"] == "DaemonSet"
    assert ds["spec"]["selector"]["matchLabels"].items() <= ds["spec"]["template"]["metadata"]["labels"].items()


def test_configmap_config_is_the_default_but_for_the_sysfs_root() -> None:
    """The ConfigMap is a copy of nri_pinner/config/default.toml: fail when they drift apart."""
    default = tomllib.loads(files("nri_pinner.config").joinpath("default.toml").read_text())
    mapped = tomllib.loads(configmap_config_text())
    assert mapped.pop("sysfs_root") == "/host"
    default.pop("sysfs_root")
    assert mapped == default
    settings = configmap_settings()  # and it passes the real validation
    expected = dataclasses.replace(load(""), sysfs_root="/host")
    assert settings == expected


def test_pod_security_and_namespaces() -> None:
    spec, container = pod_spec(), plugin_container()
    assert container["securityContext"]["privileged"] is True
    assert not spec.get("hostPID", False)
    assert not spec.get("hostNetwork", False)
    assert {"name": DEPLOYMENT_ENV, "value": "daemonset"} in container["env"]
    assert container["command"] == ["nri-pinner", "run", "--config", f"{CONFIG_MOUNT}/config.toml"]


def test_mounts_cover_every_path_the_config_uses() -> None:
    s, all_mounts = configmap_settings(), mounts()

    def mount_of(path: str) -> Mount:
        found = covering_mount(path, all_mounts)
        assert found is not None, f"{path} (from the config) is not under any volumeMount"
        return found

    # Sockets it connects to and directories it writes: host paths, writable.
    for path, host in (
        (s.nri.socket, "/var/run/nri"),
        (s.reconcile.cri_socket, "/run/containerd"),
        (s.state.checkpoint, "/var/lib/nri-pinner"),
        (s.inspect.socket, "/run/nri-pinner"),
    ):
        m = mount_of(path)
        assert not m.read_only, f"{path} must be writable"
        assert m.host_path == host and posixpath.dirname(path) == m.container_path
    # cgroupfs: pool changes are written into containers' cgroups (reconcile.cgroup_writes)
    cgroups = mount_of(s.reconcile.cgroup_root)
    assert s.reconcile.cgroup_writes and not cgroups.read_only and cgroups.host_path == "/sys/fs/cgroup"
    # What it only reads: the host's sysfs, read-only.
    m = mount_of(posixpath.join(s.sysfs_root, "sys/devices/system/cpu"))
    assert m.read_only and m.host_path == "/sys"
    config = mount_of(f"{CONFIG_MOUNT}/config.toml")
    assert config.host_path is None and config.read_only
    volume = next(v for v in pod_spec()["volumes"] if v["name"] == config.volume)
    assert volume["configMap"]["name"] == load_manifest("configmap.yaml")["metadata"]["name"]


def test_covering_mount_picks_the_deepest() -> None:
    ms = [Mount("/sys", "/sys", True, "a"), Mount("/sys/fs/cgroup", "/sys/fs/cgroup", True, "b")]
    assert covering_mount("/sys/fs/cgroup/cpuset", ms) == ms[1]
    assert covering_mount("/sys/devices", ms) == ms[0]
    assert covering_mount("/system", ms) is None
