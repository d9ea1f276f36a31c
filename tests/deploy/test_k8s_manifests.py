"""The kustomizations in packaging/kubernetes, rendered with `kubectl kustomize` and validated with
`kubernetes-validate --strict`: what a node operator deploys on a fleet. Each test names the problem it
keeps from coming back."""

from __future__ import annotations

import posixpath
import shutil
import subprocess
import sys
import tomllib
from importlib.resources import files
from pathlib import Path
from typing import Any

import pytest

yaml = pytest.importorskip("yaml", reason="PyYAML is needed to parse the manifests (pip install pyyaml==6.0.3)")

from k8s_manifests import (  # noqa: E402  (after the importorskip above)
    BASE,
    CONFIG_MOUNT,
    KUBE_DIR,
    Mount,
    config_table,
    configmap_settings,
    covering_mount,
    kustomization,
    mounts,
    objects,
    one,
    plugin_container,
    pod_spec,
    render,
    render_text,
)

from nri_pinner import __version__  # noqa: E402
from nri_pinner.cli.install import DEPLOYMENT_ENV  # noqa: E402

OVERLAYS = sorted(p.parent for p in (KUBE_DIR / "overlays").glob("*/kustomization.yaml"))
NODE_GROUPS = [d for d in OVERLAYS if (d / "config.toml").exists()]
DEPLOYABLE = [BASE, *OVERLAYS]
NAMESPACE_DIR = KUBE_DIR / "namespace"
KUBERNETES_VERSION = "1.32.0"  # the kubectl from Debian trixie
NOT_BUILT_IN = {"ServiceMonitor"}  # CRDs: kubernetes-validate knows built-in kinds only
NODE_GROUP_LABEL = "nri-pinner.io/node-group"


def ids(dirs: list[Path]) -> list[str]:
    return [str(d.relative_to(KUBE_DIR)) for d in dirs]


def validate(tmp_path: Path, text: str) -> subprocess.CompletedProcess[str]:
    docs = [d for d in yaml.safe_load_all(text) if d is not None and d["kind"] not in NOT_BUILT_IN]
    path = tmp_path / "rendered.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    tool = Path(sys.executable).parent / "kubernetes-validate"
    return subprocess.run([str(tool), "--strict", "-k", KUBERNETES_VERSION, str(path)],
                          capture_output=True, text=True, check=False)


def flat(table: dict[str, Any]) -> dict[tuple[str, str], Any]:
    """{(section, key): value}; top-level keys under section ""."""
    out: dict[tuple[str, str], Any] = {}
    for name, value in table.items():
        if isinstance(value, dict):
            out.update({(name, k): v for k, v in value.items()})
        else:
            out[("", name)] = value
    return out


# ---------------------------------------------------------------------------------------- rendering

@pytest.mark.parametrize("directory", [*DEPLOYABLE, NAMESPACE_DIR], ids=ids([*DEPLOYABLE, NAMESPACE_DIR]))
def test_every_kustomization_renders_and_passes_strict_validation(directory: Path, tmp_path: Path) -> None:
    res = validate(tmp_path, render_text(directory))
    assert res.returncode == 0, res.stdout + res.stderr
    kinds = sorted(d["kind"] for d in render(directory))
    if directory == NAMESPACE_DIR:  # applied once; no node group renders it (test_k8s_overlays.py)
        assert kinds == ["Namespace"]
        return
    assert {"ConfigMap", "DaemonSet"} <= set(kinds) and "Namespace" not in kinds
    for obj in render(directory):
        assert obj["metadata"]["namespace"] == "nri-pinner", obj["metadata"]["name"]


def test_strict_validation_rejects_an_unknown_field(tmp_path: Path) -> None:
    """Keeps the validation honest: a misspelt field must fail it."""
    docs = list(render(BASE))
    ds = next(d for d in docs if d["kind"] == "DaemonSet")
    ds["spec"]["template"]["spec"]["containers"][0]["securityContxt"] = {}
    res = validate(tmp_path, yaml.safe_dump_all(docs))
    assert res.returncode != 0 and "securityContxt" in res.stdout + res.stderr


