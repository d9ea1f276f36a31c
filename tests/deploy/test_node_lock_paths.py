"""The node-wide lock `run` takes for its runtime (nri_pinner/edge/instance_lock.py) is writable in every
deployment mode and survives another instance's refusal: the unit's RuntimeDirectory (kept across stops) and
the DaemonSet's hostPath; a pre-installed plugin is root in the host's /run."""

from __future__ import annotations

import posixpath
from pathlib import Path

import pytest

from nri_pinner.config import NRISettings
from nri_pinner.edge.instance_lock import RUN_DIR, runtime_lock_path

REPO = Path(__file__).resolve().parents[2]
UNIT = REPO / "systemd" / "nri-pinner.service"


def unit_values(key: str) -> list[str]:
    return [line.split("=", 1)[1] for line in UNIT.read_text().splitlines() if line.startswith(f"{key}=")]


def test_the_unit_can_write_the_lock_and_never_deletes_another_instances() -> None:
    lock = runtime_lock_path(NRISettings().socket, "/")
    assert str(lock.parent) == RUN_DIR == "/run/" + unit_values("RuntimeDirectory")[0]
    # stopped (or refused at start because a DaemonSet pod holds the lock), the unit leaves the directory:
    # without this systemd removes it, the pod's lock file with it, and a third instance would lock a new file
    assert unit_values("RuntimeDirectoryPreserve") == ["yes"]


def test_the_daemonset_mounts_the_lock_directory_from_the_host_read_write() -> None:
    pytest.importorskip("yaml", reason="PyYAML is needed to parse the manifests (pip install pyyaml==6.0.3)")
    from k8s_manifests import configmap_settings, covering_mount, mounts

    lock = runtime_lock_path(configmap_settings().nri.socket, "/")
    m = covering_mount(str(lock), mounts())
    assert m is not None and not m.read_only
    assert m.host_path is not None and posixpath.join(m.host_path, lock.name) == str(lock)  # the host's own file


def test_readme_says_run_refuses_a_second_instance_on_the_same_runtime() -> None:
    readme = (REPO / "docs" / "operations.md").read_text()  # the README's operations page
    assert "/run/nri-pinner/nri-run-nri-nri.sock.lock" in readme
    assert "A second pinner with\nanother inspection socket is refused by `install`, not by `run`" not in readme


def test_the_man_page_names_the_run_time_files_where_they_are() -> None:
    from nri_pinner.cli.man_and_completions import man_page
    from nri_pinner.config import InspectSettings

    page = man_page().replace("\\-", "-")
    for path in (runtime_lock_path(NRISettings().socket, "/"), Path(InspectSettings().socket + ".lock")):
        assert f"\\fI{path}\\fR" in page, path
