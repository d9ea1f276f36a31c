"""Mux + ttrpc codec against hand-computed bytes (tests/nri/vectors.py)."""

from __future__ import annotations

import struct

import pytest
import vectors as v

from nri_pinner.nri import codec
from nri_pinner.nri.codec import (
    GO_READ_BUFFER,
    MAX_RECEIVE,
    MSG_DATA,
    MSG_REQUEST,
    MSG_RESPONSE,
    PLUGIN_SERVICE_CONN,
    RUNTIME_SERVICE_CONN,
    TTRPC_MAX_SEND,
    Decoder,
    MessageTooLarge,
    ProtocolError,
    StreamIds,
    TtrpcMessage,
)
from nri_pinner.nri.gen import api_pb2


def mux(conn: int, payload: bytes) -> bytes:
    return struct.pack(">II", conn, len(payload)) + payload


def ttrpc(stream: int, msg_type: int, body: bytes, flags: int = 0) -> bytes:
    return struct.pack(">IIBB", len(body), stream, msg_type, flags) + body


def expected(rows: list[tuple[int, int, int, int, bytes]]) -> list[TtrpcMessage]:
    return [TtrpcMessage(*row) for row in rows]


# --------------------------------------------------------------- worked example


def test_register_plugin_frame_is_the_worked_example() -> None:
    body = codec.encode_request(
        "nri.pkg.api.v1alpha1.Runtime", "RegisterPlugin", v.REGISTER_PLUGIN_REQUEST, timeout_ns=5_000_000_000
    )
    assert body == v.REGISTER_PLUGIN_TTRPC_REQUEST
    frame = codec.encode_message(RUNTIME_SERVICE_CONN, 1, MSG_REQUEST, body)
    assert len(frame) == 84
    assert frame == v.REGISTER_PLUGIN_FRAME


def test_worked_example_decodes() -> None:
    [message] = Decoder().feed(v.REGISTER_PLUGIN_FRAME)
    assert (message.conn_id, message.stream_id, message.msg_type, message.flags) == (2, 1, MSG_REQUEST, 0)
    service, method, payload, timeout = codec.decode_request(message.payload)
    assert (service, method, timeout) == ("nri.pkg.api.v1alpha1.Runtime", "RegisterPlugin", 5_000_000_000)
    request = api_pb2.RegisterPluginRequest.FromString(payload)
    assert (request.plugin_name, request.plugin_idx) == ("cpupin", "90")


def test_encodes_the_other_vectors() -> None:
    configure = codec.encode_request(v.PLUGIN_SERVICE, "Configure", v.CONFIGURE_REQUEST, 2_000_000_000)
    assert configure == v.CONFIGURE_TTRPC_REQUEST
    assert codec.encode_message(PLUGIN_SERVICE_CONN, 1, MSG_REQUEST, configure) == v.CONFIGURE_FRAME
    reply = codec.encode_response(v.CONFIGURE_RESPONSE_6AF)
    assert reply == v.CONFIGURE_TTRPC_RESPONSE
    assert codec.encode_message(PLUGIN_SERVICE_CONN, 1, MSG_RESPONSE, reply) == v.CONFIGURE_REPLY_FRAME
    assert codec.encode_response() == v.EMPTY_TTRPC_RESPONSE
    assert codec.encode_message(RUNTIME_SERVICE_CONN, 1, MSG_RESPONSE, b"") == v.REGISTER_PLUGIN_REPLY_FRAME
    unimplemented = codec.encode_response(status_code=12, status_message="not implemented")
    assert unimplemented == v.UNIMPLEMENTED_TTRPC_RESPONSE
    assert codec.encode_message(1, 3, MSG_RESPONSE, unimplemented) == v.UNIMPLEMENTED_REPLY_FRAME


def test_decode_response_status() -> None:
    assert codec.decode_response(v.CONFIGURE_TTRPC_RESPONSE) == (v.CONFIGURE_RESPONSE_6AF, 0, "")
    assert codec.decode_response(v.EMPTY_TTRPC_RESPONSE) == (b"", 0, "")
    assert codec.decode_response(v.UNIMPLEMENTED_TTRPC_RESPONSE) == (b"", 12, "not implemented")


