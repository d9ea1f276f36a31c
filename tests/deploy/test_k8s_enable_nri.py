"""components/enable-nri (issue 35 item 9): an opt-in init container that runs `nri-pinner enable-nri` on
the host's containerd config before the plugin starts; rendered with `kubectl kustomize`."""

from __future__ import annotations

import posixpath
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml", reason="PyYAML is needed to parse the manifests (pip install pyyaml==6.0.3)")

from k8s_manifests import (  # noqa: E402  (after the importorskip above)
    BASE,
    KUBE_DIR,
    configmap_settings,
    covering_mount,
    kustomization,
    mounts,
    one,
    plugin_container,
    pod_spec,
    render,
)

from nri_pinner.cli.enable_nri import DEFAULT_SOCKET  # noqa: E402
from nri_pinner.cli.main import build_parser  # noqa: E402

ENABLE_NRI = KUBE_DIR / "components" / "enable-nri"
GROUP = KUBE_DIR / "overlays" / "general"


def init_container(directory: Path) -> dict[str, object]:
    (container,) = pod_spec(directory)["initContainers"]
    assert isinstance(container, dict)
    return container


def init_mounts(directory: Path) -> dict[str, tuple[str | None, bool]]:
    """mountPath → (host path or None, read-only) of the init container."""
    volumes = {v["name"]: v for v in pod_spec(directory)["volumes"]}
    out = {}
    for m in init_container(directory)["volumeMounts"]:  # type: ignore[attr-defined]
        host = volumes[m["name"]].get("hostPath", {}).get("path")
        out[m["mountPath"]] = (host, bool(m.get("readOnly", False)))
    return out


def test_the_base_and_the_groups_have_no_init_container() -> None:
    for group in (BASE, GROUP):
        assert "initContainers" not in pod_spec(group)


@pytest.mark.parametrize("group", [BASE, GROUP], ids=["base", "overlay"])
def test_the_component_runs_enable_nri_on_the_hosts_containerd_config(tmp_path: Path, group: Path) -> None:
    d = kustomization(tmp_path, "enable-nri", [group], [ENABLE_NRI])
    init = init_container(d)
    plugin = plugin_container(d)
    assert init["name"] == "enable-nri"
    # the plugin's own image, whatever the kustomization's `images` made of it
    assert init["image"] == plugin["image"] and init["image"] != "nri-pinner"
    assert init["securityContext"] == plugin["securityContext"]
    command = init["command"]
    assert isinstance(command, list) and command[0] == "nri-pinner"
    args = build_parser().parse_args(command[1:])  # what the image's CLI accepts
    assert args.command == "enable-nri" and args.restart
    m = init_mounts(d)
    config_dir = posixpath.dirname(args.containerd_config)
    assert m[config_dir] == ("/etc/containerd", False)  # the directory: the edit renames a file into it
    # NRI's socket (does it answer already?) and systemd's bus, read-only, from the plugin's own volumes
    assert m[posixpath.dirname(DEFAULT_SOCKET)] == ("/var/run/nri", True)
    assert m[posixpath.dirname(args.systemd_bus)] == ("/run/systemd", True)
    settings = configmap_settings(d)
    for path in (settings.nri.socket, settings.reconcile.systemd_bus):
        mount = covering_mount(path, mounts(d))
        assert mount is not None and (mount.host_path, True) == m[mount.container_path]
    # nothing else changes: the same objects and the same plugin container
    assert {(o["kind"], o["metadata"]["name"]) for o in render(d)} == {
        (o["kind"], o["metadata"]["name"]) for o in render(group)}
    assert plugin == plugin_container(group)
    assert one(d, "DaemonSet")["metadata"]["name"] == one(group, "DaemonSet")["metadata"]["name"]


def test_readme_names_the_component() -> None:
    readme = (KUBE_DIR.parents[1] / "docs" / "install.md").read_text()  # the README's install page
    assert "components/enable-nri" in readme and "nri-pinner enable-nri" in readme
