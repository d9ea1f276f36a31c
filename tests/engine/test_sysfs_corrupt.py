"""Discovery never crashes on a readable tree: random files of every fixture removed or corrupted.

The only allowed failure is SysfsError for a missing cpu directory (an unreadable root) or a tree
that names no CPU at all (no cpuN, no present/online list); every other tree yields a Topology,
and `nri-pinner topology` exits 0 on it.
"""
# mypy: disable-error-code="untyped-decorator"

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nri_pinner.cli.main import main
from nri_pinner.engine.topology.sysfs import SysfsError, discover_with_warnings

FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "sysfs"
NAMES = sorted(p.name for p in FIXTURES.iterdir() if p.is_dir())
# each fixture's files (and directories), relative to the fixture root, in a stable order
ENTRIES = {n: sorted(str(p.relative_to(FIXTURES / n)) for p in (FIXTURES / n).rglob("*")) for n in NAMES}

GARBAGE = st.one_of(
    st.binary(max_size=40),
    st.sampled_from([b"", b"\x00", b"-1\n", b"0-\n", b"99999999\n", b"ffffffff,ffffffff\n", b"3-1",
                     b"0-3\n\x00", b" 10 20 \x00", b"Node 0 MemTotal: x kB", b"zz,00000001"]),
)
DAMAGE = st.tuples(st.sampled_from(["remove", "corrupt", "replace-with-dir"]), st.integers(0, 10**6), GARBAGE)


def _damage(root: Path, entries: list[str], action: str, pick: int, garbage: bytes) -> None:
    path = root / entries[pick % len(entries)]
    if not path.exists() and not path.is_symlink():
        return  # under an already removed directory
    if action == "remove" or (action == "corrupt" and path.is_dir()):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    elif action == "corrupt":
        if path.is_symlink():
            path.unlink()
        path.write_bytes(garbage)
    elif not path.is_dir():
        path.unlink()
        path.mkdir()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(NAMES), st.lists(DAMAGE, min_size=1, max_size=12))
def test_no_exception_escapes(name: str, damage: list[tuple[str, int, bytes]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / name
        shutil.copytree(FIXTURES / name, root, symlinks=True)
        for action, pick, garbage in damage:
            _damage(root, ENTRIES[name], action, pick, garbage)
        cpu_dir = root / "sys" / "devices" / "system" / "cpu"
        try:
            found = discover_with_warnings(root)
        except SysfsError as exc:  # the only errors: no cpu directory, or not one CPU named anywhere
            assert not cpu_dir.is_dir() or "no CPUs under" in str(exc)
            return
        topo = found.topology
        assert topo.online and topo.online.issubset(topo.all_cpus)
        assert set(topo.numa_cpus) <= set(topo.all_numa_nodes)
        assert roundtrips(topo)


def roundtrips(topo: object) -> bool:
    from nri_pinner.engine.topology.model import Topology

    assert isinstance(topo, Topology)
    again = Topology.from_json(topo.to_json())
    return again.online == topo.online and again.all_numa_nodes == topo.all_numa_nodes


def test_topology_command_exits_0_on_a_repaired_tree(capsys: object) -> None:
    assert main(["topology", "--sysfs", str(FIXTURES / "fw-smt-across-nodes")]) == 0
    out = capsys.readouterr().out  # type: ignore[attr-defined]
    assert "repaired: SMT siblings 0,4 span NUMA nodes" in out
    assert "sources: packages from package_cpus/core_siblings" in out


def test_topology_command_fails_only_without_a_cpu_dir(tmp_path: Path) -> None:
    assert main(["topology", "--sysfs", str(tmp_path)]) == 2
