"""Unit tests of the harness's pure parts (no containerd needed): OCI images, configs (the kubelet model:
test_kubelet_model.py)."""

from __future__ import annotations

import hashlib
import json
import tarfile
import tomllib
from pathlib import Path

import pytest

from .containerd_config import ContainerdPaths, ContainerdSettings, render_config
from .cri_stubs import strip_gogo
from .oci_image import Content, Directory, ImageBuildError, LayerEntry, Symlink, build_oci_image
from .plugins import CONNECTED, find_active_plugin
from .procfs import catches_signal, read_cpus_allowed_list


def _read_layout(path: Path) -> dict[str, bytes]:
    with tarfile.open(path) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]


def test_oci_image_layout_digests_and_name(tmp_path: Path) -> None:
    entries: dict[str, LayerEntry] = {
        "bin/tool": Content(b"#!/bin/sh\n", 0o755),
        "bin/alias": Symlink("tool"),
        "tmp": Directory(0o1777),
    }
    out = build_oci_image(entries, "e2e.local/x:7", ["/bin/tool"], tmp_path / "x.tar")
    files = _read_layout(out)
    for name, data in files.items():
        if name.startswith("blobs/sha256/"):
            assert hashlib.sha256(data).hexdigest() == name.rsplit("/", 1)[1]
    index = json.loads(files["index.json"])
    (desc,) = index["manifests"]
    assert desc["annotations"] == {
        "io.containerd.image.name": "e2e.local/x:7",
        "org.opencontainers.image.ref.name": "7",
    }
    manifest = json.loads(files["blobs/sha256/" + desc["digest"].split(":")[1]])
    (layer_desc,) = manifest["layers"]
    assert layer_desc["mediaType"] == "application/vnd.oci.image.layer.v1.tar"
    config = json.loads(files["blobs/sha256/" + manifest["config"]["digest"].split(":")[1]])
    assert config["rootfs"]["diff_ids"] == [layer_desc["digest"]]
    assert config["config"]["Cmd"] == ["/bin/tool"]
    layer_path = tmp_path / "layer.tar"
    layer_path.write_bytes(files["blobs/sha256/" + layer_desc["digest"].split(":")[1]])
    with tarfile.open(layer_path) as layer:
        members = {m.name: m for m in layer.getmembers()}
    assert members["bin"].isdir() and members["bin/alias"].issym() and members["bin/alias"].linkname == "tool"
    assert members["bin/tool"].mode == 0o755 and members["tmp"].mode == 0o1777
    # Deterministic: same input, same bytes.
    again = build_oci_image(entries, "e2e.local/x:7", ["/bin/tool"], tmp_path / "y.tar")
    assert again.read_bytes() == out.read_bytes()


def test_oci_image_from_directory_keeps_tree(tmp_path: Path) -> None:
    root = tmp_path / "rootfs"
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "os-release").write_text("ID=test\n")
    (root / "lib").symlink_to("usr/lib")
    out = build_oci_image(root, "e2e.local/dir:1", ["sh"], tmp_path / "d.tar")
    files = _read_layout(out)
    layer = max((d for n, d in files.items() if n.startswith("blobs/")), key=len)
    (tmp_path / "l.tar").write_bytes(layer)
    with tarfile.open(tmp_path / "l.tar") as tar:
        names = {m.name: m for m in tar.getmembers()}
    assert names["lib"].issym() and names["lib"].linkname == "usr/lib"
    assert tar is not None and "etc/os-release" in names


def test_oci_image_rejects_bad_input(tmp_path: Path) -> None:
    empty: dict[str, LayerEntry] = {"a": Content(b"")}
    with pytest.raises(ImageBuildError, match="repository:tag"):
        build_oci_image(empty, "e2e.local/notag", ["sh"], tmp_path / "o.tar")
    with pytest.raises(ImageBuildError, match="below /"):
        build_oci_image({"../x": empty["a"]}, "e2e.local/a:1", ["sh"], tmp_path / "o.tar")
    with pytest.raises(ImageBuildError, match="does not exist"):
        build_oci_image(tmp_path / "missing", "e2e.local/a:1", ["sh"], tmp_path / "o.tar")


def _paths(base: Path) -> ContainerdPaths:
    return ContainerdPaths(*(base / n for n in ContainerdPaths.__dataclass_fields__))


