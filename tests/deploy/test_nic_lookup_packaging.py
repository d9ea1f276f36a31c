"""The NIC lookup service as shipped: its systemd unit (one capability, network namespaces only, as locked
down as the plugin's otherwise; verified and scored offline, as PID 1 here is not systemd) and the
DaemonSet's components/nic-lookup (rendered with `kubectl kustomize`, validated with
`kubernetes-validate --strict`): a second container adding SYS_ADMIN and nothing else. tests/vm/parts/
40-deb-unit runs the unit under a real systemd; tests/service/test_nic_lookup_service.py proves the
privilege split on real namespaces."""

from __future__ import annotations

import posixpath
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

yaml = pytest.importorskip("yaml", reason="PyYAML is needed to parse the manifests")

from k8s_manifests import BASE, KUBE_DIR, kustomization, pod_spec, render_text  # noqa: E402
from test_k8s_manifests import DEPLOYABLE, ids, validate  # noqa: E402

from nri_pinner.edge.nic_lookup.client import DEFAULT_SOCKET  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
UNIT = REPO / "systemd" / "nri-pinner-nic-lookup.service"
MAIN_UNIT = REPO / "systemd" / "nri-pinner.service"
COMPONENT = KUBE_DIR / "components" / "nic-lookup"
SYSTEMD_UNIT_DIR = Path("/usr/lib/systemd/system")
MAX_EXPOSURE = 2.5
analyze = shutil.which("systemd-analyze")
needs_analyze = pytest.mark.skipif(analyze is None, reason="systemd-analyze not installed (Debian package systemd)")


def values(unit: Path, key: str) -> list[str]:
    return [line.split("=", 1)[1] for line in unit.read_text().splitlines() if line.startswith(f"{key}=")]


# -- the unit ----------------------------------------------------------------------------------------


def test_the_unit_holds_cap_sys_admin_only_and_may_enter_network_namespaces_only() -> None:
    assert values(UNIT, "CapabilityBoundingSet") == ["CAP_SYS_ADMIN"]
    assert values(UNIT, "AmbientCapabilities") == [""] and values(UNIT, "NoNewPrivileges") == ["yes"]
    assert values(UNIT, "RestrictNamespaces") == ["net"]  # setns(CLONE_NEWNET) only
    assert "PrivateNetwork" not in UNIT.read_text()  # the node's namespace: macvlan lower devices are there
    (exec_start,) = values(UNIT, "ExecStart")
    assert exec_start == f"/usr/lib/nri-pinner/venv/bin/nri-pinner nic-lookup-server --socket {DEFAULT_SOCKET}"
    assert posixpath.dirname(DEFAULT_SOCKET) == "/run/" + values(UNIT, "RuntimeDirectory")[0]
    assert values(UNIT, "RuntimeDirectoryMode") == ["0700"] and values(UNIT, "UMask") == ["0077"]
    assert values(UNIT, "Type") == ["notify"] and values(UNIT, "NotifyAccess") == ["main"]


def test_the_unit_is_otherwise_as_locked_down_as_the_plugins() -> None:
    """Every hardening setting of nri-pinner.service holds here too, with the same value, except what the
    lookup needs (its capability, namespaces, socket directory) or may have tighter (no state, no
    writable cgroup fs, no IP at all)."""
    differs = {"CapabilityBoundingSet", "RestrictNamespaces", "RuntimeDirectory", "RuntimeDirectoryMode",
               "StateDirectory", "StateDirectoryMode", "ReadWritePaths", "ProtectControlGroups",
               "RestrictAddressFamilies", "IPAddressAllow"}
    hardening = re.compile(r"^(Protect|Private|Restrict|Lock|NoNew|Capability|Ambient|SystemCall|Remove|Keyring|"
                           r"Device|IPAddress|UMask|ReadWrite|Memory)")
    keys = {line.split("=", 1)[0] for line in MAIN_UNIT.read_text().splitlines() if hardening.match(line)}
    for key in sorted(keys - differs):
        assert values(UNIT, key) == values(MAIN_UNIT, key), key
    assert values(UNIT, "ProtectControlGroups") == ["yes"] and values(UNIT, "IPAddressDeny") == ["any"]
    assert not values(UNIT, "IPAddressAllow") and not values(UNIT, "ReadWritePaths")
    assert set(values(UNIT, "RestrictAddressFamilies")[0].split()) == {"AF_UNIX", "AF_NETLINK", "AF_INET"}
    assert values(UNIT, "MemoryDenyWriteExecute") == ["yes"]


def test_the_unit_comes_and_goes_with_the_plugin() -> None:
    """Started through the package's static nri-pinner.service.wants/ link (no [Install]: nothing to
    enable, the maintainer scripts need not know it); stopped and restarted with the plugin (PartOf);
    ready before it (Before, Type=notify), so the plugin's first lookups find the socket."""
    assert values(UNIT, "PartOf") == ["nri-pinner.service"] and values(UNIT, "Before") == ["nri-pinner.service"]
    assert "[Install]" not in UNIT.read_text()
    assert values(UNIT, "ConditionPathExists") == values(MAIN_UNIT, "ConditionPathExists")
    script = (REPO / "packaging" / "build-deb.sh").read_text()
    assert f'"$repo/systemd/{UNIT.name}" "$stage/usr/lib/systemd/system/{UNIT.name}"' in script
    assert f"ln -s ../{UNIT.name} \"$stage/usr/lib/systemd/system/nri-pinner.service.wants/{UNIT.name}\"" in script


