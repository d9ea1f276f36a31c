#!/usr/bin/env python3
"""Regenerate the protobuf message modules in nri_pinner/nri/gen/ from protos/.

Only message code is generated (``_pb2.py`` + ``.pyi``): ttrpc is not gRPC, so
no service stubs are needed. protoc names modules after the .proto paths
(``nri/pkg/api/v1alpha1/api_pb2.py`` ...); this script flattens them into one
package and rewrites their imports and module names so they load as
``nri_pinner.nri.gen.<name>_pb2`` without touching ``sys.path``.

The output depends on the protoc bundled with grpcio-tools, so the version is
pinned (see PINNED_GRPCIO_TOOLS); tests/nri/test_protos.py regenerates into a
temporary directory and fails if the committed files are stale.

Usage: python scripts/gen_protos.py [--out DIR] [--check]
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
PINNED_GRPCIO_TOOLS = "1.85.1"
PINNED_PROTOBUF = "7.36.2"

# proto file (relative to protos/) -> flat module name in the gen package.
PROTOS: dict[str, str] = {
    "nri/pkg/api/v1alpha1/api.proto": "api_pb2",
    "ttrpc/request.proto": "request_pb2",
    "google/rpc/status.proto": "status_pb2",
}

INIT_TEXT = '''"""Generated protobuf messages. DO NOT EDIT: run scripts/gen_protos.py.

api_pb2     -- nri.pkg.api.v1alpha1 (protos/nri/pkg/api/v1alpha1/api.proto)
request_pb2 -- ttrpc Request/Response/KeyValue (protos/ttrpc/request.proto)
status_pb2  -- google.rpc.Status (protos/google/rpc/status.proto)
"""
'''


def _python_module(proto: str) -> str:
    """The dotted module name protoc gives the generated code of ``proto``."""
    return proto.removesuffix(".proto").replace("/", ".") + "_pb2"


def _rewrite(text: str) -> str:
    """Point protoc's path-derived imports and module names at the gen package."""
    for proto, flat in PROTOS.items():
        original = _python_module(proto)
        parent, _, leaf = original.rpartition(".")
        text = text.replace(f"from {parent} import {leaf} ", f"from {PACKAGE} import {flat} ")
        text = text.replace(f"'{original}'", f"'{PACKAGE}.{flat}'")
    return text


def _protoc_include() -> Path:
    import grpc_tools  # type: ignore[import-untyped]

    return Path(grpc_tools.__file__).parent / "_proto"


def generate(out: Path) -> list[Path]:
    """Generate all modules into ``out`` (created if needed); return the written files."""
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
            *PROTOS,
        ]
        if protoc.main(args) != 0:
            raise SystemExit(f"protoc failed: {' '.join(args)}")
        for proto, flat in PROTOS.items():
            stem = proto.removesuffix(".proto") + "_pb2"
            for suffix in (".py", ".pyi"):
                source = Path(tmp) / (stem + suffix)
                target = out / (flat + suffix)
                target.write_text(_rewrite(source.read_text(encoding="utf-8")), encoding="utf-8")
                written.append(target)
    init = out / "__init__.py"
    init.write_text(INIT_TEXT, encoding="utf-8")
    written.append(init)
    return written


def installed_versions() -> tuple[str, str]:
    return importlib.metadata.version("grpcio-tools"), importlib.metadata.version("protobuf")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help="output directory (default: %(default)s)"
    )
    parser.add_argument("--check", action="store_true", help="only report whether --out is up to date")
    options = parser.parse_args(argv)

    tools, protobuf = installed_versions()
    if (tools, protobuf) != (PINNED_GRPCIO_TOOLS, PINNED_PROTOBUF):
        print(
            f"warning: grpcio-tools {tools} / protobuf {protobuf} installed, pinned are "
            f"{PINNED_GRPCIO_TOOLS} / {PINNED_PROTOBUF}; output may differ from the committed files",
            file=sys.stderr,
        )
    if not options.check:
        for path in generate(options.out):
            print(path)
        return 0
    with tempfile.TemporaryDirectory(prefix="nri-gen-check-") as tmp:
        stale = [
            fresh.name
            for fresh in generate(Path(tmp))
            if not (options.out / fresh.name).is_file()
            or not filecmp.cmp(fresh, options.out / fresh.name, shallow=False)
        ]
    if stale:
        print(f"stale generated files in {options.out}: {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