def test_decode_request_defaults() -> None:
    assert codec.decode_request(b"") == ("", "", b"", 0)
    # Go sets time.Until(deadline), which is negative once the deadline passed.
    assert codec.decode_request(codec.encode_request("s", "m", b"x", -5))[3] == -5


# ------------------------------------------------------------------- splitting


def test_conversation_decodes_in_one_piece() -> None:
    decoder = Decoder()
    assert decoder.feed(v.CONVERSATION) == expected(v.CONVERSATION_MESSAGES)
    assert decoder.pending == 0
    decoder.close()


def test_conversation_split_at_every_offset() -> None:
    want = expected(v.CONVERSATION_MESSAGES)
    for cut in range(len(v.CONVERSATION) + 1):
        decoder = Decoder()
        got = decoder.feed(v.CONVERSATION[:cut])
        assert decoder.pending <= cut
        got += decoder.feed(v.CONVERSATION[cut:])
        assert got == want, f"split at {cut}"
        decoder.close()


def test_conversation_byte_by_byte() -> None:
    decoder = Decoder()
    got: list[TtrpcMessage] = []
    for index in range(len(v.CONVERSATION)):
        got += decoder.feed(v.CONVERSATION[index : index + 1])
    assert got == expected(v.CONVERSATION_MESSAGES)
    decoder.close()


def test_message_split_across_frames_interleaved_with_other_conn() -> None:
    big = ttrpc(7, MSG_REQUEST, b"A" * 300)
    small = ttrpc(9, MSG_RESPONSE, b"bb")
    stream = (
        mux(1, big[:4]) + mux(2, small) + mux(1, b"") + mux(1, big[4:200]) + mux(9, b"zz") + mux(1, big[200:])
    )
    assert Decoder().feed(stream) == [
        TtrpcMessage(2, 9, MSG_RESPONSE, 0, b"bb"),
        TtrpcMessage(1, 7, MSG_REQUEST, 0, b"A" * 300),
    ]


def test_several_messages_in_one_frame() -> None:
    # Go never does this, but the mux conn is a byte stream, so it must work.
    frame = mux(1, ttrpc(1, MSG_REQUEST, b"x") + ttrpc(3, MSG_DATA, b"", flags=0x05))
    assert Decoder().feed(frame) == [
        TtrpcMessage(1, 1, MSG_REQUEST, 0, b"x"),
        TtrpcMessage(1, 3, MSG_DATA, 5, b""),
    ]


def test_unknown_conn_frames_are_dropped_without_buffering() -> None:
    decoder = Decoder()
    assert decoder.feed(struct.pack(">II", 3, 1000) + b"q" * 999) == []
    assert decoder.pending == 0
    with pytest.raises(ProtocolError, match="1 payload bytes short"):
        decoder.close()
    assert Decoder().feed(v.UNKNOWN_CONN_FRAME + v.REGISTER_PLUGIN_REPLY_FRAME) == expected(
        [(2, 1, MSG_RESPONSE, 0, b"")]
    )


# ----------------------------------------------------------------- big messages


def test_six_mib_message_in_one_frame() -> None:
    body = bytes(range(256)) * (6 * 4096)  # 6 MiB, more than ttrpc's 4 MiB send limit
    stream = mux(1, ttrpc(1, MSG_REQUEST, body))
    decoder = Decoder()
    got: list[TtrpcMessage] = []
    for start in range(0, len(stream), 1 << 16):
        got += decoder.feed(stream[start : start + (1 << 16)])
    assert got == [TtrpcMessage(1, 1, MSG_REQUEST, 0, body)]
    assert decoder.pending == 0


def test_largest_allowed_frame_is_accepted() -> None:
    header = struct.pack(">II", 1, MAX_RECEIVE + 10) + struct.pack(">IIBB", MAX_RECEIVE, 1, MSG_REQUEST, 0)
    decoder = Decoder()
    assert decoder.feed(header) == []
    assert decoder.pending == 10


