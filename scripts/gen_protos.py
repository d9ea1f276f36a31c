#!/usr/bin/env python3
"""Regenerate the protobuf message modules in nri_pinner/nri/gen/ and nri_pinner/edge/gen/ from protos/.

Only message code is generated (``_pb2.py`` + ``.pyi``): ttrpc is not gRPC, so
no service stubs are needed. protoc names modules after the .proto paths
(``nri/pkg/api/v1alpha1/api_pb2.py`` ...); this script flattens them into one
package and rewrites their imports and module names so they load as
``nri_pinner.nri.gen.<name>_pb2`` without touching ``sys.path``.

The output depends on the protoc bundled with grpcio-tools, so the version is
pinned (see PINNED_GRPCIO_TOOLS); tests/nri/test_protos.py regenerates into a
temporary directory and fails if the committed files are stale.

Usage: python scripts/gen_protos.py [--group nri|edge [--out DIR]] [--check]
"""

from __future__ import annotations

import argparse
import filecmp
import importlib.metadata
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PROTO_ROOT = REPO / "protos"
DEFAULT_OUT = REPO / "nri_pinner" / "nri" / "gen"
PACKAGE = "nri_pinner.nri.gen"
EDGE_OUT = REPO / "nri_pinner" / "edge" / "gen"
EDGE_PACKAGE = "nri_pinner.edge.gen"
PINNED_GRPCIO_TOOLS = "1.85.1"
PINNED_PROTOBUF = "7.36.2"

# proto file (relative to protos/) -> flat module name in the gen package.
PROTOS: dict[str, str] = {
    "nri/pkg/api/v1alpha1/api.proto": "api_pb2",
    "ttrpc/request.proto": "request_pb2",
    "google/rpc/status.proto": "status_pb2",
}

# The edge's own protos (its clients and status socket): a separate package, so nri/ stays free of
# anything CPU-specific.
EDGE_PROTOS: dict[str, str] = {
    "cri/repair.proto": "cri_repair_pb2",
    "nri_pinner/inspect.proto": "inspect_pb2",
    "kubelet/podresources/v1/api.proto": "podresources_pb2",
}

EDGE_INIT_TEXT = '''"""Generated protobuf messages. DO NOT EDIT: run scripts/gen_protos.py.

cri_repair_pb2 -- the CRI UpdateContainerResources/Version subset (protos/cri/repair.proto)
inspect_pb2    -- nri-pinner's inspection service (protos/nri_pinner/inspect.proto)
podresources_pb2 -- the kubelet's pod resources API v1 (protos/kubelet/podresources/v1/api.proto)
"""
'''

INIT_TEXT = '''"""Generated protobuf messages. DO NOT EDIT: run scripts/gen_protos.py.

api_pb2     -- nri.pkg.api.v1alpha1 (protos/nri/pkg/api/v1alpha1/api.proto)
request_pb2 -- ttrpc Request/Response/KeyValue (protos/ttrpc/request.proto)
status_pb2  -- google.rpc.Status (protos/google/rpc/status.proto)
"""
'''


def _python_module(proto: str) -> str:
    """The dotted module name protoc gives the generated code of ``proto``."""
    return proto.removesuffix(".proto").replace("/", ".") + "_pb2"


def _rewrite(text: str, protos: dict[str, str] = PROTOS, package: str = PACKAGE) -> str:
    """Point protoc's path-derived imports and module names at the gen package."""
    for proto, flat in protos.items():
        original = _python_module(proto)
        parent, _, leaf = original.rpartition(".")
        text = text.replace(f"from {parent} import {leaf} ", f"from {package} import {flat} ")
        text = text.replace(f"'{original}'", f"'{package}.{flat}'")
    return text


def _protoc_include() -> Path:
    import grpc_tools  # type: ignore[import-untyped]

    return Path(grpc_tools.__file__).parent / "_proto"


def generate(out: Path, group: str = "nri") -> list[Path]:
    """Generate one group's modules into ``out`` (created if needed); return the written files."""
    protos, package, init_text = GROUPS[group][1:]
    from grpc_tools import protoc

    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    with tempfile.TemporaryDirectory(prefix="nri-gen-") as tmp:
        args = [
            "grpc_tools.protoc",
            f"-I{PROTO_ROOT}",
            f"-I{_protoc_include()}",
            f"--python_out={tmp}",
            f"--pyi_out={tmp}",
            *protos,
        ]
        if protoc.main(args) != 0:
            raise SystemExit(f"protoc failed: {' '.join(args)}")
        for proto, flat in protos.items():
            stem = proto.removesuffix(".proto") + "_pb2"
            for suffix in (".py", ".pyi"):
                source = Path(tmp) / (stem + suffix)
                target = out / (flat + suffix)
                text = _rewrite(source.read_text(encoding="utf-8"), protos, package)
                target.write_text(text, encoding="utf-8")
                written.append(target)
    init = out / "__init__.py"
    init.write_text(init_text, encoding="utf-8")
    written.append(init)
    return written


GROUPS: dict[str, tuple[Path, dict[str, str], str, str]] = {
    "nri": (DEFAULT_OUT, PROTOS, PACKAGE, INIT_TEXT),
    "edge": (EDGE_OUT, EDGE_PROTOS, EDGE_PACKAGE, EDGE_INIT_TEXT),
}


def installed_versions() -> tuple[str, str]:
    return importlib.metadata.version("grpcio-tools"), importlib.metadata.version("protobuf")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--group", choices=sorted(GROUPS), action="append",
                        help="which generated package (default: all)")
    parser.add_argument("--out", type=Path, help="output directory (only with one --group)")
    parser.add_argument("--check", action="store_true", help="only report whether the output is up to date")
    options = parser.parse_args(argv)
    groups: list[str] = options.group or sorted(GROUPS)
    if options.out is not None and len(groups) != 1:
        parser.error("--out needs exactly one --group")

    tools, protobuf = installed_versions()
    if (tools, protobuf) != (PINNED_GRPCIO_TOOLS, PINNED_PROTOBUF):
        print(
            f"warning: grpcio-tools {tools} / protobuf {protobuf} installed, pinned are "
            f"{PINNED_GRPCIO_TOOLS} / {PINNED_PROTOBUF}; output may differ from the committed files",
            file=sys.stderr,
        )
    status = 0
    for group in groups:
        out: Path = options.out or GROUPS[group][0]
        if not options.check:
            for path in generate(out, group):
                print(path)
            continue
        with tempfile.TemporaryDirectory(prefix="nri-gen-check-") as tmp:
            stale = [
                fresh.name
                for fresh in generate(Path(tmp), group)
                if not (out / fresh.name).is_file()
                or not filecmp.cmp(fresh, out / fresh.name, shallow=False)
            ]
        if stale:
            print(f"stale generated files in {out}: {', '.join(stale)}", file=sys.stderr)
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
