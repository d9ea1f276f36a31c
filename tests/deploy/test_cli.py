"""The command line an operator meets: exit codes, messages that say what to do, no traceback on a
closed pipe, help for every option, and the man page / completions generated from the parser."""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nri_pinner.cli.main import EXIT_CODES, build_parser, main
from nri_pinner.cli.man_and_completions import bash_completion, man_page, zsh_completion

REPO = Path(__file__).resolve().parents[2]
FIXTURE = str(REPO / "tests" / "fixtures" / "sysfs" / "dual-socket-ht")
BAD = '[cpu_manager]\nreserved_cpus = "0,99"\nreserved = 1\n[nri]\nplugin_index = "9"\n'


def subcommands() -> dict[str, argparse.ArgumentParser]:
    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def test_every_option_has_help() -> None:
    for name, parser in subcommands().items():
        for action in parser._actions:
            assert action.help and action.help != argparse.SUPPRESS, f"{name} {action.option_strings or action.dest}"


def test_sysfs_help_says_what_is_read() -> None:
    sim = subcommands()["simulate"].format_help()
    assert "no config file or sysfs_root is read" in " ".join(sim.split())
    assert "the config's sysfs_root" not in sim
    assert "the config file is not read" in " ".join(subcommands()["topology"].format_help().split())


def test_status_without_a_plugin_says_what_to_do(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "--socket", str(tmp_path / "none.sock")]) == 3
    err = capsys.readouterr().err
    assert "is nri-pinner running? systemctl status nri-pinner" in err
    assert "UNAVAILABLE" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "argv",
    [["topology", "--sysfs", FIXTURE, "--json"],
     ["simulate", str(REPO / "tests" / "engine" / "scenarios" / "init-reuse.json")]],
)
def test_closed_pipe_is_not_a_traceback(argv: list[str]) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "nri_pinner", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader is gone before the first byte is written (`| head -0`)
    err = proc.stderr.read().decode()
    assert (proc.wait(), err) == (1, "")


def test_usage_and_config_errors_exit_2_with_every_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "bad.toml"
    cfg.write_text(BAD)
    assert main(["config", "--check", str(cfg), "--no-host"]) == 2
    err = capsys.readouterr().err
    assert f"{cfg}:3:1: cpu_manager.reserved: unknown key; did you mean 'reserved_cpus'?" in err
    assert f"{cfg}:5:1: nri.plugin_index:" in err and "2 errors" in err
    assert main(["run", "--config", str(cfg)]) == 2  # run refuses through the same path
    assert f"{cfg}:5:1: nri.plugin_index:" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        main(["topology", "--bogus"])
    assert info.value.code == 2


def test_check_prints_effective_toml_or_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "ok.toml"
    cfg.write_text(f'sysfs_root = "{FIXTURE}"\n[cpu_manager]\nreserved_cpus = "0"\n')
    assert main(["config", "--check", str(cfg)]) == 0
    out = capsys.readouterr().out
    assert '[cpu_manager]\nreserved_cpus = "0"\n' in out and "Settings(" not in out
    assert main(["config", "--check", str(cfg), "--quiet"]) == 0
    assert capsys.readouterr().out == ""
    assert main(["config", "--check", str(cfg), "--json"]) == 0
    assert '"reserved_cpus": "0"' in capsys.readouterr().out


def test_man_page_covers_every_option_and_exit_code() -> None:
    page = man_page()
    for name, parser in subcommands().items():
        assert ".SS nri\\-pinner " + name.replace("-", "\\-") in page
        for action in parser._actions:
            for flag in [] if isinstance(action, argparse._HelpAction) else action.option_strings:
                assert flag.replace("-", "\\-") in page, (name, flag)
    for code in EXIT_CODES:
        assert f".TP\n\\fB{code}\\fR" in page
    if shutil.which("man"):
        res = subprocess.run(["man", "-l", "-"], input=page, capture_output=True, text=True)
        assert res.returncode == 0 and "EXIT STATUS" in res.stdout, res.stderr


