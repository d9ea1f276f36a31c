import hashlib
import json
from pathlib import Path

from nri_pinner.edge.checkpoint import file as checkpoint_file


def test_round_trip(tmp_path: Path) -> None:
    p = tmp_path / "state" / "cp.json"
    body = {"policy": "static", "shared": "0-3", "entries": [{"pod": "p", "container": "c", "cpus": "4"}]}
    checkpoint_file.write(p, body)
    loaded = checkpoint_file.read(p)
    assert loaded.body == body and loaded.problem == ""
    assert not list(p.parent.glob(".*.tmp"))  # temp file renamed away
    assert p.stat().st_mode & 0o777 == 0o600


def test_missing_file_is_not_a_problem(tmp_path: Path) -> None:
    assert checkpoint_file.read(tmp_path / "none.json") == checkpoint_file.LoadedCheckpoint(None, "")


def test_edited_body_fails_checksum(tmp_path: Path) -> None:
    p = tmp_path / "cp.json"
    checkpoint_file.write(p, {"shared": "0-3"})
    doc = json.loads(p.read_text())
    doc["body"]["shared"] = "0-7"
    p.write_text(json.dumps(doc))
    loaded = checkpoint_file.read(p)
    assert loaded.body is None and "checksum mismatch" in loaded.problem


def test_garbage_foreign_and_future_files(tmp_path: Path) -> None:
    p = tmp_path / "cp.json"
    p.write_bytes(b"\x00\xffnot json")
    assert "not JSON" in checkpoint_file.read(p).problem
    # the kubelet's own cpu_manager_state is a foreign file for us
    p.write_text(json.dumps({"policyName": "static", "defaultCpuSet": "0-3", "checksum": 1}))
    assert "foreign" in checkpoint_file.read(p).problem
    p.write_text(json.dumps({"kind": checkpoint_file.KIND, "version": 99, "body": {}, "checksum": ""}))
    assert "format version 99" in checkpoint_file.read(p).problem


def test_truncated_file(tmp_path: Path) -> None:
    p = tmp_path / "cp.json"
    checkpoint_file.write(p, {"shared": "0-3", "entries": []})
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 2])
    assert checkpoint_file.read(p).body is None


def test_a_file_in_the_earlier_indented_layout_is_still_read(tmp_path: Path) -> None:
    """Before the compact encoding the document was indented; the checksum covers the canonical body
    text either way, so an upgrade keeps the node's checkpoint."""
    body = {"policy": "static", "shared": "0-3", "entries": [{"pod": "p", "container": "c", "cpus": "4", "x": None}]}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"))
    doc = {"kind": checkpoint_file.KIND, "version": checkpoint_file.FORMAT_VERSION, "body": body,
           "checksum": "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()}
    p = tmp_path / "cp.json"
    p.write_text(json.dumps(doc, sort_keys=True, indent=1) + "\n")
    assert checkpoint_file.read(p).body == body
    checkpoint_file.write(p, body)  # written back compact: one line, the same document
    assert json.loads(p.read_text()) == doc and p.read_text().count("\n") == 1