def go_read_message(frames: list[bytes]) -> bytes:
    """Model of Go reading one ttrpc message: a 4096-byte bufio.Reader over multiplex.conn.

    multiplex.conn.Read hands out a whole frame and fails (ENOMEM) if it does not
    fit the slice it reads into; bufio reads straight into the caller's slice
    only when the caller wants >= 4096 bytes and nothing is buffered.
    """
    queue, buffered = list(frames), b""

    def read_full(size: int) -> bytes:
        nonlocal buffered
        out = b""
        while len(out) < size:
            want = size - len(out)
            if not buffered:
                frame = queue.pop(0)
                room = want if want >= GO_READ_BUFFER else GO_READ_BUFFER
                if len(frame) > room:
                    raise MemoryError(f"ENOMEM: {len(frame)}-byte frame into a {room}-byte read")
                if want >= GO_READ_BUFFER:
                    out += frame
                    continue
                buffered = frame
            out, buffered = out + buffered[:want], buffered[want:]
        return out

    header = read_full(10)
    body = read_full(struct.unpack(">I", header[:4])[0])
    assert not queue and not buffered
    return header + body


def split_frames(data: bytes) -> list[tuple[int, bytes]]:
    frames, pos = [], 0
    while pos < len(data):
        conn, length = struct.unpack_from(">II", data, pos)
        frames.append((conn, data[pos + 8 : pos + 8 + length]))
        pos += 8 + length
    return frames


@pytest.mark.parametrize(
    ("body_size", "sizes"),
    [
        (0, [10]),
        (GO_READ_BUFFER - 10, [4096]),
        (GO_READ_BUFFER - 9, [4096, 1]),
        (GO_READ_BUFFER, [4096, 10]),
        (5000, [4096, 914]),
        (TTRPC_MAX_SEND, [4096, TTRPC_MAX_SEND + 10 - 4096]),
    ],
)
def test_outgoing_framing_is_go_style(body_size: int, sizes: list[int]) -> None:
    body = bytes(i % 251 for i in range(body_size))
    data = codec.encode_message(PLUGIN_SERVICE_CONN, 11, MSG_RESPONSE, body)
    frames = split_frames(data)
    assert [conn for conn, _ in frames] == [PLUGIN_SERVICE_CONN] * len(sizes)
    assert [len(payload) for _, payload in frames] == sizes
    assert go_read_message([payload for _, payload in frames]) == ttrpc(11, MSG_RESPONSE, body)
    assert Decoder().feed(data) == [TtrpcMessage(1, 11, MSG_RESPONSE, 0, body)]


def test_go_model_rejects_one_big_frame() -> None:
    # Guards the model above: what a naive one-frame-per-message writer does to a Go peer.
    with pytest.raises(MemoryError, match="ENOMEM"):
        go_read_message([ttrpc(1, MSG_RESPONSE, b"x" * 5000)])


