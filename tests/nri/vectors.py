"""Canonical NRI wire byte vectors, computed by hand from the field tables.

Nothing here is produced by nri_pinner code: every byte string is written out
(as hex) from the protobuf wire rules and the mux/ttrpc header layouts, so the
codec, the generated messages and the fake runtime can all be checked against
the same bytes.

Layouts: mux frame = ConnID u32 BE, length u32 BE, payload;
ttrpc message = length u32 BE, stream u32 BE, type u8 (1 req, 2 resp, 3 data), flags u8, body.
"""

from __future__ import annotations


def h(text: str) -> bytes:
    """Hex with arbitrary whitespace -> bytes."""
    return bytes.fromhex("".join(text.split()))


# --- NRI messages -----------------------------------------------------------

# RegisterPluginRequest{plugin_name="cpupin", plugin_idx="90"}
REGISTER_PLUGIN_REQUEST = h("0a06 63707570696e  1202 3930")

# ConfigureRequest{runtime_name="containerd", runtime_version="v1.7.24"} (21 bytes)
CONFIGURE_REQUEST = h("120a 636f6e7461696e657264  1a07 76312e372e3234")

# ConfigureResponse{events=0x6AF}: events is field 2 (tag 0x10); 0x6AF = varint af 0d
CONFIGURE_RESPONSE_6AF = h("10 af0d")

# ContainerAdjustment{annotations={"a": "b"}}: annotations is field 2, a map entry {1: key, 2: value}
ADJUSTMENT_ANNOTATION_A_B = h("1206 0a0161 120162")

# CreateContainerResponse{adjust{linux{resources{cpu{cpus="2-3", mems="0"}}}}}
# path 1(adjust).6(linux).2(resources).2(cpu).6(cpus)|7(mems)
CREATE_CONTAINER_RESPONSE_CPUS_2_3 = h(
    "0a0e"  # CreateContainerResponse.adjust, 14 bytes
    "320c"  # ContainerAdjustment.linux, 12 bytes
    "120a"  # LinuxContainerAdjustment.resources, 10 bytes
    "1208"  # LinuxResources.cpu, 8 bytes
    "3203 322d33"  # LinuxCPU.cpus "2-3"
    "3a01 30"  # LinuxCPU.mems "0"
)

# StopContainerResponse{update=[ContainerUpdate{container_id="c1", linux{resources{cpu{cpus="0-1"}}}}]}
STOP_CONTAINER_RESPONSE_UPDATE_C1 = h(
    "0a0f"  # StopContainerResponse.update, 15 bytes
    "0a02 6331"  # ContainerUpdate.container_id "c1"
    "1209"  # ContainerUpdate.linux, 9 bytes
    "0a07"  # LinuxContainerUpdate.resources, 7 bytes
    "1205"  # LinuxResources.cpu, 5 bytes
    "3203 302d31"  # LinuxCPU.cpus "0-1"
)

# Container{id="c1"} followed by field 22 (image, unknown to us): tag (22 << 3 | 2) = varint b2 01,
# Image{name="pause"} = 0a05 7061757365 (7 bytes).
CONTAINER_WITH_UNKNOWN_FIELD_22 = h("0a02 6331  b201 07 0a05 7061757365")

# ConfigureRequest{runtime_name="containerd"} followed by field 7 (string "x"), unknown to NRI <= v0.12.
CONFIGURE_REQUEST_WITH_UNKNOWN_FIELD_7 = h("120a 636f6e7461696e657264  3a01 78")

# --- ttrpc bodies -----------------------------------------------------------

RUNTIME_SERVICE = "nri.pkg.api.v1alpha1.Runtime"  # 28 bytes
PLUGIN_SERVICE = "nri.pkg.api.v1alpha1.Plugin"  # 27 bytes

# ttrpc.Request{service=Runtime, method="RegisterPlugin", payload=REGISTER_PLUGIN_REQUEST,
#               timeout_nano=5_000_000_000 (varint 80 e4 97 d0 12)}  -- 66 bytes
REGISTER_PLUGIN_TTRPC_REQUEST = (
    h("0a1c")
    + RUNTIME_SERVICE.encode()
    + h("120e")
    + b"RegisterPlugin"
    + h("1a0c")
    + REGISTER_PLUGIN_REQUEST
    + h("20 80e497d012")
)