def test_configs_parse_and_keep_everything_private(tmp_path: Path) -> None:
    paths = _paths(tmp_path)
    v2 = tomllib.loads(render_config(1, paths, ContainerdSettings("e2e.local/pause:1")))
    v3 = tomllib.loads(render_config(2, paths, ContainerdSettings("e2e.local/pause:1")))
    assert (v2["version"], v3["version"]) == (2, 3)
    for cfg in (v2, v3):
        nri = cfg["plugins"]["io.containerd.nri.v1.nri"]
        assert nri["disable"] is False and nri["socket_path"] == str(paths.nri_socket)
        assert nri["plugin_request_timeout"] == "2s"
        assert cfg["root"] == str(paths.root) and cfg["grpc"]["address"] == str(paths.grpc_socket)
        assert cfg["plugins"]["io.containerd.internal.v1.opt"]["path"] == str(paths.opt_dir)
    cri17 = v2["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri17["restrict_oom_score_adj"] is True and cri17["sandbox_image"] == "e2e.local/pause:1"
    assert cri17["containerd"]["runtimes"]["runc"]["options"]["Root"] == str(paths.runc_root)
    rt21 = v3["plugins"]["io.containerd.cri.v1.runtime"]
    assert rt21["restrict_oom_score_adj"] is True
    assert rt21["containerd"]["runtimes"]["runc"]["options"]["SystemdCgroup"] is False
    assert v3["plugins"]["io.containerd.cri.v1.images"]["pinned_images"]["sandbox"] == "e2e.local/pause:1"
    with pytest.raises(ValueError, match="major version 3"):
        render_config(3, paths, ContainerdSettings("p:1"))


def test_strip_gogo_removes_only_gogo_parts() -> None:
    proto = (
        'syntax = "proto3";\nimport "github.com/gogo/protobuf/gogoproto/gogo.proto";\n'
        'option (gogoproto.sizer_all) = true;\noption go_package = "x";\n'
        "message M { string a = 1 [(gogoproto.nullable) = false]; int64 b = 2; }\n"
    )
    out = strip_gogo(proto)
    assert "gogo" not in out
    assert 'option go_package = "x";' in out and "string a = 1;" in out and "int64 b = 2;" in out


def test_connected_line_matches_both_runtimes_log_forms() -> None:
    v17 = r'time="t" level=info msg="plugin \"50-goref\" connected"'
    v21 = r'time="t" level=info msg="plugin \"50-goref\" connected and synchronized"'
    registered = r'msg="plugin \"external:50-goref[12]\" registered as \"50-goref\""'
    assert [m.group("name") for m in CONNECTED.finditer(v17 + "\n" + v21)] == ["50-goref", "50-goref"]
    assert CONNECTED.search(registered) is None


def test_cpus_allowed_list_reader(tmp_path: Path) -> None:
    (tmp_path / "42").mkdir()
    (tmp_path / "42" / "status").write_text("Name:\tsh\nCpus_allowed:\t3\nCpus_allowed_list:\t0-1\n")
    assert read_cpus_allowed_list(42, tmp_path) == "0-1"
    (tmp_path / "42" / "status").write_text("Name:\tsh\n")
    with pytest.raises(ValueError, match="no Cpus_allowed_list"):
        read_cpus_allowed_list(42, tmp_path)


def test_catches_signal_reads_sigcgt(tmp_path: Path) -> None:
    (tmp_path / "7").mkdir()
    (tmp_path / "7" / "status").write_text("SigIgn:\t0000000000000004\nSigCgt:\t0000000000004002\n")
    assert catches_signal(7, 15, tmp_path) and catches_signal(7, 2, tmp_path)
    assert not catches_signal(7, 3, tmp_path)


def test_active_plugin_needs_registration_then_invocation_order() -> None:
    registered = r'msg="plugin \"external:50-a[12]\" registered as \"50-a\""'
    order = r'msg="  #1: \"50-a\" (external:50-a[12])"'
    pre_b = r'msg="plugin \"pre-connected:60-b[3]\" registered as \"60-b\""'
    order_b = r'msg="  #2: \"60-b\" (pre-connected:60-b[3])"'
    assert find_active_plugin(registered) is None  # registered, not yet synchronized / listed
    assert find_active_plugin(order + "\n" + registered) is None  # listing before registration is stale
    log = "\n".join([registered, order, pre_b, order, order_b])
    assert find_active_plugin(log) == "50-a"
    assert find_active_plugin(log, "60-b") == "60-b"
    assert find_active_plugin(log, "70-c") is None


def test_runcs_device_program_race_is_told_from_other_start_failures() -> None:
    """The exact StartContainer error seen in the VM tier (containerd 1.7 and 2.1, systemd driver)."""
    import grpc

    from .pods import runc_device_race

    class Failed(grpc.RpcError):
        def __init__(self, details: str) -> None:
            self._details = details

        def details(self) -> str:
            return self._details

    seen = ("failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create "
            "failed: unable to start container process: error during container init: error setting cgroup config "
            "for procHooks process: failed to call BPF_PROG_ATTACH (BPF_CGROUP_DEVICE, BPF_F_ALLOW_MULTI): can't "
            "attach program: no such file or directory")
    assert runc_device_race(Failed(seen))
    assert not runc_device_race(Failed(seen.replace("no such file or directory", "argument list too long")))
    assert not runc_device_race(Failed("nri-pinner: TopologyAffinityError: no NUMA node fits"))
