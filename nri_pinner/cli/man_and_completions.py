"""Man page and shell completions generated from the argparse definitions in cli.py, so that what the
documentation says and what the parser accepts cannot drift apart.
Usage: python -m nri_pinner.cli.man_and_completions man|bash|zsh"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator

from .. import __version__
from .main import EXIT_CODES, build_parser


def _subcommands(parser: argparse.ArgumentParser) -> Iterator[tuple[str, str, argparse.ArgumentParser]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            for name, sub in action.choices.items():
                yield name, helps.get(name, ""), sub


def _options(parser: argparse.ArgumentParser) -> Iterator[argparse.Action]:
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction | argparse._HelpAction):
            yield action


def _roff(text: str) -> str:
    text = text.replace("\\", "\\e").replace("-", "\\-")
    return "\n".join("\\&" + ln if ln.startswith((".", "'")) else ln for ln in text.splitlines())


def _expand(action: argparse.Action, parser: argparse.ArgumentParser) -> str:
    return parser._get_formatter()._expand_help(action) if action.help else ""


def _synopsis(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"\\fI{action.metavar or action.dest}\\fR"
    flag = "\\fB" + _roff(action.option_strings[-1]) + "\\fR"
    if action.nargs == 0:
        return flag
    metavar = action.metavar or action.dest.upper()
    return f"{flag} \\fI{metavar}\\fR"


def man_page() -> str:
    parser = build_parser()
    out = [
        f'.TH NRI-PINNER 1 "" "nri-pinner {__version__}" "User Commands"',
        ".SH NAME",
        "nri\\-pinner \\- kubelet\\-grade CPU pinning and NUMA alignment as a containerd NRI plugin",
        ".SH SYNOPSIS",
        "\\fBnri\\-pinner\\fR [\\fB\\-\\-version\\fR] \\fICOMMAND\\fR [\\fIOPTIONS\\fR]",
        ".SH DESCRIPTION",
        _roff((parser.description or "").replace("`", "")),
        ".SH COMMANDS",
    ]
    for name, helptext, sub in _subcommands(parser):
        out += [".SS " + _roff(f"nri-pinner {name}"), _roff(helptext) + "."]
        opts = list(_options(sub))
        out.append(".PP\n\\fBnri\\-pinner " + _roff(name) + "\\fR " + " ".join(f"[{_synopsis(a)}]" for a in opts))
        for action in opts:
            out += [".TP", _synopsis(action), _roff(_expand(action, sub))]
    out.append(".SH EXIT STATUS")
    for code, meaning in EXIT_CODES.items():
        out += [".TP", f"\\fB{code}\\fR", _roff(meaning)]
    out += [
        ".SH FILES",
        ".TP",
        "\\fI/etc/nri\\-pinner/config.toml\\fR",
        "The configuration file; check it with \\fBnri\\-pinner config \\-\\-check\\fR.",
        ".TP",
        "\\fI/usr/lib/systemd/system/nri\\-pinner.service\\fR",
        "The systemd unit (external plugin mode). \\fBType=notify\\fR: \\fBsystemctl start\\fR returns once the "
        "plugin is registered with containerd and synchronized (\\fBsystemctl status\\fR shows what it waits "
        "for); a start not ready within 90 s (\\fBTimeoutStartSec=90s\\fR: NRI off, containerd down) fails "
        "and \\fBRestart=on\\-failure\\fR tries again.",
        ".TP",
        "\\fI/usr/lib/systemd/system/nri\\-pinner\\-nic\\-lookup.service\\fR",
        "The NIC lookup service (\\fBnri\\-pinner nic\\-lookup\\-server\\fR), started with the plugin's unit: the "
        "only process holding a capability (\\fBCAP_SYS_ADMIN\\fR, to enter a pod's network namespace); it answers "
        "the plugin on \\fI/run/nri\\-pinner\\-nic\\-lookup/nic\\-lookup.sock\\fR "
        "(\\fBNRI_PINNER_NIC_LOOKUP_SOCKET\\fR, \\fB\"\"\\fR = never ask).",
        ".TP",
        "\\fI/etc/logrotate.d/nri\\-pinner\\fR",
        "Rotates \\fI/var/log/nri\\-pinner.log\\fR (the \\fBlog.file\\fR a pre\\-installed plugin writes) weekly; "
        "its postrotate sends the plugin SIGHUP, which reopens \\fBlog.file\\fR.",
        ".PP",
        "At run time: the inspection socket \\fI/run/nri\\-pinner/nri\\-pinner.sock\\fR (\\fB[inspect] socket\\fR) "
        "and its lock \\fI/run/nri\\-pinner/nri\\-pinner.sock.lock\\fR; the node\\-wide lock of the runtime "
        "\\fI/run/nri\\-pinner/nri\\-run\\-nri\\-nri.sock.lock\\fR (named after \\fB[nri] socket\\fR: one "
        "\\fBrun\\fR per runtime); each lock holds its holder's pid. The checkpoint "
        "\\fI/var/lib/nri\\-pinner/checkpoint.json\\fR (\\fB[state] checkpoint\\fR). "
        "\\fBenable\\-nri\\fR keeps containerd's original config as "
        "\\fIconfig.toml.<time>.nri\\-pinner\\-backup\\fR beside it.",
        ".SH ENVIRONMENT",
        ".TP",
        "\\fBNOTIFY_SOCKET\\fR",
        "Set by systemd: \\fBrun\\fR sends READY=1 there once registered and synchronized, STATUS= lines, "
        "and STOPPING=1 when it stops (\\fBsd_notify\\fR(3)); not passed on to child processes.",
        ".TP",
        "\\fBNRI_PINNER_INSTALL_ROOT\\fR",
        "Puts every host path \\fBinstall\\fR touches under this directory, and \\fBrun\\fR's node\\-wide "
        "lock under its \\fIrun/nri\\-pinner\\fR (a run that is not root, tests).",
        ".SH SEE ALSO",
        "\\fBsystemctl\\fR(1), \\fBsd_notify\\fR(3), \\fBcontainerd\\fR(8)",
    ]
    return "\n".join(out) + "\n"


def _words(parser: argparse.ArgumentParser) -> tuple[list[str], dict[str, list[str]], dict[str, list[str]]]:
    """Subcommands; options per subcommand; for each option that takes a file, the subcommands."""
    names: list[str] = []
    opts: dict[str, list[str]] = {}
    files: dict[str, list[str]] = {}
    for name, _, sub in _subcommands(parser):
        names.append(name)
        opts[name] = [s for a in _options(sub) for s in a.option_strings] + ["--help"]
        files[name] = [s for a in _options(sub) if a.nargs != 0 for s in a.option_strings]
    return names, opts, files


def bash_completion() -> str:
    names, opts, files = _words(build_parser())
    cases = "\n".join(
        f'        {n}) opts="{" ".join(opts[n])}"; takes="{" ".join(files[n])}" ;;' for n in names
    )
    return f"""# bash completion for nri-pinner (generated by python -m nri_pinner.cli.man_and_completions bash)