def test_servicemonitor_component_selects_the_metrics_service(tmp_path: Path) -> None:
    d = kustomization(tmp_path, "with-monitor", [BASE],
                      [KUBE_DIR / "components" / "metrics", KUBE_DIR / "components" / "servicemonitor"])
    text = render_text(d)
    res = validate(tmp_path, text)
    assert res.returncode == 0, res.stdout + res.stderr
    docs = [x for x in yaml.safe_load_all(text) if x]
    (monitor,) = [x for x in docs if x["kind"] == "ServiceMonitor"]
    (service,) = [x for x in docs if x["kind"] == "Service"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == [service["spec"]["ports"][0]["name"]]


def test_podresources_component_mounts_the_kubelet_socket_read_only(tmp_path: Path) -> None:
    """The socket [podresources] connects to is under the component's mount, read-only, and the
    component adds nothing else writable (the base's writable set stays as it was)."""
    d = kustomization(tmp_path, "with-podresources", [KUBE_DIR / "overlays" / "numa-aligned"],
                      [KUBE_DIR / "components" / "podresources"])
    res = validate(tmp_path, render_text(d))
    assert res.returncode == 0, res.stdout + res.stderr
    all_mounts = mounts(d)
    socket = configmap_settings(d).podresources.socket
    m = covering_mount(socket, all_mounts)
    assert m is not None and m.read_only, f"{socket} is not under a read-only mount"
    assert m.host_path == posixpath.dirname(socket) == m.container_path
    assert {x.host_path for x in all_mounts if not x.read_only} == {
        x.host_path for x in mounts(KUBE_DIR / "overlays" / "numa-aligned") if not x.read_only}
    assert covering_mount(socket, mounts(BASE)) is None  # only the component mounts it


# ------------------------------------------------------------------ Found: privileged, mounts, token

@pytest.mark.parametrize("directory", DEPLOYABLE, ids=ids(DEPLOYABLE))
def test_no_privilege_no_capability_no_token(directory: Path) -> None:
    spec, container = pod_spec(directory), plugin_container(directory)
    sc = container["securityContext"]
    assert sc["privileged"] is False
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}  # nothing added back
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert spec["automountServiceAccountToken"] is False
    assert not any(spec.get(k, False) for k in ("hostPID", "hostNetwork", "hostIPC"))
    assert {"name": DEPLOYMENT_ENV, "value": "daemonset"} in container["env"]
    assert container["command"] == ["nri-pinner", "run", "--config", f"{CONFIG_MOUNT}/config.toml"]


def test_sockets_are_mounted_read_only_and_only_owned_paths_are_writable() -> None:
    s, all_mounts = configmap_settings(), mounts()

    def mount_of(path: str) -> Mount:
        found = covering_mount(path, all_mounts)
        assert found is not None, f"{path} (from the config) is not under any volumeMount"
        return found

    # Sockets it connects to: their directories, read-only (connect() needs no write access to the mount).
    for path, host in ((s.nri.socket, "/var/run/nri"), (s.reconcile.cri_socket, "/run/containerd"),
                       (s.reconcile.systemd_bus, "/run/systemd")):
        m = mount_of(path)
        assert m.read_only, f"{host} must be read-only: the plugin only connects to {path}"
        assert m.host_path == host and posixpath.dirname(path) == m.container_path
    # What it writes: its own state and socket directories, and cgroup cpuset files.
    for path, host in ((s.state.checkpoint, "/var/lib/nri-pinner"), (s.inspect.socket, "/run/nri-pinner")):
        m = mount_of(path)
        assert not m.read_only and m.host_path == host and posixpath.dirname(path) == m.container_path
    cgroup = mount_of(s.reconcile.cgroup_root)  # pool changes written into containers' cgroups
    assert s.reconcile.cgroup_writes and cgroup.host_path == "/sys/fs/cgroup" and not cgroup.read_only
    sysfs = mount_of(posixpath.join(s.sysfs_root, "sys/devices/system/cpu"))
    assert sysfs.read_only and sysfs.host_path == "/sys"
    assert {m.host_path for m in all_mounts if not m.read_only} == {
        "/sys/fs/cgroup", "/var/lib/nri-pinner", "/run/nri-pinner"}
    config = mount_of(f"{CONFIG_MOUNT}/config.toml")
    assert config.host_path is None and config.read_only
    volume = next(v for v in pod_spec()["volumes"] if v["name"] == config.volume)
    assert volume["configMap"]["name"] == one(BASE, "ConfigMap")["metadata"]["name"]


