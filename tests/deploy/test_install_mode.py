"""`nri-pinner install`: the pre-installed launcher, refusal while another mode is active, uninstall."""

from __future__ import annotations

import io
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from nri_pinner.cli.install import SIGNATURE, HostPaths, install, launcher_text, running_instances
from nri_pinner.cli.main import main

PYTHON = sys.executable


def fake_process(
    root: Path, pid: int, argv: list[str], env: dict[str, str] | None = None, ppid: int = 1, comm: str = ""
) -> None:
    d = root / "proc" / str(pid)
    d.mkdir(parents=True)
    (d / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    (d / "environ").write_bytes(b"".join(f"{k}={v}\0".encode() for k, v in (env or {}).items()))
    (d / "status").write_text(f"Name:\t{comm or Path(argv[0]).name}\nPPid:\t{ppid}\n")
    (d / "comm").write_text(f"{comm or Path(argv[0]).name[:15]}\n")


def run_install(tmp_path: Path, index: str = "90", uninstall: bool = False) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    rc = install(
        str(tmp_path / "plugins"),
        index,
        str(tmp_path / "config.toml"),
        uninstall=uninstall,
        python=PYTHON,
        paths=HostPaths(tmp_path),
        out=out,
        err=err,
    )
    return rc, out.getvalue(), err.getvalue()


@pytest.fixture
def host(tmp_path: Path) -> Path:
    (tmp_path / "proc").mkdir()
    (tmp_path / "config.toml").write_text('[log]\nfile = ""\n')
    return tmp_path


def test_launcher_is_executable_sh_with_absolute_paths(host: Path) -> None:
    rc, out, err = run_install(host)
    assert (rc, err) == (0, "")
    launcher = host / "plugins" / "90-nri-pinner"
    assert stat.S_IMODE(launcher.stat().st_mode) == 0o755
    text = launcher.read_text()
    assert text.startswith("#!/bin/sh\n")
    exec_line = text.splitlines()[-1]
    assert exec_line == f"exec {PYTHON} -m nri_pinner run --config {host / 'config.toml'}"
    assert (host / "etc/nri-pinner/pre-installed").read_text() == f"launcher={launcher}\n"
    assert 'plugins."io.containerd.nri.v1.nri"' in out and "disable = false" in out
    assert "2.x: NRI is on by default" in out and "restart containerd" in out
    assert "[log] file" in out  # containerd discards the plugin's output


def test_launcher_runs_the_cli_without_path_or_arguments(tmp_path: Path) -> None:
    """As containerd runs it: empty environment apart from NRI_*; `run` swapped for `--version` to
    stay offline (the exec line is otherwise the one asserted above)."""
    script = tmp_path / "90-nri-pinner"
    text = launcher_text(PYTHON, "/nonexistent.toml")
    script.write_text(text.replace(" run --config /nonexistent.toml", " --version"))
    script.chmod(0o755)
    env = {"NRI_PLUGIN_NAME": "nri-pinner", "NRI_PLUGIN_IDX": "90", "NRI_PLUGIN_SOCKET": "3"}
    res = subprocess.run([str(script)], env=env, capture_output=True, text=True, check=False, cwd="/")
    assert res.returncode == 0, res.stderr
    from nri_pinner import __version__

    assert res.stdout.strip() == f"nri-pinner {__version__}"


def test_install_is_idempotent_and_a_new_index_replaces_the_old(host: Path) -> None:
    assert run_install(host)[0] == 0
    first = (host / "plugins" / "90-nri-pinner").read_text()
    assert run_install(host)[0] == 0
    assert (host / "plugins" / "90-nri-pinner").read_text() == first
    assert sorted(p.name for p in (host / "plugins").iterdir()) == ["90-nri-pinner"]
    rc, out, _ = run_install(host, index="40")
    assert rc == 0 and "90-nri-pinner" in out
    assert sorted(p.name for p in (host / "plugins").iterdir()) == ["40-nri-pinner"]


def test_uninstall_removes_launcher_and_marker(host: Path) -> None:
    assert run_install(host)[0] == 0
    other = host / "plugins" / "10-other"
    other.write_text("#!/bin/sh\n")
    rc, out, _ = run_install(host, uninstall=True)
    assert rc == 0 and "restart containerd" in out
    assert sorted(p.name for p in (host / "plugins").iterdir()) == ["10-other"]
    assert not (host / "etc/nri-pinner/pre-installed").exists()
    rc, out, _ = run_install(host, uninstall=True)
    assert rc == 0 and "nothing removed" in out


def test_refuses_when_the_systemd_unit_is_enabled(host: Path) -> None:
    wants = host / "etc/systemd/system/multi-user.target.wants"
    wants.mkdir(parents=True)
    (wants / "nri-pinner.service").symlink_to("/usr/lib/systemd/system/nri-pinner.service")
    rc, out, err = run_install(host)
    assert rc == 2 and out == ""
    assert "systemctl disable --now nri-pinner.service" in err and "every container create would fail" in err
    assert not (host / "plugins").exists()
    assert not (host / "etc/nri-pinner/pre-installed").exists()


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"NRI_PINNER_DEPLOYMENT": "daemonset"}, "by the nri-pinner DaemonSet"),
        ({"INVOCATION_ID": "0123abcd"}, "by systemd"),
        ({}, "by hand or another supervisor"),
    ],
)
def test_refuses_while_another_mode_runs(host: Path, env: dict[str, str], expected: str) -> None:
    argv = ["/usr/lib/nri-pinner/venv/bin/python3", "/usr/bin/nri-pinner", "run", "--config", "x"]
    fake_process(host, 4242, argv, env)
    rc, _, err = run_install(host)
    assert rc == 2
    assert "pid 4242" in err and expected in err
    assert not (host / "plugins" / "90-nri-pinner").exists()