_nri_pinner() {{
    local cur prev cmd opts takes i
    cur=${{COMP_WORDS[COMP_CWORD]}}
    prev=${{COMP_WORDS[COMP_CWORD-1]}}
    cmd=
    for ((i = 1; i < COMP_CWORD; i++)); do
        case ${{COMP_WORDS[i]}} in -*) ;; *) cmd=${{COMP_WORDS[i]}}; break ;; esac
    done
    if [ -z "$cmd" ]; then
        COMPREPLY=($(compgen -W "{" ".join(names)} --version --help" -- "$cur"))
        return
    fi
    case $cmd in
{cases}
        *) return ;;
    esac
    case " $takes " in *" $prev "*) COMPREPLY=($(compgen -f -- "$cur")); return ;; esac
    if [[ $cur == -* ]]; then COMPREPLY=($(compgen -W "$opts" -- "$cur")); else COMPREPLY=($(compgen -f -- "$cur")); fi
}}
complete -F _nri_pinner nri-pinner
"""


def _zsh_quote(text: str) -> str:
    return text.replace("'", "'\\''").replace("[", "\\[").replace("]", "\\]").replace(":", "\\:")


def zsh_completion() -> str:
    parser = build_parser()
    cmds, cases = [], []
    for name, helptext, sub in _subcommands(parser):
        cmds.append(f"'{name}:{_zsh_quote(helptext)}'")
        specs = []
        for a in _options(sub):
            text = _zsh_quote(_expand(a, sub).split(" (default")[0])
            if not a.option_strings:
                specs.append(f"'1:{text}:_files'")
            else:
                arg = "" if a.nargs == 0 else f":{str(a.metavar or a.dest).lower()}:_files"
                specs += [f"'{s}[{text}]{arg}'" for s in a.option_strings]
        cases.append(f"        {name}) _arguments {' '.join(specs)} ;;")
    return f"""#compdef nri-pinner
# zsh completion for nri-pinner (generated by python -m nri_pinner.cli.man_and_completions zsh)
_nri_pinner() {{
    local -a commands
    commands=({' '.join(cmds)})
    if (( CURRENT == 2 )); then
        _describe 'command' commands
        return
    fi
    case $words[2] in
{chr(10).join(cases)}
    esac
}}
_nri_pinner "$@"
"""


def main(argv: list[str] | None = None) -> int:
    kind = (argv if argv is not None else sys.argv[1:])[:1]
    makers = {"man": man_page, "bash": bash_completion, "zsh": zsh_completion}
    if not kind or kind[0] not in makers:
        print("usage: python -m nri_pinner.cli.man_and_completions man|bash|zsh", file=sys.stderr)
        return 2
    sys.stdout.write(makers[kind[0]]())
    return 0


if __name__ == "__main__":
    sys.exit(main())