def test_pod_security_admission_allows_the_namespace() -> None:
    labels = one(NAMESPACE_DIR, "Namespace")["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "privileged"  # hostPath is beyond "baseline"


# -------------------------------------------------- Found: every node, no opt-in, no probes, no port

@pytest.mark.parametrize("directory", DEPLOYABLE, ids=ids(DEPLOYABLE))
def test_nodes_opt_in_by_label_and_the_pod_is_node_critical(directory: Path) -> None:
    spec = pod_spec(directory)
    assert spec["nodeSelector"]["kubernetes.io/os"] == "linux"
    assert spec["nodeSelector"][NODE_GROUP_LABEL]  # Exists-tolerations only reach opted-in nodes
    assert spec["tolerations"] == [{"operator": "Exists"}]
    assert spec["priorityClassName"] == "system-node-critical"
    res = plugin_container(directory)["resources"]
    assert res["requests"]["cpu"] and res["requests"]["memory"] and res["limits"]["memory"]
    strategy = one(directory, "DaemonSet")["spec"]["updateStrategy"]
    assert strategy["type"] == "RollingUpdate"
    assert strategy["rollingUpdate"]["maxSurge"] == 0  # two pinners on one node would fight over cpusets
    assert strategy["rollingUpdate"]["maxUnavailable"] == 1


def test_node_groups_are_disjoint_daemonsets() -> None:
    seen: dict[str, str] = {}
    for d in [BASE, *NODE_GROUPS]:
        ds = one(d, "DaemonSet")
        group = ds["spec"]["template"]["spec"]["nodeSelector"][NODE_GROUP_LABEL]
        assert group not in seen.values(), f"{d.name} selects the same nodes as another group"
        seen[ds["metadata"]["name"]] = group
        selector = ds["spec"]["selector"]["matchLabels"]
        assert selector["app.kubernetes.io/instance"] == group  # no DaemonSet adopts another group's pods
        assert selector.items() <= ds["spec"]["template"]["metadata"]["labels"].items()
    assert len(seen) == len(NODE_GROUPS) + 1 >= 3


@pytest.mark.parametrize("directory", DEPLOYABLE, ids=ids(DEPLOYABLE))
def test_probes_use_health_endpoints_on_the_declared_metrics_port(directory: Path) -> None:
    container, settings = plugin_container(directory), configmap_settings(directory)
    (port,) = container["ports"]
    assert port == {"name": "metrics", "containerPort": settings.metrics.port, "protocol": "TCP"}
    assert settings.metrics.enabled and settings.metrics.address not in ("127.0.0.1", "localhost", "::1")
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}


def test_metrics_overlay_makes_the_pods_scrapeable() -> None:
    d = KUBE_DIR / "overlays" / "metrics"
    (service,) = objects(d, "Service")
    template = one(d, "DaemonSet")["spec"]["template"]
    assert service["spec"]["selector"].items() <= template["metadata"]["labels"].items()
    assert service["spec"]["ports"][0]["targetPort"] == "metrics"
    port = configmap_settings(d).metrics.port
    assert template["metadata"]["annotations"] == {
        "prometheus.io/scrape": "true", "prometheus.io/port": str(port), "prometheus.io/path": "/metrics"}


# --------------------------------------------------------- Found: one ConfigMap, no rollout, e2e image

