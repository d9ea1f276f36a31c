"""The core's rules and books are handed a `CoreContext` (core/context.py), never the node core itself
(issue 46: the kubelet's `Policy.Allocate(s state.State, ...)` shape). Only core/node.py knows `NodeCore`:
no other core module imports core/node.py (not even for a type) or names `NodeCore`; every rule's and
book's `core` is typed `CoreContext`; effects leave by `emit` only. Checked from the core's source."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

CORE = Path(__file__).resolve().parents[2] / "nri_pinner" / "core"
NODE = "nri_pinner.core.node"
# the modules the node core hands itself to, and the books among them (their classes take it as `core`)
HANDLERS = ("lifecycle", "connection", "passes", "repairs", "resizing", "runtime_record_updates", "quotas",
            "qos_slices", "nic_waits")
BOOKS = {"passes": "PassPlanner", "runtime_record_updates": "RuntimeRecordUpdater", "quotas": "QuotaBook",
         "qos_slices": "QosSlices", "nic_waits": "NicWaits"}


def _tree(name: str) -> ast.Module:
    path = CORE / f"{name}.py"
    return ast.parse(path.read_text(), str(path))


def node_references(tree: ast.Module) -> list[str]:
    """Every import of core/node.py (relative or absolute, `if TYPE_CHECKING:` included) and every use
    of the name `NodeCore` in ``tree``."""
    found = []
    for n in ast.walk(tree):
        if isinstance(n, ast.ImportFrom):
            module = n.module or ""
            names = {a.name for a in n.names}
            if (n.level == 1 and (module == "node" or (not module and "node" in names))) \
                    or module == NODE or (module == "nri_pinner.core" and "node" in names):
                found.append(f"line {n.lineno}: imports core/node.py")
            found.extend(f"line {n.lineno}: imports NodeCore" for a in n.names if a.name == "NodeCore")
        elif isinstance(n, ast.Import):
            found.extend(f"line {n.lineno}: imports {a.name}" for a in n.names if a.name == NODE)
        elif (isinstance(n, ast.Name) and n.id == "NodeCore") or (
                isinstance(n, ast.Attribute) and n.attr == "NodeCore"):
            found.append(f"line {n.lineno}: names NodeCore")
        elif isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.strip() == "NodeCore":
            found.append(f"line {n.lineno}: names NodeCore (a string annotation)")
    return found


def core_params(tree: ast.Module) -> list[tuple[str, str]]:
    """(function, annotation) of every parameter named `core` in ``tree``."""
    out = []
    for n in ast.walk(tree):
        if isinstance(n, ast.FunctionDef):
            for arg in [*n.args.posonlyargs, *n.args.args, *n.args.kwonlyargs]:
                if arg.arg == "core":
                    out.append((n.name, ast.unparse(arg.annotation) if arg.annotation is not None else ""))
    return out


def direct_effects(tree: ast.Module) -> list[str]:
    """Every `<...>.effects.append(...)` (or extend/insert) in ``tree``: effects leave by `emit`."""
    return [f"line {n.lineno}: {ast.unparse(n)}" for n in ast.walk(tree)
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
            and n.func.attr in ("append", "extend", "insert")
            and isinstance(n.func.value, ast.Attribute) and n.func.value.attr == "effects"]


@pytest.mark.parametrize("name", sorted(p.stem for p in CORE.glob("*.py") if p.stem != "node"))
def test_only_node_knows_the_node_core(name: str) -> None:
    assert node_references(_tree(name)) == []
    if name in HANDLERS:
        assert "NodeCore" not in (CORE / f"{name}.py").read_text()  # nor in a comment or a docstring


@pytest.mark.parametrize("name", HANDLERS)
def test_handlers_are_typed_with_the_context(name: str) -> None:
    params = core_params(_tree(name))
    assert params, f"{name}: no `core` parameter"
    assert [p for p in params if p[1] != "CoreContext"] == []


@pytest.mark.parametrize(("name", "book"), sorted(BOOKS.items()))
def test_books_take_the_context(name: str, book: str) -> None:
    [cls] = [n for n in _tree(name).body if isinstance(n, ast.ClassDef) and n.name == book]
    [init] = [n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"]
    assert ("__init__", "CoreContext") in core_params(ast.Module(body=[init], type_ignores=[]))


@pytest.mark.parametrize("name", sorted(p.stem for p in CORE.glob("*.py") if p.stem != "node"))
def test_effects_leave_by_emit(name: str) -> None:
    assert direct_effects(_tree(name)) == []


def test_the_checks_see_what_they_look_for() -> None:
    """The checks themselves: each finds what it forbids (else an empty answer proves nothing)."""
    bad = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .node import NodeCore, Reply\n"
                    "from . import node\nimport nri_pinner.core.node\n"
                    "def f(core: NodeCore) -> None:\n    core.effects.append(1)\n"
                    "def g(core: 'NodeCore') -> None: ...\n")
    assert len(node_references(bad)) == 6
    assert core_params(bad) == [("f", "NodeCore"), ("g", "'NodeCore'")]
    assert len(direct_effects(bad)) == 1
    # the node core does hand itself over, and so is seen by the same check
    assert node_references(_tree("node")) != []
