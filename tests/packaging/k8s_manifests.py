"""Read the DaemonSet manifests (packaging/kubernetes) for the manifest tests and the image e2e test."""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from nri_pinner.config import Settings, load

KUBE_DIR = Path(__file__).resolve().parents[2] / "packaging" / "kubernetes"
CONFIG_MOUNT = "/etc/nri-pinner"


def load_manifest(name: str) -> dict[str, Any]:
    docs = [d for d in yaml.safe_load_all((KUBE_DIR / name).read_text()) if d is not None]
    if len(docs) != 1 or not isinstance(docs[0], dict):
        raise ValueError(f"{name}: expected one YAML document, got {len(docs)}")
    return docs[0]


@dataclass(frozen=True)
class Mount:
    """One container mount: ``host_path`` is None for ConfigMap volumes."""

    container_path: str
    host_path: str | None
    read_only: bool
    volume: str


def pod_spec() -> dict[str, Any]:
    spec: dict[str, Any] = load_manifest("daemonset.yaml")["spec"]["template"]["spec"]
    return spec


def plugin_container() -> dict[str, Any]:
    (container,) = pod_spec()["containers"]
    assert isinstance(container, dict)
    return container


def mounts() -> list[Mount]:
    """The plugin container's volumeMounts joined with the pod's volumes."""
    volumes = {v["name"]: v for v in pod_spec()["volumes"]}
    result = []
    for m in plugin_container()["volumeMounts"]:
        volume = volumes[m["name"]]
        host = volume["hostPath"]["path"] if "hostPath" in volume else None
        result.append(Mount(m["mountPath"], host, bool(m.get("readOnly", False)), m["name"]))
    return result


def configmap_config_text() -> str:
    text: str = load_manifest("configmap.yaml")["data"]["config.toml"]
    return text


def configmap_settings() -> Settings:
    return load(configmap_config_text(), "configmap.yaml")


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