@needs_analyze
def test_systemd_analyze_verify_is_clean(tmp_path: Path) -> None:
    if not (SYSTEMD_UNIT_DIR / "sysinit.target").exists():
        pytest.skip(f"{SYSTEMD_UNIT_DIR} has no sysinit.target to verify against")
    shutil.copytree(SYSTEMD_UNIT_DIR, tmp_path / "usr/lib/systemd/system", symlinks=True)
    units = tmp_path / "usr/lib/systemd/system"
    for unit in (UNIT, MAIN_UNIT):
        shutil.copy(unit, units / unit.name)
    (units / "nri-pinner.service.wants").mkdir()
    (units / "nri-pinner.service.wants" / UNIT.name).symlink_to(f"../{UNIT.name}")
    binary = tmp_path / values(UNIT, "ExecStart")[0].split()[0].lstrip("/")
    binary.parent.mkdir(parents=True)
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    res = subprocess.run([str(analyze), "verify", "--man=no", f"--root={tmp_path}", UNIT.name, MAIN_UNIT.name],
                         capture_output=True, text=True, check=False)
    assert (res.returncode, res.stdout + res.stderr) == (0, "")


@needs_analyze
def test_exposure_score_is_at_most_2_5(tmp_path: Path) -> None:
    res = subprocess.run([str(analyze), "security", "--offline=true", "--no-pager", str(UNIT)],
                         capture_output=True, text=True, check=False, cwd=tmp_path)
    found = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", res.stdout + res.stderr)
    assert found, res.stdout + res.stderr
    print(f"systemd-analyze security --offline=true {UNIT.name}: exposure {found.group(1)}")
    assert float(found.group(1)) <= MAX_EXPOSURE, res.stdout
    for line in ("CapabilityBoundingSet=~CAP_SYS_ADMIN", "RestrictNamespaces=~net"):  # what it keeps
        assert re.search(rf"✗ {re.escape(line)}\s", res.stdout), line


# -- the DaemonSet component -------------------------------------------------------------------------


def with_component(tmp_path: Path, base: Path) -> tuple[Path, dict[str, Any]]:
    d = kustomization(tmp_path, f"nic-{base.name}", [base], [COMPONENT])
    return d, pod_spec(d)


@pytest.mark.parametrize("base", DEPLOYABLE, ids=ids(DEPLOYABLE))
def test_the_component_adds_a_sys_admin_only_lookup_container(tmp_path: Path, base: Path) -> None:
    d, spec = with_component(tmp_path, base)
    res = validate(tmp_path, render_text(d))
    assert res.returncode == 0, res.stdout + res.stderr
    containers = {c["name"]: c for c in spec["containers"]}
    assert set(containers) == {"nri-pinner", "nic-lookup"}
    plugin, lookup = containers["nri-pinner"], containers["nic-lookup"]
    sc = lookup["securityContext"]
    assert sc["capabilities"] == {"drop": ["ALL"], "add": ["SYS_ADMIN"]}  # nothing else
    assert sc["privileged"] is False and sc["readOnlyRootFilesystem"] is True and sc["runAsUser"] == 0
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    # the API refuses allowPrivilegeEscalation: false next to "CAP_SYS_ADMIN" (validation.go); "SYS_ADMIN" passes
    assert sc["allowPrivilegeEscalation"] is False and "CAP_SYS_ADMIN" not in sc["capabilities"]["add"]
    assert plugin["securityContext"]["capabilities"] == {"drop": ["ALL"]}  # the plugin gains nothing
    assert lookup["command"] == ["nri-pinner", "nic-lookup-server", "--socket", DEFAULT_SOCKET]
    assert lookup["image"] == plugin["image"] and "ports" not in lookup
    assert not any(spec.get(k, False) for k in ("hostPID", "hostNetwork", "hostIPC"))
    volumes = {v["name"]: v for v in spec["volumes"]}
    socket_dir = posixpath.dirname(DEFAULT_SOCKET)

    def mount(container: dict[str, Any], path: str) -> dict[str, Any]:
        found: list[dict[str, Any]] = [m for m in container["volumeMounts"] if m["mountPath"] == path]
        assert len(found) == 1, (container["name"], path)
        return found[0]

    shared_plugin, shared_lookup = mount(plugin, socket_dir), mount(lookup, socket_dir)
    assert shared_plugin["name"] == shared_lookup["name"] and "emptyDir" in volumes[shared_plugin["name"]]
    assert shared_plugin["readOnly"] is True and not shared_lookup.get("readOnly", False)  # plugin: connect only
    netns = mount(lookup, "/var/run/netns")
    assert netns["readOnly"] is True and netns["mountPropagation"] == "HostToContainer"
    assert volumes[netns["name"]]["hostPath"]["path"] == "/var/run/netns"
    assert {m["mountPath"] for m in lookup["volumeMounts"]} == {socket_dir, "/var/run/netns"}  # nothing else
    assert lookup["resources"]["limits"]["memory"] and lookup["resources"]["requests"]["cpu"]


def test_without_the_component_no_container_holds_a_capability() -> None:
    for base in DEPLOYABLE:
        for container in pod_spec(base)["containers"]:
            assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}, (base, container["name"])
    assert posixpath.dirname(DEFAULT_SOCKET) not in render_text(BASE)
