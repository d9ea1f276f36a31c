"""Property tests for the codec: garbage never escapes as anything but ProtocolError.

Also replays tests/nri/corpus/: ``ok-*`` files decode cleanly, ``error-*`` files
raise ProtocolError while feeding, ``truncated-*`` files raise at close().
"""

# mypy: disable-error-code="untyped-decorator"
# (hypothesis is imported untyped by the project mypy config)
from __future__ import annotations

import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nri_pinner.nri import codec
from nri_pinner.nri.codec import Decoder, ProtocolError, TtrpcMessage
from testkit import fuzz

CORPUS = Path(__file__).parent / "corpus"
FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def feed_in_pieces(decoder: Decoder, data: bytes, cuts: list[int]) -> list[TtrpcMessage]:
    messages: list[TtrpcMessage] = []
    start = 0
    for cut in [*sorted({min(max(cut, 0), len(data)) for cut in cuts}), len(data)]:
        messages += decoder.feed(data[start:cut])
        start = cut
    return messages


def run_to_end(data: bytes, cuts: list[int], max_message: int) -> list[TtrpcMessage] | ProtocolError:
    """Decode ``data`` split at ``cuts``; the outcome is the messages or the ProtocolError raised."""
    decoder = Decoder(max_message=max_message)
    try:
        messages = feed_in_pieces(decoder, data, cuts)
        decoder.close()
    except ProtocolError as error:
        return error
    assert decoder.pending == 0
    return messages


cuts_strategy = st.lists(st.integers(min_value=0, max_value=20_000), max_size=12)


@st.composite
def framed_streams(draw: st.DrawFn) -> bytes:
    """Streams of plausible frames: mostly valid headers with random ids, types and lengths."""
    out = b""
    for _ in range(draw(st.integers(0, 6))):
        conn = draw(st.sampled_from([0, 1, 1, 2, 2, 3, 0xFFFFFFFF]))
        inner = b""
        if draw(st.booleans()):
            body = draw(st.binary(max_size=64))
            length = draw(st.sampled_from([len(body), len(body) + 1, 0xFFFFFFFF, 1 << 20]))
            msg_type = draw(st.integers(0, 5))
            inner = (
                struct.pack(">IIBB", length, draw(st.integers(0, 9)), msg_type, draw(st.integers(0, 255)))
                + body
            )
        inner += draw(st.binary(max_size=24))
        frame_len = draw(st.sampled_from([len(inner), max(len(inner) - 3, 0), len(inner) + 5, 1 << 25]))
        out += struct.pack(">II", conn, frame_len) + inner
    tail: bytes = draw(st.binary(max_size=8))
    return out + tail


@FUZZ
@given(data=st.binary(max_size=600), cuts=cuts_strategy, max_message=st.sampled_from([0, 16, 4096, 16 << 20]))
def test_random_bytes_only_raise_protocol_error(data: bytes, cuts: list[int], max_message: int) -> None:
    whole = run_to_end(data, [], max_message)
    split = run_to_end(data, cuts, max_message)
    if isinstance(whole, ProtocolError):
        assert isinstance(split, ProtocolError)
        assert str(split) == str(whole)
    else:
        assert split == whole


@FUZZ
@given(data=framed_streams(), cuts=cuts_strategy, max_message=st.sampled_from([32, 1 << 20, 16 << 20]))
def test_framed_garbage_only_raises_protocol_error(data: bytes, cuts: list[int], max_message: int) -> None:
    whole = run_to_end(data, [], max_message)
    split = run_to_end(data, cuts, max_message)
    assert type(split) is type(whole)
    assert str(split) == str(whole) if isinstance(whole, ProtocolError) else split == whole


messages_strategy = st.lists(
    st.builds(
        TtrpcMessage,
        conn_id=st.sampled_from([codec.PLUGIN_SERVICE_CONN, codec.RUNTIME_SERVICE_CONN]),
        stream_id=st.integers(0, 0xFFFFFFFF),
        msg_type=st.integers(codec.MSG_REQUEST, codec.MSG_DATA),
        flags=st.integers(0, 255),
        payload=st.one_of(st.binary(max_size=64), st.binary(min_size=4080, max_size=9000)),
    ),
    max_size=6,
)