def test_configmap_is_generated_and_a_config_change_rolls_the_pods(tmp_path: Path) -> None:
    copy = tmp_path / "kubernetes"
    shutil.copytree(KUBE_DIR, copy)

    def configmap_ref(directory: Path) -> str:
        docs = [d for d in yaml.safe_load_all(render_text(directory)) if d]
        ds = next(d for d in docs if d["kind"] == "DaemonSet")
        (cm,) = [d for d in docs if d["kind"] == "ConfigMap"]
        (vol,) = [v for v in ds["spec"]["template"]["spec"]["volumes"] if "configMap" in v]
        assert vol["configMap"]["name"] == cm["metadata"]["name"]
        return str(cm["metadata"]["name"])

    before = configmap_ref(copy / "base")
    assert before.startswith("nri-pinner-config-") and before != "nri-pinner-config-"
    config = copy / "base" / "config.toml"
    config.write_text(config.read_text().replace('level = "info"', 'level = "debug"'))
    after = configmap_ref(copy / "base")
    assert after != before  # a new name in the pod template: the DaemonSet rolls its pods
    group = copy / "overlays" / NODE_GROUPS[0].name
    assert configmap_ref(group) == configmap_ref(NODE_GROUPS[0])  # the group has its own config


def test_base_config_is_the_default_but_for_sysfs_and_metrics() -> None:
    """Fails when the packaged default.toml and the DaemonSet's config drift apart."""
    default = tomllib.loads(files("nri_pinner.config").joinpath("default.toml").read_text())
    mapped = config_table()
    assert mapped.pop("sysfs_root") == "/host"
    default.pop("sysfs_root")
    assert mapped.pop("metrics") == {**default.pop("metrics"), "enabled": True, "address": "0.0.0.0"}
    assert mapped == default
    configmap_settings()  # and it passes the real validation


@pytest.mark.parametrize("directory", NODE_GROUPS, ids=ids(NODE_GROUPS))
def test_node_group_config_differs_from_the_base_only_in_pinning_policy(directory: Path) -> None:
    configmap_settings(directory)  # valid
    base, group = flat(config_table()), flat(config_table(directory))
    assert set(group) == set(base)
    changed = {key for key in base if base[key] != group[key]}
    assert changed and {section for section, _ in changed} <= {"cpu_manager", "topology_manager"}, changed


def test_image_is_a_registry_image_of_this_version() -> None:
    image = plugin_container()["image"]
    name, tag = image.rsplit(":", 1)
    assert tag == __version__
    assert not name.startswith("e2e.local/") and "/" in name


def test_covering_mount_picks_the_deepest() -> None:
    ms = [Mount("/sys", "/sys", True, "a"), Mount("/sys/fs/cgroup", "/sys/fs/cgroup", True, "b")]
    assert covering_mount("/sys/fs/cgroup/cpuset", ms) == ms[1]
    assert covering_mount("/sys/devices", ms) == ms[0]
    assert covering_mount("/system", ms) is None


def test_readme_names_every_mount_and_the_capabilities() -> None:
    readme = (KUBE_DIR.parents[1] / "docs" / "install.md").read_text()  # the README's install page
    section = readme.split("### Privileges", 1)[1].split("\n## ", 1)[0]
    for m in mounts():
        assert f"`{m.container_path}`" in section, f"README's Privileges section does not explain {m.container_path}"
    assert "drop: [ALL]" in section or 'drop: ["ALL"]' in section


def test_readme_tells_what_a_rejection_and_a_rolling_update_really_do() -> None:
    docs = KUBE_DIR.parents[1] / "docs"  # the README's pages: rejections are read intent, rolling updates install
    readme = (docs / "kubernetes-intent.md").read_text() + (docs / "install.md").read_text()
    flat_text = " ".join(readme.split())
    assert "as a kubelet admission failure would" not in flat_text  # it does not: no reschedule
    assert "`CreateContainerError`" in flat_text and "retries the create on the same node" in flat_text
    assert "nri_pinner_admission_errors_total" in flat_text
    assert "Rolling updates leave a node unpinned" in flat_text and "`maxSurge: 0`" in flat_text
