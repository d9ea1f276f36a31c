"""`nri-pinner enable-nri` (issue 35 item 9): NRI turned on in containerd's config by a minimal text edit,
checked on the real `containerd config default` of both installed runtimes and by the real binaries'
`config dump` (what containerd will run with); idempotent; refusals leave the file as it was."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from jeepney import HeaderFields, MessageType, Parser, new_error, new_method_return

from nri_pinner.cli.enable_nri import NRI
from nri_pinner.cli.main import main

if TYPE_CHECKING:  # mypy sees tests/ as a namespace package; pytest imports the harness as `e2e`
    from tests.e2e.host_cleanup import RuntimeMissing, find_runtime
else:
    from e2e.host_cleanup import RuntimeMissing, find_runtime

# /etc/containerd/config.toml as Debian's containerd 1.7.24 (trixie) ships it: version 2, no NRI table
DEBIAN_17 = """version = 2

[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = "/etc/cni/net.d"
  [plugins."io.containerd.internal.v1.opt"]
    path = "/var/lib/containerd/opt"
"""


def containerd(key: str) -> Path:
    try:
        return find_runtime(key).containerd
    except RuntimeMissing as exc:
        if os.environ.get("NRI_PINNER_E2E_REQUIRED") == "1":
            pytest.fail(str(exc))
        pytest.skip(str(exc))


def default_config(key: str) -> str:
    res = subprocess.run([str(containerd(key)), "config", "default"], capture_output=True, text=True, check=True)
    return res.stdout


def nri_disabled(key: str, config: Path) -> bool:
    """What the real containerd will run with: `config dump` of ``config``, NRI's disable."""
    res = subprocess.run([str(containerd(key)), "--config", str(config), "config", "dump"],
                         capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr
    disabled = tomllib.loads(res.stdout)["plugins"][NRI]["disable"]
    assert isinstance(disabled, bool)
    return disabled


def enable(config: Path, *args: str) -> int:
    return main(["enable-nri", "--containerd-config", str(config), *args])


def backups(config: Path) -> list[Path]:
    return sorted(config.parent.glob(f"{config.name}.*.nri-pinner-backup"))


def changed_lines(before: str, after: str) -> list[tuple[str, str]]:
    old, new = before.splitlines(), after.splitlines()
    assert len(old) == len(new)
    return [(a, b) for a, b in zip(old, new, strict=True) if a != b]


def test_containerd_17s_default_config_is_enabled_by_one_line_and_comments_stay(tmp_path: Path) -> None:
    text = default_config("1.7").replace('  [plugins."io.containerd.nri.v1.nri"]\n',
                                         '  # NRI: off as shipped\n  [plugins."io.containerd.nri.v1.nri"]  # here\n')
    text = "# our node's containerd\n" + text.replace("    disable = true\n    disable_connections",
                                                        "    disable = true  # as shipped\n    disable_connections")
    config = tmp_path / "config.toml"
    config.write_text(text)
    config.chmod(0o640)
    assert nri_disabled("1.7", config)
    assert enable(config) == 0
    after = config.read_text()
    assert changed_lines(text, after) == [("    disable = true  # as shipped", "    disable = false  # as shipped")]
    assert not nri_disabled("1.7", config)
    (kept,) = backups(config)
    assert kept.read_text() == text and config.stat().st_mode & 0o777 == kept.stat().st_mode & 0o777 == 0o640
    # idempotent: a second run changes nothing and keeps no second copy
    assert enable(config) == 0
    assert config.read_text() == after and backups(config) == [kept]


def test_containerd_2s_default_config_needs_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "config.toml"
    config.write_text(text := default_config("2.1"))
    assert enable(config) == 0
    assert "already enabled; nothing changed" in capsys.readouterr().out
    assert config.read_text() == text and backups(config) == []
    assert not nri_disabled("2.1", config)


def test_containerd_2_with_nri_disabled_is_enabled(tmp_path: Path) -> None:
    text = default_config("2.1")
    assert text.count("disable = false\n    socket_path = '/var/run/nri/nri.sock'") == 1
    text = text.replace("disable = false\n    socket_path = '/var/run/nri/nri.sock'",
                        "disable = true\n    socket_path = '/var/run/nri/nri.sock'")
    config = tmp_path / "config.toml"
    config.write_text(text)
    assert nri_disabled("2.1", config)
    assert enable(config) == 0
    assert changed_lines(text, config.read_text()) == [("    disable = true", "    disable = false")]
    assert not nri_disabled("2.1", config)


def test_debians_shipped_file_gets_the_table_appended(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text(DEBIAN_17)
    assert nri_disabled("1.7", config)  # containerd 1.7's default: off
    assert enable(config) == 0
    after = config.read_text()
    assert after == DEBIAN_17 + '\n[plugins."io.containerd.nri.v1.nri"]\n  disable = false\n'
    assert not nri_disabled("1.7", config) and not nri_disabled("2.1", config)


def test_a_version_1_file_is_enabled_by_the_short_id_containerd_17_reads(tmp_path: Path) -> None:
    """No `version` key: 1.7 reads [plugins.nri] and ignores the full name (the first dump shows it)."""
    config = tmp_path / "config.toml"
    config.write_text(f'[plugins."{NRI}"]\n  disable = false\n\n[plugins.cri]\n  sandbox_image = "pause"\n')
    assert nri_disabled("1.7", config)  # the full name alone does nothing in a version-1 file
    assert enable(config) == 0
    assert config.read_text().endswith("\n[plugins.nri]\n  disable = false\n")
    assert not nri_disabled("1.7", config) and not nri_disabled("2.1", config)


def test_a_table_without_disable_gets_the_line_under_its_header(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    text = (f'version = 2\n\n[plugins]\n  [plugins."{NRI}"]\n    socket_path = "/var/run/nri/nri.sock"\n\n'
            '  [plugins."io.containerd.grpc.v1.cri"]\n    sandbox_image = "pause"\n')
    config.write_text(text)
    assert nri_disabled("1.7", config)
    assert enable(config) == 0
    assert config.read_text() == text.replace('"]\n    socket_path', '"]\n    disable = false\n    socket_path')
    assert not nri_disabled("1.7", config)


def test_version_3_without_a_table_is_left_alone(tmp_path: Path) -> None:
    """Only containerd 2.x reads version 3, and NRI is on there unless disabled."""
    config = tmp_path / "config.toml"
    config.write_text(text := "version = 3\n\n[plugins.'io.containerd.grpc.v1.cri']\n  x = 1\n")
    assert enable(config) == 0
    assert config.read_text() == text and backups(config) == []


def test_a_missing_file_is_created_with_only_nri_on(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    assert enable(config) == 0
    assert tomllib.loads(config.read_text()) == {"version": 2, "plugins": {NRI: {"disable": False}}}
    assert not nri_disabled("1.7", config) and not nri_disabled("2.1", config)
    assert enable(tmp_path / "absent-dir" / "config.toml") == 2  # a directory that is not there: not mounted?


def test_crlf_and_a_symlinked_config_are_kept(tmp_path: Path) -> None:
    real = tmp_path / "real.toml"
    real.write_bytes(f'version = 2\r\n[plugins."{NRI}"]\r\n  disable = true\r\n'.encode())
    link = tmp_path / "config.toml"
    link.symlink_to(real)
    assert enable(link) == 0
    assert link.is_symlink()
    assert real.read_bytes() == f'version = 2\r\n[plugins."{NRI}"]\r\n  disable = false\r\n'.encode()


REFUSED = {
    "not TOML": ("version = 2\n[plugins\n", "is not valid TOML"),
    "disabled_plugins": (f'version = 2\ndisabled_plugins = ["{NRI}"]\n', "listed in disabled_plugins"),
    "inline table": (f'version = 2\n[plugins]\n  "{NRI}" = {{ disable = true }}\n', "not a [plugins."),
    "dotted keys": (f'version = 2\nplugins."{NRI}".disable = true\n', "not a [plugins."),
    "unknown version": ("version = 4\n", "config version 4"),
    "disable as a string": (f'version = 2\n[plugins."{NRI}"]\n  disable = "true"\n', "is not a boolean"),
    # the one `disable = true` line is inside a string: flipping it would not enable NRI (the re-parse says so)
    "a line in a string": (f'version = 2\n[plugins."{NRI}"]\n  note = """\ndisable = true\n"""\n  "disable" = true\n',
                           "would change more"),
}


@pytest.mark.parametrize("case", REFUSED)
def test_a_config_it_cannot_edit_safely_is_refused_and_left_as_it_was(
        case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text, reason = REFUSED[case]
    config = tmp_path / "config.toml"
    config.write_text(text)
    assert enable(config) == 2
    err = capsys.readouterr().err
    assert reason in err and "not edited" in err and len(err.strip().splitlines()) == 1, err
    assert config.read_text() == text and backups(config) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.toml"]  # no temp file left either


def test_an_imported_file_that_disables_nri_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "conf.d").mkdir()
    (tmp_path / "conf.d" / "10-nri.toml").write_text(f'version = 2\n[plugins."{NRI}"]\n  disable = true\n')
    config = tmp_path / "config.toml"
    config.write_text(text := 'version = 2\nimports = ["conf.d/*.toml"]\n')
    assert enable(config) == 2
    assert "10-nri.toml, which disables NRI" in capsys.readouterr().err
    assert config.read_text() == text and backups(config) == []


class SystemdBus:
    """systemd's private socket as far as RestartUnit goes: EXTERNAL auth, then each call answered
    (``error``: that D-Bus error name)."""

    def __init__(self, path: Path, error: str | None = None) -> None:
        path.parent.mkdir(exist_ok=True)
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.error = error
        self.srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.srv.bind(str(path))
        self.srv.listen(2)
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        try:
            conn, _ = self.srv.accept()
        except OSError:  # closed by the test without a call (nothing was to be restarted)
            return
        with conn:
            rest = b""
            while b"BEGIN\r\n" not in rest:
                data = conn.recv(4096)
                if not data:
                    return
                rest += data
                if b"AUTH" in rest and b"OK" not in rest:
                    conn.sendall(b"OK 0123456789abcdef0123456789abcdef\r\n")
                    rest += b"OK"
            parser = Parser()
            parser.add_data(rest.split(b"BEGIN\r\n", 1)[1])
            while True:
                for msg in iter(parser.get_next_message, None):
                    if msg.header.message_type == MessageType.method_call:
                        self.calls.append((msg.header.fields[HeaderFields.member], tuple(msg.body)))
                        reply = (new_error(msg, self.error, "s", ("refused",)) if self.error
                                 else new_method_return(msg, "o", ("/org/freedesktop/systemd1/job/7",)))
                        conn.sendall(reply.serialise(serial=len(self.calls)))
                data = conn.recv(65536)
                if not data:
                    return
                parser.add_data(data)

    def close(self) -> None:
        self.srv.close()


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """unix socket paths are limited to 107 bytes: pytest's tmp_path can be longer."""
    import tempfile

    d = Path(tempfile.mkdtemp(prefix="nri-", dir="/tmp"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_restart_asks_systemd_once_nri_is_on_in_the_file_and_not_served(short_dir: Path) -> None:
    nri_sock = short_dir / "nri.sock"
    config = short_dir / "config.toml"
    config.write_text(f'version = 2\n[plugins."{NRI}"]\n  disable = true\n  socket_path = "{nri_sock}"\n')
    bus = SystemdBus(short_dir / "private")
    try:
        assert enable(config, "--restart", "--systemd-bus", str(short_dir / "private")) == 0
        assert bus.calls == [("RestartUnit", ("containerd.service", "replace"))]
    finally:
        bus.close()
    # enabled, but an earlier restart never happened (the socket does not answer): asked again
    bus = SystemdBus(short_dir / "2" / "private")
    try:
        bus_path = str(short_dir / "2" / "private")
        assert enable(config, "--restart", "--unit", "k3s.service", "--systemd-bus", bus_path) == 0
        assert bus.calls == [("RestartUnit", ("k3s.service", "replace"))]
    finally:
        bus.close()
    # served: containerd runs with NRI on, nothing to restart
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as served:
        served.bind(str(nri_sock))
        served.listen(1)
        bus = SystemdBus(short_dir / "3" / "private")
        try:
            assert enable(config, "--restart", "--systemd-bus", str(short_dir / "3" / "private")) == 0
            assert bus.calls == []
        finally:
            bus.close()


def test_a_refused_restart_is_exit_1_and_says_what_to_do(short_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = short_dir / "config.toml"
    config.write_text(f'version = 2\n[plugins."{NRI}"]\n  disable = true\n  socket_path = "{short_dir}/nri.sock"\n')
    bus = SystemdBus(short_dir / "private", error="org.freedesktop.DBus.Error.AccessDenied")
    try:
        assert enable(config, "--restart", "--systemd-bus", str(short_dir / "private")) == 1
    finally:
        bus.close()
    err = capsys.readouterr().err
    assert "AccessDenied" in err and "systemctl restart containerd.service" in err, err
    assert "disable = false" in config.read_text()  # the edit stays: the next run restarts
    assert enable(config, "--restart", "--systemd-bus", str(short_dir / "absent")) == 1


def test_disabled_connections_are_noted_and_never_restarted_for(short_dir: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    config = short_dir / "config.toml"
    config.write_text(f'version = 2\n[plugins."{NRI}"]\n  disable = true\n  disable_connections = true\n')
    assert enable(config, "--restart", "--systemd-bus", str(short_dir / "absent")) == 0
    out, err = capsys.readouterr()
    assert "disable_connections = true: external plugins" in err and "not restarted" in out


def test_dry_run_prints_the_edit_and_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "config.toml"
    config.write_text(text := f'version = 2\n[plugins."{NRI}"]\n  disable = true\n')
    assert enable(config, "--dry-run") == 0
    assert "-  disable = true\n+  disable = false\n" in capsys.readouterr().out
    assert config.read_text() == text and backups(config) == []