def test_a_running_pre_installed_instance_is_not_a_conflict(host: Path) -> None:
    fake_process(host, 100, ["/usr/bin/containerd"], comm="containerd")
    fake_process(host, 4243, [PYTHON, "-m", "nri_pinner", "run", "--config", "c"], ppid=100)
    fake_process(host, 4244, [PYTHON, "-m", "nri_pinner", "run"], {"NRI_PLUGIN_SOCKET": "3"})
    fake_process(host, 4245, ["/usr/bin/nri-pinner", "status"])  # not a daemon
    modes = {i.pid: i.mode for i in running_instances(HostPaths(host), own_pid=1)}
    assert modes == {4243: "pre-installed", 4244: "pre-installed"}
    assert run_install(host)[0] == 0


def test_refuses_to_overwrite_a_foreign_file_and_bad_input(host: Path) -> None:
    (host / "plugins").mkdir()
    (host / "plugins" / "90-nri-pinner").write_text("#!/bin/sh\necho mine\n")
    rc, _, err = run_install(host)
    assert rc == 2 and "not written by nri-pinner install" in err
    assert (host / "plugins" / "90-nri-pinner").read_text() == "#!/bin/sh\necho mine\n"
    rc, _, err = run_install(host, index="9")
    assert rc == 2 and "two digits" in err


def test_cli_reaches_install(host: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("NRI_PINNER_INSTALL_ROOT", str(host))
    # --plugin-dir is under NRI_PINNER_INSTALL_ROOT like every host path (the default included: an
    # earlier version wrote into this machine's /opt/nri/plugins from a test).
    assert main(["install", "--plugin-dir", "/plugins", "--index", "55", "--config", str(host / "config.toml")]) == 0
    launcher = host / "plugins" / "55-nri-pinner"
    assert SIGNATURE in launcher.read_text() and os.access(launcher, os.X_OK)
    assert main(["install", "--plugin-dir", "/plugins", "--uninstall"]) == 0
    assert not launcher.exists()
    assert main(["install", "--index", "56", "--config", str(host / "config.toml")]) == 0
    assert (host / "opt/nri/plugins/56-nri-pinner").exists()
    capsys.readouterr()


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        (None, "does not exist: create it first"),
        ("[cpu_manager]\nreserved_cpus = 'x'\nbogus = 1\n", "config.toml:2:1: cpu_manager.reserved_cpus"),
        ("[cpu_manager]\nreserved_cpus = '0,4095'\n", "not online"),
        ("[cpu_manager\n", "not valid TOML"),
    ],
)
def test_refuses_a_config_that_run_would_refuse_before_writing(host: Path, config: str | None, expected: str) -> None:
    """containerd discards the plugin's output: a bad config must stop install, not the plugin later."""
    path = host / "config.toml"
    if config is None:
        path.unlink()
    else:
        path.write_text(config)
    rc, _, err = run_install(host)
    assert rc == 2 and expected in err, err
    assert not (host / "plugins").exists() and not HostPaths(host).marker.exists()


def test_install_root_re_roots_the_default_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """NRI_PINNER_INSTALL_ROOT puts every host path under DIR: the default --config too (issue 35)."""
    (tmp_path / "proc").mkdir()
    config = tmp_path / "etc/nri-pinner/config.toml"
    config.parent.mkdir(parents=True)
    config.write_text('[log]\nfile = "/var/log/nri-pinner.log"\n[cpu_manager]\nreserved_cpus = ""\n')
    monkeypatch.setenv("NRI_PINNER_INSTALL_ROOT", str(tmp_path))
    assert main(["install"]) == 0, capsys.readouterr().err
    launcher = tmp_path / "opt/nri/plugins/90-nri-pinner"
    assert launcher.read_text().splitlines()[-1].endswith(f" run --config {config}")
    assert main(["install", "--uninstall"]) == 0
    # An explicit --config is taken as given.
    other = tmp_path / "other.toml"
    other.write_text(config.read_text())
    assert main(["install", "--config", str(other)]) == 0
    assert launcher.read_text().splitlines()[-1].endswith(f" run --config {other}")