def test_man_page_files_name_the_packaged_paths() -> None:
    """The unit ships under /usr/lib/systemd/system (trixie's lintian: aliased-location for /lib), and the
    man page's FILES says so; tests/packaging/test_deb_package.py checks every FILES path is in the .deb."""
    files = man_page().split(".SH FILES\n", 1)[1].split("\n.SH ", 1)[0]
    paths = [ln.removeprefix("\\fI").removesuffix("\\fR").replace("\\-", "-")
             for ln in files.splitlines() if ln.startswith("\\fI")]
    assert paths == ["/etc/nri-pinner/config.toml", "/usr/lib/systemd/system/nri-pinner.service",
                     "/usr/lib/systemd/system/nri-pinner-nic-lookup.service", "/etc/logrotate.d/nri-pinner"], files
    # every conffile the .deb ships is named (packaging/deb/conffiles)
    conffiles = (Path(__file__).resolve().parents[2] / "packaging" / "deb" / "conffiles").read_text().split()
    assert set(conffiles) <= set(paths), conffiles


def test_completions_know_every_subcommand_and_option(tmp_path: Path) -> None:
    bash, zsh = bash_completion(), zsh_completion()
    script = tmp_path / "c.bash"
    script.write_text(bash)
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    # Complete `nri-pinner install --pl` in a real bash.
    probe = f'source {script}; COMP_WORDS=(nri-pinner install --pl); COMP_CWORD=2; _nri_pinner; '
    probe += 'echo "${COMPREPLY[@]}"'
    assert subprocess.run(["bash", "-c", probe], capture_output=True, text=True).stdout.split() == ["--plugin-dir"]
    assert zsh.startswith("#compdef nri-pinner\n")
    if shutil.which("zsh"):  # not on a fresh CI machine; checked where it is
        (tmp_path / "_nri-pinner").write_text(zsh)
        assert subprocess.run(["zsh", "-n", str(tmp_path / "_nri-pinner")]).returncode == 0
    for name, parser in subcommands().items():
        assert name in bash and f"'{name}:" in zsh
        for action in parser._actions:
            for flag in [] if isinstance(action, argparse._HelpAction) else action.option_strings:
                assert flag in bash and f"'{flag}[" in zsh, (name, flag)


# -- issue 35 item 8 -----------------------------------------------------------------------------------

def test_status_says_when_its_config_cannot_be_used(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sock = tmp_path / "inspect.sock"
    cfg = tmp_path / "c.toml"
    # Another key is wrong: the socket the file names is still the one tried, and the error is said.
    cfg.write_text(f'[inspect]\nsocket = "{sock}"\n[cpu_manager]\nreserved = 1\n')
    assert main(["status", "--config", str(cfg)]) == 3
    err = capsys.readouterr().err
    assert f"cannot reach the plugin at {sock}" in err
    assert f"{cfg} has errors" in err and "nri-pinner config --check" in err, err
    # Not TOML at all: the default socket, and saying so.
    cfg.write_text("[inspect\n")
    main(["status", "--config", str(cfg)])
    err = capsys.readouterr().err
    assert f"{cfg} cannot be read" in err and "trying the default socket /run/nri-pinner/nri-pinner.sock" in err, err


def test_not_running_hint_says_where_a_pre_installed_plugin_logs(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "--socket", str(tmp_path / "none.sock")]) == 3
    err = capsys.readouterr().err
    assert "journalctl -u containerd" not in err  # containerd discards a pre-installed plugin's output
    assert "log.file" in err


def test_check_and_defaults_together_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "bad.toml"
    cfg.write_text(BAD)
    with pytest.raises(SystemExit) as info:
        main(["config", "--check", str(cfg), "--defaults"])
    assert info.value.code == 2
    captured = capsys.readouterr()
    assert "not allowed with argument" in captured.err and captured.out == ""


def test_check_warns_when_every_cpu_is_reserved(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "all.toml"
    cfg.write_text(f'sysfs_root = "{FIXTURE}"\n[cpu_manager]\nreserved_cpus = "0-11"\n')
    assert main(["config", "--check", str(cfg), "--quiet"]) == 0
    err = capsys.readouterr().err
    assert err.startswith("warning: ") and "every online CPU (0-11)" in err, err
    assert main(["config", "--check", str(cfg), "--no-host", "--quiet"]) == 0  # no host: nothing to compare with
    assert capsys.readouterr().err == ""
