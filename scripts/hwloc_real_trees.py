#!/usr/bin/env python3
"""Compare discovery with lstopo on hwloc's own captured sysfs trees (real machines, long run).

hwloc's source ships sysfs trees captured from real machines (x86, ARM, POWER, s390, ia64, PS3,
buggy firmware) as tests/hwloc/linux/*.tar.bz2. They are not copied into this repository;
point this script at an hwloc checkout (git clone https://github.com/open-mpi/hwloc):

    .venv/bin/python scripts/hwloc_real_trees.py /path/to/hwloc

Prints one line per tree: OK, a CRASH (discovery raised: a bug), or DIFF with the levels where
discovery and lstopo disagree (lstopo's own stderr noted), and the count that agree. Agreeing
means on everything lstopo states: where lstopo leaves CPUs outside a level (no package, no L3,
no NUMA node: the tree's sets for them conflict), discovery still places them, and the line says
where. Exit 1 on a crash.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tarfile
import tempfile
from pathlib import Path

from nri_pinner.engine.topology.sysfs import discover_with_warnings


def _hwloc_xml() -> object:
    spec = importlib.util.spec_from_file_location("hwloc_xml", Path(__file__).with_name("hwloc_xml.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["hwloc_xml"] = module
    spec.loader.exec_module(module)
    return module


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("hwloc_source", type=Path, help="an hwloc checkout (has tests/hwloc/linux/)")
    args = parser.parse_args(argv)
    hx = _hwloc_xml()
    if hx.LSTOPO is None:  # type: ignore[attr-defined]
        print("lstopo-no-graphics not found: apt-get install hwloc-nox", file=sys.stderr)
        return 2
    tarballs = sorted((args.hwloc_source / "tests" / "hwloc" / "linux").glob("*.tar.bz2"))
    agree = crashes = placing = 0
    with tempfile.TemporaryDirectory() as tmp:
        for tarball in tarballs:
            name = tarball.name.removesuffix(".tar.bz2")
            with tarfile.open(tarball) as tar:
                tar.extractall(Path(tmp) / name, filter="tar")
            tree = next((p.parent for p in sorted((Path(tmp) / name).glob("*/sys"))), Path(tmp) / name)
            try:
                found = discover_with_warnings(tree)
            except Exception as exc:  # a crash is the finding
                crashes += 1
                print(f"{name:45s} CRASH {type(exc).__name__}: {exc}")
                continue
            hw = hx.run_lstopo(tree, check_stderr=False, whole_system=True)  # type: ignore[attr-defined]
            diffs = hx.differences(found.topology, hw)  # type: ignore[attr-defined]
            extra = hx.placed(found.topology, hw)  # type: ignore[attr-defined]
            note = "  [lstopo stderr]" if hw.stderr.strip() else ""
            note += f"  [we place what lstopo leaves out: {'; '.join(extra)}]" if extra else ""
            agree += not diffs
            placing += bool(extra) and not diffs
            print(f"{name:45s} {'OK' if not diffs else 'DIFF ' + ', '.join(diffs)}{note}  "
                  f"({len(found.warnings)} repairs)")
    print(f"{agree}/{len(tarballs)} trees agree with lstopo on everything it states ({placing} of them: "
          f"we also place CPUs it leaves outside a level), {crashes} crashes")
    return 1 if crashes else 0


if __name__ == "__main__":
    sys.exit(main())
