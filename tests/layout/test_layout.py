"""The package layout rules: every module imports on its own (no import circle), modules stay small,
the rooms import only inward, the engine's decision rooms do no I/O, and the wheel carries only what a
node runs.

The rooms of nri_pinner, read as the pipeline: ``nri/`` the wire (NRI messages, the ttrpc codec, the
plugin stub); ``engine/`` the pure allocation policy; ``core/`` the node core (the one owner of node
state: events in, a reply and effects out); ``edge/`` the I/O around it (cgroups, checkpoint, clients,
NIC lookup, watch, observe, and the service that wires them); ``cli/`` the command line; ``config/``
the settings every room reads. The rule: the engine never imports the core, the wire, the edge or the
CLI; the core never imports the edge or the CLI — not even for types (``if TYPE_CHECKING:``)."""

from __future__ import annotations

import ast
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from nri_pinner.engine.qos import QoS

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "nri_pinner"
MAX_LINES = 400
# Modules that may touch the filesystem, sockets or processes: discovery lives in topology/ only.
PURE_ROOMS = ("cpumanager", "topologymanager", "devicemanager", "memorymanager", "nicmanager")
IO_MODULES = {"os", "io", "socket", "subprocess", "pathlib", "shutil", "tempfile", "glob"}
# room -> the rooms its modules never import (at run time or for types)
NEVER_IMPORTS = {
    "engine": ("nri_pinner.core", "nri_pinner.nri", "nri_pinner.edge", "nri_pinner.cli"),
    "core": ("nri_pinner.edge", "nri_pinner.cli"),
}


def _modules() -> list[str]:
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if "gen" in path.relative_to(PACKAGE).parts:
            continue
        rel = path.relative_to(REPO).with_suffix("")
        parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
        names.append(".".join(parts))
    return names


def test_every_module_imports_in_isolation() -> None:
    # One interpreter per module: an import circle only shows when its first import is the module itself.
    script = "import importlib, sys\nfor m in sys.argv[1:]:\n    importlib.import_module(m)\n"
    failures = []
    for module in _modules():
        done = subprocess.run([sys.executable, "-c", script, module], cwd=REPO, capture_output=True, text=True)
        if done.returncode != 0:
            failures.append(f"{module}: {done.stderr.strip().splitlines()[-1]}")
    assert not failures, "\n".join(failures)


def test_modules_stay_small() -> None:
    big = {}
    for path in PACKAGE.rglob("*.py"):
        if "gen" in path.relative_to(PACKAGE).parts:
            continue
        lines = len(path.read_text().splitlines())
        if lines > MAX_LINES:
            big[str(path.relative_to(REPO))] = lines
    assert not big, f"modules over {MAX_LINES} lines: {big}"


def imported_names(path: Path) -> set[str]:
    """Every module ``path`` names in an import (``if TYPE_CHECKING:`` and function bodies included),
    relative imports resolved; ``from X import y`` names both ``X`` and ``X.y`` (y may be a module)."""
    rel = path.relative_to(REPO).with_suffix("")
    package = ".".join(rel.parts if rel.name == "__init__" else rel.parts[:-1])
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names)
    return found


def test_rooms_import_only_inward() -> None:
    offenders = []
    for room, forbidden in NEVER_IMPORTS.items():
        for path in sorted((PACKAGE / room).rglob("*.py")):
            for name in sorted(imported_names(path)):
                if any(name == f or name.startswith(f + ".") for f in forbidden):
                    offenders.append(f"{path.relative_to(REPO)}: {name}")
    assert not offenders, "\n".join(offenders)


@pytest.mark.parametrize("room", PURE_ROOMS)
def test_decision_rooms_do_no_io(room: str) -> None:
    offenders = []
    for path in (PACKAGE / "engine" / room).rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = {node.module.split(".")[0]}
            else:
                continue
            offenders += [f"{path.name}: {n}" for n in names & IO_MODULES]
            if isinstance(node, ast.ImportFrom) and node.module and "sysfs" in node.module:
                offenders.append(f"{path.name}: {node.module}")
    assert not offenders


@pytest.mark.parametrize(
    ("spelling", "expected"),
    [("Guaranteed", QoS.GUARANTEED), ("burstable", QoS.BURSTABLE), ("BestEffort", QoS.BEST_EFFORT),
     ("best-effort", QoS.BEST_EFFORT), ("unmanaged", QoS.UNMANAGED), (QoS.BURSTABLE, QoS.BURSTABLE)],
)
def test_one_qos_vocabulary(spelling: str, expected: QoS) -> None:
    assert QoS.parse(spelling) is expected
    assert str(expected) == expected.value  # what the checkpoint and status carry


def test_unknown_qos_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="unknown QoS 'premium'"):
        QoS.parse("premium")


def test_wheel_carries_no_test_doubles_or_examples(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(tmp_path), str(REPO)],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr
    (wheel,) = tmp_path.glob("nri_pinner-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert any(n.startswith("nri_pinner/engine/cpumanager/") for n in names)
    leaked = [n for n in names if "fake_runtime" in n or "examples" in n or n.startswith(("testkit/", "tests/"))]
    assert not leaked