# ttrpc.Request{service=Plugin, method="Configure", payload=CONFIGURE_REQUEST,
#               timeout_nano=2_000_000_000 (varint 80 a8 d6 b9 07)}  -- 69 bytes
CONFIGURE_TTRPC_REQUEST = (
    h("0a1b")
    + PLUGIN_SERVICE.encode()
    + h("1209")
    + b"Configure"
    + h("1a15")
    + CONFIGURE_REQUEST
    + h("20 80a8d6b907")
)

# ttrpc.Response{payload=CONFIGURE_RESPONSE_6AF}, no status field (= OK)
CONFIGURE_TTRPC_RESPONSE = h("1203") + CONFIGURE_RESPONSE_6AF

# ttrpc.Response for Empty: both fields at their defaults, so zero bytes.
EMPTY_TTRPC_RESPONSE = b""

# ttrpc.Response{status=Status{code=12 (UNIMPLEMENTED), message="not implemented"}}
UNIMPLEMENTED_TTRPC_RESPONSE = h("0a13 080c 120f") + b"not implemented"

# --- whole frames -----------------------------------------------------------

# Plugin -> runtime, ConnID 2 (RuntimeServiceConn), ttrpc stream 1, Request, flags 0. 84 bytes.
REGISTER_PLUGIN_FRAME = h("00000002 0000004c") + h("00000042 00000001 01 00") + REGISTER_PLUGIN_TTRPC_REQUEST

# Runtime -> plugin reply to the above: ConnID 2, stream 1, Response with empty body. 18 bytes.
REGISTER_PLUGIN_REPLY_FRAME = h("00000002 0000000a") + h("00000000 00000001 02 00")

# Runtime -> plugin, ConnID 1 (PluginServiceConn), stream 1, Request. 87 bytes.
CONFIGURE_FRAME = h("00000001 0000004f") + h("00000045 00000001 01 00") + CONFIGURE_TTRPC_REQUEST

# Plugin -> runtime reply: ConnID 1, stream 1, Response. 23 bytes.
CONFIGURE_REPLY_FRAME = h("00000001 0000000f") + h("00000005 00000001 02 00") + CONFIGURE_TTRPC_RESPONSE

# Plugin -> runtime: ConnID 1, stream 3, Response carrying UNIMPLEMENTED. 39 bytes.
UNIMPLEMENTED_REPLY_FRAME = (
    h("00000001 0000001f") + h("00000015 00000003 02 00") + UNIMPLEMENTED_TTRPC_RESPONSE
)

# A frame for ConnID 7, which nobody opened: a Go reader drops it silently.
UNKNOWN_CONN_FRAME = h("00000007 00000003 aabbcc")

# A ttrpc Request split over two frames on ConnID 1 (5 + 5 bytes of header, empty body,
# stream 5): legal, since each mux connection is a byte stream.
SPLIT_HEADER_FRAMES = h("00000001 00000005 00000000 00") + h("00000001 00000005 000005 01 00")

# Conversation order used by split tests: everything above, back to back.
CONVERSATION = (
    REGISTER_PLUGIN_FRAME
    + REGISTER_PLUGIN_REPLY_FRAME
    + UNKNOWN_CONN_FRAME
    + CONFIGURE_FRAME
    + CONFIGURE_REPLY_FRAME
    + SPLIT_HEADER_FRAMES
    + UNIMPLEMENTED_REPLY_FRAME
)

# (conn_id, stream_id, msg_type, flags, body) of each ttrpc message in CONVERSATION.
CONVERSATION_MESSAGES = [
    (2, 1, 1, 0, REGISTER_PLUGIN_TTRPC_REQUEST),
    (2, 1, 2, 0, EMPTY_TTRPC_RESPONSE),
    (1, 1, 1, 0, CONFIGURE_TTRPC_REQUEST),
    (1, 1, 2, 0, CONFIGURE_TTRPC_RESPONSE),
    (1, 5, 1, 0, b""),
    (1, 3, 2, 0, UNIMPLEMENTED_TTRPC_RESPONSE),
]
