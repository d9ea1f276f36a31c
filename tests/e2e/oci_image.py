"""Build OCI image-layout tarballs without a registry or any container tool.

An image is one uncompressed layer (``application/vnd.oci.image.layer.v1.tar``), an image config, a
manifest and an ``index.json`` whose manifest carries ``io.containerd.image.name`` (the full name that
``ctr images import`` registers) and ``org.opencontainers.image.ref.name`` (the tag). The layer comes
either from a directory (e.g. a debootstrap root: modes, owners and symlinks are kept) or from a mapping
of in-image paths to entries (``HostFile``, ``Content``, ``Symlink``, ``Directory``). Output is
deterministic: entries sorted, mtimes fixed, so the same input yields the same digests.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import platform
import shutil
import stat
import subprocess
import tarfile
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

LAYER_MEDIA_TYPE = "application/vnd.oci.image.layer.v1.tar"
CONFIG_MEDIA_TYPE = "application/vnd.oci.image.config.v1+json"
MANIFEST_MEDIA_TYPE = "application/vnd.oci.image.manifest.v1+json"
INDEX_MEDIA_TYPE = "application/vnd.oci.image.index.v1+json"
FIXED_MTIME = 1_700_000_000  # any constant: keeps digests reproducible
DEFAULT_ENV = ("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",)
BUSYBOX = Path("/bin/busybox")


@dataclass(frozen=True)
class HostFile:
    """Copy a file of this machine into the image (mode taken from the source unless given)."""

    source: Path
    mode: int | None = None


@dataclass(frozen=True)
class Content:
    """A regular file with the given bytes."""

    data: bytes
    mode: int = 0o644


@dataclass(frozen=True)
class Symlink:
    target: str


@dataclass(frozen=True)
class Directory:
    mode: int = 0o755


LayerEntry = HostFile | Content | Symlink | Directory


class ImageBuildError(ValueError):
    """The image input is unusable (bad path, missing source, unknown name form)."""


def oci_arch() -> str:
    machine = platform.machine()
    return {
        "x86_64": "amd64",
        "aarch64": "arm64",
        "armv7l": "arm",
        "ppc64le": "ppc64le",
        "s390x": "s390x",
    }.get(machine, machine)


def _clean_member_name(path: str) -> str:
    name = os.path.normpath(path.lstrip("/"))
    if name in ("", ".") or name.startswith(".."):
        raise ImageBuildError(f"bad in-image path {path!r}: must name something below /")
    return name


def _add_entries(tar: tarfile.TarFile, entries: Mapping[str, LayerEntry]) -> None:
    names = {_clean_member_name(p): e for p, e in entries.items()}
    # Parent directories the caller did not list explicitly.
    for name in list(names):
        parent = os.path.dirname(name)
        while parent and parent not in names:
            names[parent] = Directory()
            parent = os.path.dirname(parent)
    for name in sorted(names):
        entry = names[name]
        info = tarfile.TarInfo(name)
        info.mtime = FIXED_MTIME
        if isinstance(entry, Directory):
            info.type, info.mode = tarfile.DIRTYPE, entry.mode
            tar.addfile(info)
        elif isinstance(entry, Symlink):
            info.type, info.linkname, info.mode = tarfile.SYMTYPE, entry.target, 0o777
            tar.addfile(info)
        elif isinstance(entry, Content):
            info.size, info.mode = len(entry.data), entry.mode
            tar.addfile(info, io.BytesIO(entry.data))
        else:
            if not entry.source.is_file():
                raise ImageBuildError(f"{entry.source} (for {name!r}) is not a regular file")
            st = entry.source.stat()
            info.size = st.st_size
            info.mode = entry.mode if entry.mode is not None else stat.S_IMODE(st.st_mode)
            with entry.source.open("rb") as src:
                tar.addfile(info, src)


def _add_tree(tar: tarfile.TarFile, root: Path) -> None:
    if not root.is_dir():
        raise ImageBuildError(f"rootfs directory {root} does not exist")
    paths: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        base = Path(dirpath)
        paths.extend(base / d for d in dirnames)
        paths.extend(base / f for f in sorted(filenames))
    for path in paths:
        info = tar.gettarinfo(str(path), arcname=str(path.relative_to(root)))
        info.mtime = FIXED_MTIME
        info.uname = info.gname = ""  # numeric owners only; names mean nothing inside the image
        if info.isreg():
            with path.open("rb") as src:
                tar.addfile(info, src)
        else:  # directories, symlinks, hard links, device nodes, fifos: header only
            tar.addfile(info)


def _sha256_file(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _split_name(name: str) -> str:
    """Return the tag of a full image name like ``e2e.local/busybox:1``."""
    last = name.rsplit("/", 1)[-1]
    if ":" not in last or "@" in name:
        raise ImageBuildError(f"image name {name!r} must be repository:tag (e.g. 'e2e.local/busybox:1')")
    return last.rsplit(":", 1)[1]


def build_oci_image(
    rootfs: Path | Mapping[str, LayerEntry],
    name: str,
    cmd: Sequence[str],
    out: Path,
    *,
    entrypoint: Sequence[str] = (),
    env: Sequence[str] = DEFAULT_ENV,
    working_dir: str = "/",
    labels: Mapping[str, str] | None = None,
) -> Path:
    """Write an OCI image-layout tarball for ``name`` to ``out`` and return ``out``.

    ``rootfs`` is a directory to pack (e.g. a debootstrap root) or a mapping in-image path → entry.
    Import the result with ``ctr -n k8s.io images import --snapshotter overlayfs OUT``.
    """
    tag = _split_name(name)
    if not cmd and not entrypoint:
        raise ImageBuildError(f"image {name!r} needs a cmd or an entrypoint")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="oci-image-", dir=out.parent) as tmp:
        blobs = Path(tmp, "blobs", "sha256")
        blobs.mkdir(parents=True)
        layer_tmp = Path(tmp, "layer.tar")
        with tarfile.open(layer_tmp, "w", format=tarfile.PAX_FORMAT) as layer:
            if isinstance(rootfs, Path):
                _add_tree(layer, rootfs)
            else:
                _add_entries(layer, rootfs)
        layer_digest = _sha256_file(layer_tmp)  # uncompressed: diff_id == blob digest
        layer_size = layer_tmp.stat().st_size
        shutil.move(layer_tmp, blobs / layer_digest)

        def put(doc: dict[str, object]) -> tuple[str, int]:
            data = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
            digest = hashlib.sha256(data).hexdigest()
            (blobs / digest).write_bytes(data)
            return f"sha256:{digest}", len(data)

        config: dict[str, object] = {"Env": list(env), "WorkingDir": working_dir}
        if cmd:
            config["Cmd"] = list(cmd)
        if entrypoint:
            config["Entrypoint"] = list(entrypoint)
        if labels:
            config["Labels"] = dict(labels)
        config_digest, config_size = put(
            {
                "architecture": oci_arch(),
                "os": "linux",
                "config": config,
                "rootfs": {"type": "layers", "diff_ids": [f"sha256:{layer_digest}"]},
                "history": [{"created_by": "nri-pinner tests/e2e/oci_image.py"}],
            }
        )
        manifest_digest, manifest_size = put(
            {
                "schemaVersion": 2,
                "mediaType": MANIFEST_MEDIA_TYPE,
                "config": {"mediaType": CONFIG_MEDIA_TYPE, "digest": config_digest, "size": config_size},
                "layers": [{"mediaType": LAYER_MEDIA_TYPE, "digest": f"sha256:{layer_digest}", "size": layer_size}],
            }
        )
        index = {
            "schemaVersion": 2,
            "mediaType": INDEX_MEDIA_TYPE,
            "manifests": [
                {
                    "mediaType": MANIFEST_MEDIA_TYPE,
                    "digest": manifest_digest,
                    "size": manifest_size,
                    "platform": {"architecture": oci_arch(), "os": "linux"},
                    "annotations": {
                        "io.containerd.image.name": name,
                        "org.opencontainers.image.ref.name": tag,
                    },
                }
            ],
        }
        Path(tmp, "index.json").write_text(json.dumps(index, sort_keys=True))
        Path(tmp, "oci-layout").write_text(json.dumps({"imageLayoutVersion": "1.0.0"}))
        partial = out.with_name(out.name + ".partial")
        with tarfile.open(partial, "w", format=tarfile.PAX_FORMAT) as outer:
            for rel in [
                "oci-layout",
                "index.json",
                "blobs",
                "blobs/sha256",
                *sorted(f"blobs/sha256/{p.name}" for p in blobs.iterdir()),
            ]:
                info = outer.gettarinfo(str(Path(tmp, rel)), arcname=rel)
                info.mtime, info.uid, info.gid, info.uname, info.gname = FIXED_MTIME, 0, 0, "", ""
                if info.isreg():
                    with Path(tmp, rel).open("rb") as src:
                        outer.addfile(info, src)
                else:
                    outer.addfile(info)
        partial.replace(out)
    return out


def busybox_rootfs(busybox: Path = BUSYBOX) -> dict[str, LayerEntry]:
    """A minimal root: static busybox, a symlink per applet, /etc/passwd and /etc/group for root."""
    if not busybox.is_file():
        raise ImageBuildError(f"{busybox} not found: install busybox-static (scripts/install-runtimes.sh)")
    applets = subprocess.run([str(busybox), "--list"], check=True, capture_output=True, text=True).stdout.split()
    entries: dict[str, LayerEntry] = {"bin/busybox": HostFile(busybox, 0o755)}
    entries.update({f"bin/{a}": Symlink("busybox") for a in applets if a != "busybox"})
    for d in ("dev", "proc", "sys", "tmp", "etc", "root", "var", "run"):
        entries[d] = Directory(0o1777 if d == "tmp" else 0o755)
    entries["etc/passwd"] = Content(b"root:x:0:0:root:/root:/bin/sh\n")
    entries["etc/group"] = Content(b"root:x:0:\n")
    return entries


def build_busybox_image(name: str, cmd: Sequence[str], out: Path) -> Path:
    return build_oci_image(busybox_rootfs(), name, cmd, out)
