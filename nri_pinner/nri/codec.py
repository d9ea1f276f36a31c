"""Sans-I/O codec for the NRI wire: the NRI multiplexer carrying ttrpc messages.

Layers (outermost first)::

    mux frame     [ConnID u32 BE][length u32 BE][payload]       containerd/nri pkg/net/multiplex
    ttrpc message [length u32 BE][stream u32 BE][type u8][flags u8][body]   containerd/ttrpc channel.go
    body          ttrpc.Request / ttrpc.Response protobuf carrying the NRI message as ``payload``

The mux has no open/close signalling; each ConnID is a byte stream in which
ttrpc messages may start and end anywhere relative to frame boundaries, so the
decoder reassembles per connection. No sockets and no asyncio here: callers
feed bytes in and write the bytes this module returns.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from google.protobuf.message import DecodeError

from nri_pinner.nri.gen import request_pb2

PLUGIN_SERVICE_CONN = 1  # plugin is the ttrpc server (service nri.pkg.api.v1alpha1.Plugin)
RUNTIME_SERVICE_CONN = 2  # runtime is the ttrpc server (service nri.pkg.api.v1alpha1.Runtime)
KNOWN_CONNS = frozenset({PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN})

MSG_REQUEST = 1
MSG_RESPONSE = 2
MSG_DATA = 3

MUX_HEADER = 8
TTRPC_HEADER = 10
TTRPC_MAX_SEND = 4 << 20  # ttrpc's messageLengthMax: a Go peer rejects larger bodies
MAX_RECEIVE = 16 << 20  # NRI v0.6.1 sends a whole Synchronize unchunked, up to its 16 MiB frame cap
GO_READ_BUFFER = 4096  # size of the bufio.Reader Go's ttrpc wraps around each mux connection

_UINT32_MAX = 0xFFFFFFFF
_MUX = struct.Struct(">II")
_TTRPC = struct.Struct(">IIBB")


class ProtocolError(Exception):
    """The peer broke the wire protocol; ``str()`` is the reason to log. Close the connection."""


class MessageTooLarge(ProtocolError):
    """A frame or message larger than allowed (incoming or outgoing)."""


@dataclass(frozen=True, slots=True)
class TtrpcMessage:
    conn_id: int
    stream_id: int
    msg_type: int
    flags: int
    payload: bytes


class Decoder:
    """Turns a mux byte stream, split anywhere, into complete ttrpc messages.

    Frames for ConnIDs other than 1 and 2 are dropped like the Go reader does;
    ConnID 0 is reserved and therefore malformed. Size limits are checked as
    soon as a header is complete, so an oversize announcement fails at once
    instead of waiting for bytes that never come. After a ProtocolError the
    decoder stays failed: every later ``feed`` raises the same error.
    """

    def __init__(self, max_message: int = MAX_RECEIVE) -> None:
        if max_message < 0:
            raise ValueError(f"max_message must be >= 0, got {max_message}")
        self._max_message = max_message
        self._max_frame = max_message + TTRPC_HEADER
        self._mux_header = bytearray()
        self._frame_conn: int | None = None  # None: frame payload is being dropped
        self._frame_left = 0  # payload bytes of the current frame not yet seen
        self._conn_buffers: dict[int, bytearray] = {conn: bytearray() for conn in sorted(KNOWN_CONNS)}
        self._error: ProtocolError | None = None

    @property
    def pending(self) -> int:
        """Bytes received but not yet returned as part of a complete message."""
        return len(self._mux_header) + sum(len(buffer) for buffer in self._conn_buffers.values())

    def feed(self, data: bytes) -> list[TtrpcMessage]:
        if self._error is not None:
            raise self._error
        try:
            return self._feed(memoryview(data))
        except ProtocolError as error:
            self._error = error
            raise

    def close(self) -> None:
        """Declare end of stream; raises ProtocolError if it cut a frame or message short."""
        if self._error is not None:
            raise self._error
        if self._mux_header:
            have = len(self._mux_header)
            raise ProtocolError(
                f"truncated mux frame header: stream ended after {have} of {MUX_HEADER} bytes"
            )
        if self._frame_left:
            raise ProtocolError(f"truncated mux frame: stream ended {self._frame_left} payload bytes short")
        for conn, buffer in self._conn_buffers.items():
            if len(buffer) < TTRPC_HEADER and buffer:
                raise ProtocolError(
                    f"truncated ttrpc header on conn {conn}: stream ended after {len(buffer)} of "
                    f"{TTRPC_HEADER} bytes"
                )
            if buffer:
                length = _TTRPC.unpack_from(buffer)[0]
                raise ProtocolError(
                    f"truncated ttrpc message on conn {conn}: stream ended after "
                    f"{len(buffer) - TTRPC_HEADER} of {length} body bytes"
                )

    def _feed(self, data: memoryview) -> list[TtrpcMessage]:
        messages: list[TtrpcMessage] = []
        pos, end = 0, len(data)
        while pos < end:
            if self._frame_left == 0:
                take = min(MUX_HEADER - len(self._mux_header), end - pos)
                self._mux_header += data[pos : pos + take]
                pos += take
                if len(self._mux_header) == MUX_HEADER:
                    self._start_frame()
                continue
            take = min(self._frame_left, end - pos)
            self._frame_left -= take
            conn = self._frame_conn
            if conn is not None:
                self._conn_buffers[conn] += data[pos : pos + take]
                self._drain(conn, messages)
            pos += take
        return messages

    def _start_frame(self) -> None:
        conn, length = _MUX.unpack(self._mux_header)
        self._mux_header.clear()
        if conn == 0:
            raise ProtocolError(f"mux frame on reserved ConnID 0 (length {length})")
        if length > self._max_frame:
            raise MessageTooLarge(
                f"mux frame on conn {conn} announces {length} bytes, more than the {self._max_frame} allowed"
            )
        self._frame_conn = conn if conn in KNOWN_CONNS else None
        self._frame_left = length

    def _drain(self, conn: int, messages: list[TtrpcMessage]) -> None:
        """Move every complete ttrpc message of ``conn`` into ``messages``; validate headers early."""
        buffer = self._conn_buffers[conn]
        start = 0
        while len(buffer) - start >= TTRPC_HEADER:
            length, stream_id, msg_type, flags = _TTRPC.unpack_from(buffer, start)
            if length > self._max_message:
                raise MessageTooLarge(
                    f"ttrpc message on conn {conn} stream {stream_id} announces {length} bytes, "
                    f"more than the {self._max_message} allowed"
                )
            if not MSG_REQUEST <= msg_type <= MSG_DATA:
                raise ProtocolError(
                    f"unknown ttrpc message type {msg_type:#04x} on conn {conn} stream {stream_id}"
                )
            stop = start + TTRPC_HEADER + length
            if len(buffer) < stop:
                break
            body = bytes(buffer[start + TTRPC_HEADER : stop])
            messages.append(TtrpcMessage(conn, stream_id, msg_type, flags, body))
            start = stop
        if start:
            del buffer[:start]


def _check_uint(name: str, value: int, maximum: int) -> None:
    if not 0 <= value <= maximum:
        raise ValueError(f"{name} must be in 0..{maximum}, got {value}")


def encode_message(conn_id: int, stream_id: int, msg_type: int, payload: bytes, flags: int = 0) -> bytes:
    """One ttrpc message in mux frames, framed exactly like Go's bufio.Writer does.

    Go reads each mux connection through a 4096-byte bufio.Reader, and a mux
    frame larger than the read buffer fails with ENOMEM. So the first frame
    carries at most the first 4096 bytes of the ttrpc message (header
    included); the rest goes in ONE more frame, which Go reads directly into
    the message buffer. Many small frames would not be safe either: Go queues
    at most 256 frames per connection and kills the trunk on overflow.
    """
    if conn_id == 0:
        raise ValueError("ConnID 0 is reserved")
    _check_uint("conn_id", conn_id, _UINT32_MAX)
    _check_uint("stream_id", stream_id, _UINT32_MAX)
    if not MSG_REQUEST <= msg_type <= MSG_DATA:
        raise ValueError(f"msg_type must be 1 (request), 2 (response) or 3 (data), got {msg_type}")
    _check_uint("flags", flags, 0xFF)
    if len(payload) > TTRPC_MAX_SEND:
        raise MessageTooLarge(
            f"ttrpc message body of {len(payload)} bytes exceeds the {TTRPC_MAX_SEND}-byte maximum"
        )
    message = _TTRPC.pack(len(payload), stream_id, msg_type, flags) + payload
    if len(message) <= GO_READ_BUFFER:
        return _MUX.pack(conn_id, len(message)) + message
    view = memoryview(message)
    rest = len(message) - GO_READ_BUFFER
    return b"".join(
        (
            _MUX.pack(conn_id, GO_READ_BUFFER),
            view[:GO_READ_BUFFER],
            _MUX.pack(conn_id, rest),
            view[GO_READ_BUFFER:],
        )
    )


def encode_request(service: str, method: str, payload: bytes, timeout_ns: int = 0) -> bytes:
    """Serialized ttrpc.Request; ``timeout_ns`` 0 means no deadline (field omitted)."""
    request = request_pb2.Request(service=service, method=method, payload=payload, timeout_nano=timeout_ns)
    return bytes(request.SerializeToString())


def encode_response(payload: bytes = b"", status_code: int = 0, status_message: str = "") -> bytes:
    """Serialized ttrpc.Response; the status field is present only for a non-OK code."""
    response = request_pb2.Response(payload=payload)
    if status_code != 0:
        response.status.code = status_code
        response.status.message = status_message
    return bytes(response.SerializeToString())


def decode_request(data: bytes) -> tuple[str, str, bytes, int]:
    """(service, method, payload, timeout_ns) of a serialized ttrpc.Request."""
    request = request_pb2.Request()
    try:
        request.ParseFromString(data)
    except DecodeError as error:
        raise ProtocolError(f"malformed ttrpc request ({len(data)} bytes): {error}") from None
    return str(request.service), str(request.method), bytes(request.payload), int(request.timeout_nano)


def decode_response(data: bytes) -> tuple[bytes, int, str]:
    """(payload, status_code, status_message) of a serialized ttrpc.Response (code 0 = OK)."""
    response = request_pb2.Response()
    try:
        response.ParseFromString(data)
    except DecodeError as error:
        raise ProtocolError(f"malformed ttrpc response ({len(data)} bytes): {error}") from None
    return bytes(response.payload), int(response.status.code), str(response.status.message)


class StreamIds:
    """Client-side ttrpc stream IDs: odd and increasing (1, 3, 5, ...) like the Go client."""

    def __init__(self) -> None:
        self._next = 1

    def next(self) -> int:
        stream_id = self._next
        if stream_id > _UINT32_MAX:
            raise ProtocolError("ttrpc stream IDs exhausted; reconnect to start over")
        self._next += 2
        return stream_id


def check_request_stream(last: int, stream_id: int) -> None:
    """Server-side rule of ttrpc (server.go): request stream IDs are odd and strictly increasing."""
    if stream_id % 2 != 1:
        raise ProtocolError(f"ttrpc request stream ID {stream_id} must be odd for client initiated streams")
    if stream_id <= last:
        raise ProtocolError(
            f"ttrpc request stream ID {stream_id} cannot be re-used and must increment (last was {last})"
        )