def test_encode_refuses_more_than_four_mib() -> None:
    with pytest.raises(MessageTooLarge, match=r"4194305 bytes exceeds the 4194304-byte maximum"):
        codec.encode_message(1, 1, MSG_RESPONSE, b"\0" * (TTRPC_MAX_SEND + 1))


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        ((0, 1, 1, b""), "ConnID 0 is reserved"),
        ((1 << 32, 1, 1, b""), "conn_id must be in"),
        ((1, -1, 1, b""), "stream_id must be in"),
        ((1, 1, 4, b""), "msg_type must be 1"),
        ((1, 1, 0, b""), "msg_type must be 1"),
    ],
)
def test_encode_argument_errors(args: tuple[int, int, int, bytes], reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        codec.encode_message(*args)
    with pytest.raises(ValueError, match=r"flags must be in 0\.\.255"):
        codec.encode_message(1, 1, 1, b"", flags=256)


# ------------------------------------------------------------ malformed input


@pytest.mark.parametrize(
    ("data", "error", "reason"),
    [
        (mux(0, b""), ProtocolError, r"^mux frame on reserved ConnID 0 \(length 0\)$"),
        (
            struct.pack(">II", 1, MAX_RECEIVE + 11),
            MessageTooLarge,
            r"^mux frame on conn 1 announces 16777227 bytes, more than the 16777226 allowed$",
        ),
        (
            struct.pack(">II", 5, 1 << 31),  # checked even for frames that would be dropped
            MessageTooLarge,
            r"announces 2147483648 bytes",
        ),
        (
            struct.pack(">II", 2, 100) + struct.pack(">IIBB", MAX_RECEIVE + 1, 3, MSG_REQUEST, 0),
            MessageTooLarge,
            r"^ttrpc message on conn 2 stream 3 announces 16777217 bytes, more than the 16777216 allowed$",
        ),
        (mux(1, ttrpc(1, 0, b"")), ProtocolError, r"^unknown ttrpc message type 0x00 on conn 1 stream 1$"),
        (mux(2, ttrpc(5, 4, b"abc")), ProtocolError, r"^unknown ttrpc message type 0x04 on conn 2 stream 5$"),
    ],
)
def test_malformed_input(data: bytes, error: type[ProtocolError], reason: str) -> None:
    decoder = Decoder()
    with pytest.raises(error, match=reason):
        decoder.feed(data)
    # The decoder stays failed: the connection must be closed.
    with pytest.raises(error, match=reason):
        decoder.feed(v.REGISTER_PLUGIN_FRAME)
    with pytest.raises(error, match=reason):
        decoder.close()


def test_oversize_detected_without_waiting_for_the_body() -> None:
    # Only the 18 header bytes arrive; the error must not wait for 6 MiB that never come.
    decoder = Decoder(max_message=4 << 20)
    with pytest.raises(
        MessageTooLarge, match=r"^ttrpc message on conn 1 stream 1 announces 6291456 bytes, more "
    ):
        decoder.feed(struct.pack(">II", 1, 4096) + struct.pack(">IIBB", 6 << 20, 1, MSG_REQUEST, 0))
    decoder = Decoder(max_message=4 << 20)
    with pytest.raises(
        MessageTooLarge, match=r"^mux frame on conn 1 announces 6291456 bytes, more than the 4194314"
    ):
        decoder.feed(struct.pack(">II", 1, 6 << 20))


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (v.REGISTER_PLUGIN_FRAME[:5], r"^truncated mux frame header: stream ended after 5 of 8 bytes$"),
        (v.REGISTER_PLUGIN_FRAME[:-3], r"^truncated mux frame: stream ended 3 payload bytes short$"),
        (mux(1, b"\0\0\0"), r"^truncated ttrpc header on conn 1: stream ended after 3 of 10 bytes$"),
        (
            mux(2, ttrpc(1, MSG_REQUEST, b"abcdef")[:12]),
            r"^truncated ttrpc message on conn 2: stream ended after 2 of 6 body bytes$",
        ),
    ],
)
def test_truncated_at_close(data: bytes, reason: str) -> None:
    decoder = Decoder()
    assert decoder.feed(data) == []
    assert decoder.pending > 0
    with pytest.raises(ProtocolError, match=reason):
        decoder.close()


def test_close_after_complete_messages_is_clean() -> None:
    decoder = Decoder()
    decoder.feed(v.CONFIGURE_FRAME)
    decoder.close()


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"\xff", "malformed ttrpc request"),
        (b"\x0a\x05abc", "malformed ttrpc request"),  # length runs past the end
        (b"\x0a\x01\xff", "malformed ttrpc request"),  # invalid UTF-8 in a proto3 string
        (b"\x0b", "malformed ttrpc request"),  # deprecated group start tag
    ],
)
def test_decode_request_garbage(data: bytes, reason: str) -> None:
    with pytest.raises(ProtocolError, match=reason):
        codec.decode_request(data)


def test_decode_response_garbage() -> None:
    with pytest.raises(ProtocolError, match=r"^malformed ttrpc response \(2 bytes\)"):
        codec.decode_response(b"\x12\x05")


# --------------------------------------------------------------- stream IDs


def test_client_stream_ids_are_odd_and_increasing() -> None:
    ids = StreamIds()
    assert [ids.next() for _ in range(4)] == [1, 3, 5, 7]


def test_request_stream_rule() -> None:
    codec.check_request_stream(0, 1)
    codec.check_request_stream(1, 7)
    with pytest.raises(ProtocolError, match="stream ID 4 must be odd"):
        codec.check_request_stream(1, 4)
    with pytest.raises(
        ProtocolError, match=r"stream ID 3 cannot be re-used and must increment \(last was 3\)"
    ):
        codec.check_request_stream(3, 3)
    with pytest.raises(ProtocolError, match="stream ID 1 cannot be re-used"):
        codec.check_request_stream(5, 1)