@FUZZ
@given(messages=messages_strategy, cuts=cuts_strategy)
def test_encode_decode_round_trip(messages: list[TtrpcMessage], cuts: list[int]) -> None:
    data = b"".join(
        codec.encode_message(m.conn_id, m.stream_id, m.msg_type, m.payload, m.flags) for m in messages
    )
    assert run_to_end(data, cuts, codec.MAX_RECEIVE) == messages


@FUZZ
@given(data=st.binary(max_size=200))
def test_envelope_decoders_only_raise_protocol_error(data: bytes) -> None:
    for decode in (codec.decode_request, codec.decode_response):
        try:
            decode(data)
        except ProtocolError as error:
            assert str(error).startswith("malformed ttrpc")


@FUZZ
@given(
    service=st.text(max_size=40),
    method=st.text(max_size=40),
    payload=st.binary(max_size=100),
    timeout=st.integers(-(1 << 63), (1 << 63) - 1),
    code=st.integers(-(1 << 31), (1 << 31) - 1),
    message=st.text(max_size=40),
)
def test_envelope_round_trip(
    service: str, method: str, payload: bytes, timeout: int, code: int, message: str
) -> None:
    assert codec.decode_request(codec.encode_request(service, method, payload, timeout)) == (
        service,
        method,
        payload,
        timeout,
    )
    expected_message = message if code else ""
    assert codec.decode_response(codec.encode_response(payload, code, message)) == (
        payload,
        code,
        expected_message,
    )


# ------------------------------------------------------------------- corpus


def corpus_files(prefix: str) -> list[Path]:
    return sorted(CORPUS.glob(f"{prefix}-*.bin"))


def test_corpus_is_present() -> None:
    assert corpus_files("ok") and corpus_files("error") and corpus_files("truncated")


@pytest.mark.parametrize("path", corpus_files("ok"), ids=lambda path: path.name)
def test_corpus_ok(path: Path) -> None:
    data = path.read_bytes()
    whole = run_to_end(data, [], codec.MAX_RECEIVE)
    assert not isinstance(whole, ProtocolError), str(whole)
    assert run_to_end(data, list(range(len(data))), codec.MAX_RECEIVE) == whole


@pytest.mark.parametrize("path", corpus_files("error"), ids=lambda path: path.name)
def test_corpus_error(path: Path) -> None:
    data = path.read_bytes()
    for cuts in ([], list(range(len(data)))):
        decoder = Decoder()
        with pytest.raises(ProtocolError):
            feed_in_pieces(decoder, data, cuts)


@pytest.mark.parametrize("path", corpus_files("truncated"), ids=lambda path: path.name)
def test_corpus_truncated(path: Path) -> None:
    data = path.read_bytes()
    for cuts in ([], list(range(len(data)))):
        decoder = Decoder()
        feed_in_pieces(decoder, data, cuts)
        with pytest.raises(ProtocolError, match=r"^truncated "):
            decoder.close()


# -- the whole decode path, seeded mutation fuzz (testkit/fuzz.py), a fixed budget in CI ----------------
# ttrpc frames -> request envelope -> NRI protobuf -> intent (annotations) -> CPU lists: only the specific
# errors may come out. benchmarks/bench_fuzz_decoder.py runs the same fuzzer long (see benchmarks/README.md).
FUZZ_INPUTS = 4000


@pytest.mark.parametrize("seed", [1, 2])
def test_mutated_nri_streams_raise_only_specific_errors(seed: int) -> None:
    report = fuzz.run(FUZZ_INPUTS, seed=seed)
    assert report.inputs == FUZZ_INPUTS
    # the mutations must leave enough intact to reach the deeper steps, or the fuzz proves little
    assert report.requests > FUZZ_INPUTS // 4 and report.intents > FUZZ_INPUTS // 4, report
