"""Node groups as an operator adds and removes them (`kubectl apply -k` / `kubectl delete -k` of one
kustomization), and the per-node knobs an overlay sets: rendered with `kubectl kustomize`."""

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
    pod_spec,
    render,
)

NAMESPACE_DIR = KUBE_DIR / "namespace"
NODE_GROUPS = [BASE, *sorted(p.parent for p in (KUBE_DIR / "overlays").glob("*/config.toml"))]
K3S = KUBE_DIR / "components" / "k3s"
Key = tuple[str, str, str]  # kind, namespace ("" when cluster-scoped), name


def keys(directory: Path) -> set[Key]:
    return {(d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]) for d in render(directory)}


def deleted_by(directory: Path, cluster: set[Key]) -> set[Key]:
    """What `kubectl delete -k directory` removes from a cluster holding ``cluster``: every object the
    kustomization renders, and with a Namespace every object in it."""
    rendered = keys(directory)
    namespaces = {name for kind, _, name in rendered if kind == "Namespace"}
    return rendered | {k for k in cluster if k[1] in namespaces}


def test_deleting_one_node_group_deletes_only_its_own_objects() -> None:
    cluster = set().union(*(keys(g) for g in NODE_GROUPS))
    assert len(NODE_GROUPS) >= 3
    for group in NODE_GROUPS:
        others = set().union(*(keys(g) for g in NODE_GROUPS if g != group))
        gone = deleted_by(group, cluster) & others
        assert not gone, f"kubectl delete -k {group.relative_to(KUBE_DIR)} also deletes {sorted(gone)}"


def test_the_namespace_is_applied_once_on_its_own() -> None:
    (ns,) = render(NAMESPACE_DIR)
    assert ns["kind"] == "Namespace"
    # hostPath volumes are beyond "baseline": a namespace under an enforced default level rejects the pods
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    for group in NODE_GROUPS:
        assert {k[1] for k in keys(group)} == {ns["metadata"]["name"]}, group


def test_k3s_component_mounts_containerd_run_dir_from_the_k3s_path(tmp_path: Path) -> None:
    """k3s and RKE2 run their containerd with its sockets under /run/k3s/containerd: the base's
    `/run/containerd` hostPath (type Directory) does not exist there and the pod never starts."""
    group = KUBE_DIR / "overlays" / "general"
    d = kustomization(tmp_path, "k3s", [group], [K3S])
    cri_socket = configmap_settings(d).reconcile.cri_socket
    m = covering_mount(cri_socket, mounts(d))
    assert m is not None and m.read_only and m.container_path == posixpath.dirname(cri_socket)
    assert m.host_path == "/run/k3s/containerd"
    (volume,) = [v for v in pod_spec(d)["volumes"] if v["name"] == m.volume]
    assert volume["hostPath"]["type"] == "Directory"  # a node without it says so instead of running blind
    # nothing else changes: the same objects, the same other mounts
    assert keys(d) == keys(group)
    assert [x for x in mounts(d) if x.volume != m.volume] == [x for x in mounts(group) if x.volume != m.volume]
    base_mount = covering_mount(cri_socket, mounts(group))
    assert base_mount is not None and base_mount.host_path == "/run/containerd"
    assert one(d, "DaemonSet")["metadata"]["name"] == one(group, "DaemonSet")["metadata"]["name"]


def test_readme_tells_the_namespace_step_and_the_k3s_knob() -> None:
    readme = (KUBE_DIR.parents[1] / "docs" / "install.md").read_text()  # the README's install page
    section = readme.split("### On a fleet (Kustomize)", 1)[1].split("\n### ", 1)[0]
    assert "kubectl apply -k packaging/kubernetes/namespace" in section
    assert "components/k3s" in section and "/run/k3s/containerd" in section
