"""Generated NRI/ttrpc messages: freshness, field numbers, unknown-field tolerance."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from pathlib import Path

import pytest
import vectors as v

from nri_pinner.nri.gen import api_pb2, request_pb2

REPO = Path(__file__).resolve().parents[2]
GEN = REPO / "nri_pinner" / "nri" / "gen"
EDGE_GEN = REPO / "nri_pinner" / "edge" / "gen"
PINNED = {"grpcio-tools": "1.85.1", "protobuf": "7.36.2"}  # must match scripts/gen_protos.py


@pytest.mark.parametrize(("group", "committed_dir"), [("nri", GEN), ("edge", EDGE_GEN)])
def test_generated_code_is_fresh(tmp_path: Path, group: str, committed_dir: Path) -> None:
    installed = {name: importlib.metadata.version(name) for name in PINNED}
    if installed != PINNED:
        pytest.skip(
            f"generated code is pinned to {PINNED}, installed {installed}: cannot compare byte-for-byte"
        )
    subprocess.run(
        [sys.executable, str(REPO / "scripts" / "gen_protos.py"), "--group", group, "--out", str(tmp_path)],
        check=True,
        capture_output=True,
    )
    fresh = sorted(path.name for path in tmp_path.iterdir())
    committed = sorted(path.name for path in committed_dir.iterdir() if path.is_file())
    assert fresh == committed, "generated file set differs; run scripts/gen_protos.py"
    stale = [name for name in fresh if (tmp_path / name).read_bytes() != (committed_dir / name).read_bytes()]
    assert not stale, f"stale generated files {stale}; run scripts/gen_protos.py"


def test_modules_live_in_the_package() -> None:
    assert api_pb2.Container.__module__ == "nri_pinner.nri.gen.api_pb2"
    status = request_pb2.Response.DESCRIPTOR.fields_by_name["status"].message_type
    assert status is not None
    assert status.full_name == "google.rpc.Status"


# ----------------------------------------------------------- hand-computed bytes


def test_register_plugin_request_bytes() -> None:
    request = api_pb2.RegisterPluginRequest(plugin_name="cpupin", plugin_idx="90")
    assert request.SerializeToString() == v.REGISTER_PLUGIN_REQUEST
    assert api_pb2.RegisterPluginRequest(NRI_version="v0.12.0").SerializeToString() == b"\x1a\x07v0.12.0"


def test_configure_request_bytes() -> None:
    request = api_pb2.ConfigureRequest.FromString(v.CONFIGURE_REQUEST)
    assert (request.runtime_name, request.runtime_version) == ("containerd", "v1.7.24")
    numbers = {field.name: field.number for field in api_pb2.ConfigureRequest.DESCRIPTOR.fields}
    assert numbers == {
        "config": 1,
        "runtime_name": 2,
        "runtime_version": 3,
        "registration_timeout": 4,
        "request_timeout": 5,
        "NRI_version": 6,
    }


def test_configure_response_events_is_field_2() -> None:
    assert api_pb2.ConfigureResponse(events=0x6AF).SerializeToString() == v.CONFIGURE_RESPONSE_6AF


def test_adjustment_annotations_is_field_2() -> None:
    adjustment = api_pb2.ContainerAdjustment(annotations={"a": "b"})
    assert adjustment.SerializeToString() == v.ADJUSTMENT_ANNOTATION_A_B


def test_cpuset_adjustment_bytes() -> None:
    response = api_pb2.CreateContainerResponse()
    response.adjust.linux.resources.cpu.cpus = "2-3"
    response.adjust.linux.resources.cpu.mems = "0"
    assert response.SerializeToString() == v.CREATE_CONTAINER_RESPONSE_CPUS_2_3


def test_cpuset_update_bytes() -> None:
    update = api_pb2.ContainerUpdate(container_id="c1")
    update.linux.resources.cpu.cpus = "0-1"
    assert (
        api_pb2.StopContainerResponse(update=[update]).SerializeToString()
        == v.STOP_CONTAINER_RESPONSE_UPDATE_C1
    )


def test_optional_wrapper_presence() -> None:
    # An empty OptionalInt64 body still means "set to 0": presence must survive a round trip.
    cpu = api_pb2.LinuxCPU()
    cpu.quota.SetInParent()
    assert cpu.SerializeToString() == b"\x12\x00"
    assert api_pb2.LinuxCPU.FromString(b"\x12\x00").HasField("quota")
    assert not api_pb2.LinuxCPU.FromString(b"").HasField("quota")


# --------------------------------------------------------------- unknown fields


def test_container_field_22_round_trips() -> None:
    container = api_pb2.Container.FromString(v.CONTAINER_WITH_UNKNOWN_FIELD_22)
    assert container.id == "c1"
    assert container.SerializeToString() == v.CONTAINER_WITH_UNKNOWN_FIELD_22
    # ... also when nested inside a request we parse and re-emit.
    wrapped = b"\x12" + bytes([len(v.CONTAINER_WITH_UNKNOWN_FIELD_22)]) + v.CONTAINER_WITH_UNKNOWN_FIELD_22
    request = api_pb2.CreateContainerRequest.FromString(wrapped)
    assert request.container.id == "c1"
    assert request.SerializeToString() == wrapped


def test_configure_request_field_7_round_trips() -> None:
    request = api_pb2.ConfigureRequest.FromString(v.CONFIGURE_REQUEST_WITH_UNKNOWN_FIELD_7)
    assert request.runtime_name == "containerd"
    assert request.SerializeToString() == v.CONFIGURE_REQUEST_WITH_UNKNOWN_FIELD_7


def test_unknown_enum_value_is_kept() -> None:
    # A newer runtime may send an Event we do not know (proto3 enums are open).
    event = api_pb2.StateChangeEvent.FromString(b"\x08\x63")
    assert event.event == 99
    assert event.SerializeToString() == b"\x08\x63"


# ------------------------------------------------------------ API surface


def test_event_enum_and_mask_bits() -> None:
    assert api_pb2.RUN_POD_SANDBOX == 1
    assert api_pb2.REMOVE_CONTAINER == 11
    assert api_pb2.VALIDATE_CONTAINER_ADJUSTMENT == 14
    assert api_pb2.LAST == 15
    subscribed = [
        api_pb2.RUN_POD_SANDBOX,
        api_pb2.STOP_POD_SANDBOX,
        api_pb2.REMOVE_POD_SANDBOX,
        api_pb2.CREATE_CONTAINER,
        api_pb2.START_CONTAINER,
        api_pb2.UPDATE_CONTAINER,
        api_pb2.STOP_CONTAINER,
        api_pb2.REMOVE_CONTAINER,
    ]
    assert sum(1 << (event - 1) for event in subscribed) == 0x6AF


def method_types(service: str) -> dict[str, tuple[str, str]]:
    descriptor = api_pb2.DESCRIPTOR.services_by_name[service]
    return {m.name: (m.input_type.name, m.output_type.name) for m in descriptor.methods}


def test_runtime_service() -> None:
    assert method_types("Runtime") == {
        "RegisterPlugin": ("RegisterPluginRequest", "Empty"),
        "UpdateContainers": ("UpdateContainersRequest", "UpdateContainersResponse"),
    }


def test_plugin_service() -> None:
    methods = method_types("Plugin")
    assert methods.pop("Configure") == ("ConfigureRequest", "ConfigureResponse")
    assert methods.pop("Synchronize") == ("SynchronizeRequest", "SynchronizeResponse")
    assert methods.pop("Shutdown") == ("Empty", "Empty")
    assert methods.pop("StateChange") == ("StateChangeEvent", "Empty")
    assert methods.pop("ValidateContainerAdjustment") == (
        "ValidateContainerAdjustmentRequest",
        "ValidateContainerAdjustmentResponse",
    )
    # Every other method follows the XxxRequest -> XxxResponse naming.
    assert methods == {name: (f"{name}Request", f"{name}Response") for name in methods}
    assert set(methods) == {
        "RunPodSandbox",
        "UpdatePodSandbox",
        "PostUpdatePodSandbox",
        "StopPodSandbox",
        "RemovePodSandbox",
        "CreateContainer",
        "PostCreateContainer",
        "StartContainer",
        "PostStartContainer",
        "UpdateContainer",
        "PostUpdateContainer",
        "StopContainer",
        "RemoveContainer",
    }


@pytest.mark.parametrize(
    ("message", "fields"),
    [
        ("SynchronizeRequest", {"pods": 1, "containers": 2, "more": 3}),
        ("SynchronizeResponse", {"update": 1, "more": 2}),
        ("UpdateContainerRequest", {"pod": 1, "container": 2, "linux_resources": 3}),
        ("StateChangeEvent", {"event": 1, "pod": 2, "container": 3}),
        ("ContainerUpdate", {"container_id": 1, "linux": 2, "ignore_failure": 3}),
        (
            "LinuxPodSandbox",
            {
                "pod_overhead": 1,
                "pod_resources": 2,
                "cgroup_parent": 3,
                "cgroups_path": 4,
                "namespaces": 5,
                "resources": 6,
            },
        ),
        (
            "LinuxContainerAdjustment",
            {
                "devices": 1,
                "resources": 2,
                "cgroups_path": 3,
                "oom_score_adj": 4,
                "namespaces": 7,
                "sysctl": 8,
                "memory_policy": 12,
            },
        ),
    ],
)
def test_field_numbers(message: str, fields: dict[str, int]) -> None:
    descriptor = api_pb2.DESCRIPTOR.message_types_by_name[message]
    assert {field.name: field.number for field in descriptor.fields} == fields
