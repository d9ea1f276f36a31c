"""Render the kustomizations in packaging/kubernetes with `kubectl kustomize` for the manifest tests and
the image e2e test. kubectl comes from Debian trixie (scripts/install-runtimes.sh unpacks it into
$NRI_PINNER_E2E_PREFIX/kubectl); a kubectl on PATH is used otherwise."""

from __future__ import annotations

import functools
import os
import posixpath
import shutil
import subprocess
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from nri_pinner.config import Settings, load

KUBE_DIR = Path(__file__).resolve().parents[2] / "packaging" / "kubernetes"
BASE = KUBE_DIR / "base"
CONFIG_MOUNT = "/etc/nri-pinner"
PREFIX = Path(os.environ.get("NRI_PINNER_E2E_PREFIX", "/opt/nri-pinner-e2e"))
KUBECTL_FROM_TRIXIE = PREFIX / "kubectl" / "usr" / "bin" / "kubectl"


def kubectl() -> str:
    """The kubectl binary; skips (or fails, where the setup should have installed it) without one."""
    if KUBECTL_FROM_TRIXIE.is_file():
        return str(KUBECTL_FROM_TRIXIE)
    found = shutil.which("kubectl")
    if found:
        return found
    message = "kubectl not found: scripts/install-runtimes.sh installs Debian trixie's into " + str(PREFIX)
    if os.environ.get("NRI_PINNER_E2E_REQUIRED") == "1":
        pytest.fail(message)
    pytest.skip(message)


def render_text(directory: Path) -> str:
    res = subprocess.run([kubectl(), "kustomize", str(directory)], capture_output=True, text=True, check=False)
    assert res.returncode == 0, f"kubectl kustomize {directory}: {res.stderr}"
    return res.stdout


@functools.cache
def render(directory: Path) -> tuple[dict[str, Any], ...]:
    return tuple(d for d in yaml.safe_load_all(render_text(directory)) if d is not None)


def objects(directory: Path, kind: str) -> list[dict[str, Any]]:
    return [d for d in render(directory) if d["kind"] == kind]


def one(directory: Path, kind: str) -> dict[str, Any]:
    (obj,) = objects(directory, kind)
    return obj


@dataclass(frozen=True)
class Mount:
    """One container mount: ``host_path`` is None for ConfigMap volumes."""

    container_path: str
    host_path: str | None
    read_only: bool
    volume: str


def pod_spec(directory: Path = BASE) -> dict[str, Any]:
    spec: dict[str, Any] = one(directory, "DaemonSet")["spec"]["template"]["spec"]
    return spec


def plugin_container(directory: Path = BASE) -> dict[str, Any]:
    (container,) = pod_spec(directory)["containers"]
    assert isinstance(container, dict)
    return container


def mounts(directory: Path = BASE) -> list[Mount]:
    """The plugin container's volumeMounts joined with the pod's volumes."""
    volumes = {v["name"]: v for v in pod_spec(directory)["volumes"]}
    result = []
    for m in plugin_container(directory)["volumeMounts"]:
        volume = volumes[m["name"]]
        host = volume["hostPath"]["path"] if "hostPath" in volume else None
        result.append(Mount(m["mountPath"], host, bool(m.get("readOnly", False)), m["name"]))
    return result


def configmap_config_text(directory: Path = BASE) -> str:
    text: str = one(directory, "ConfigMap")["data"]["config.toml"]
    return text


def configmap_settings(directory: Path = BASE) -> Settings:
    return load(configmap_config_text(directory), f"{directory.name}/config.toml")


def config_table(directory: Path = BASE) -> dict[str, Any]:
    return tomllib.loads(configmap_config_text(directory))


def covering_mount(path: str, all_mounts: list[Mount]) -> Mount | None:
    """The deepest mount whose container path contains ``path``."""
    path = posixpath.normpath(path)
    best = None
    for m in all_mounts:
        root = posixpath.normpath(m.container_path)
        if (path == root or path.startswith(root.rstrip("/") + "/")) and (
            best is None or len(root) > len(best.container_path)
        ):
            best = m
    return best


def kustomization(tmp_path: Path, name: str, resources: list[Path], components: list[Path]) -> Path:
    """A kustomization in tmp_path combining the repo's directories (as an operator's own would)."""
    d = tmp_path / name
    d.mkdir()
    body = {"resources": [os.path.relpath(r, d) for r in resources],
            "components": [os.path.relpath(c, d) for c in components]}
    (d / "kustomization.yaml").write_text(yaml.safe_dump(body))
    return d
