"""One NRI trunk (a unix stream socket) carrying two ttrpc connections, as seen from one end.

Both ends of NRI are a ttrpc server on one multiplexed connection and a ttrpc client on the other:
the plugin serves ``Plugin`` on conn 1 and calls ``Runtime`` on conn 2; the runtime mirrors that.
:class:`TtrpcPeer` is that symmetric half, used by the stub and by the fake runtime (test double).
Framing and message encoding live in :mod:`nri_pinner.nri.codec` (sans I/O); this module adds the
socket, stream-id bookkeeping, concurrent request serving and call/response matching.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from nri_pinner.nri import codec

# google.rpc codes used on the wire (ttrpc reuses gRPC's).
OK = 0
UNKNOWN = 2
INVALID_ARGUMENT = 3
DEADLINE_EXCEEDED = 4
RESOURCE_EXHAUSTED = 8
UNIMPLEMENTED = 12
UNAVAILABLE = 14

_READ_SIZE = 256 * 1024


@dataclass(frozen=True)
class Reply:
    """What a request handler answers: a serialized payload or a non-OK status."""

    payload: bytes = b""
    code: int = OK
    message: str = ""


# handler(service, method, payload, timeout_ns) -> Reply
RequestHandler = Callable[[str, str, bytes, int], Awaitable[Reply]]
# encoder(conn_id, stream_id, msg_type, body) -> bytes for the socket
MessageEncoder = Callable[[int, int, int, bytes], bytes]


class TtrpcStatusError(Exception):
    """The peer answered a call with a non-OK status."""

    def __init__(self, method: str, code: int, message: str) -> None:
        super().__init__(f"{method}: status {code}: {message}")
        self.method = method
        self.code = code
        self.status_message = message


class PeerClosedError(ConnectionError):
    """The trunk closed while a call was outstanding (or before it was sent)."""


class KvLogger:
    """Adapter so callers may pass a stdlib ``logging.Logger`` or a structlog logger.

    Messages carry key/value fields; stdlib loggers get them appended as ``k=v`` text.
    """

    def __init__(self, logger: Any = None, default_name: str = "nri_pinner.nri") -> None:
        self._logger: Any = logger if logger is not None else logging.getLogger(default_name)
        self._stdlib = isinstance(self._logger, logging.Logger | logging.LoggerAdapter)

    def log(self, level: int, event: str, **fields: Any) -> None:
        if self._stdlib:
            if self._logger.isEnabledFor(level):
                text = " ".join([event, *(f"{k}={v!r}" for k, v in fields.items())])
                self._logger.log(level, "%s", text)
        else:
            getattr(self._logger, logging.getLevelName(level).lower())(event, **fields)

    def debug(self, event: str, **fields: Any) -> None:
        self.log(logging.DEBUG, event, **fields)

    def info(self, event: str, **fields: Any) -> None:
        self.log(logging.INFO, event, **fields)

    def warning(self, event: str, **fields: Any) -> None:
        self.log(logging.WARNING, event, **fields)

    def error(self, event: str, **fields: Any) -> None:
        self.log(logging.ERROR, event, **fields)


class TtrpcPeer:
    """Serve requests arriving on ``serve_conn`` and make calls on ``call_conn`` over one socket."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        serve_conn: int,
        call_conn: int,
        handler: RequestHandler,
        logger: KvLogger,
        name: str = "peer",
        encoder: MessageEncoder = codec.encode_message,
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._serve_conn = serve_conn
        self._call_conn = call_conn
        self._handler = handler
        self._log = logger
        self._name = name
        self._encode = encoder
        self._decoder = codec.Decoder()
        self._stream_ids = codec.StreamIds()
        self._last_request_stream = 0
        self._pending: dict[int, asyncio.Future[tuple[bytes, int, str]]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = asyncio.Event()
        self.close_reason: str | None = None

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    async def wait_closed(self) -> None:
        await self._closed.wait()

    async def run(self) -> None:
        """Read until EOF or a protocol error; always ends with the trunk closed."""
        try:
            while True:
                data = await self._reader.read(_READ_SIZE)
                if not data:
                    self._decoder.close()  # raises if the peer stopped mid-message
                    self.close("peer closed the connection")
                    return
                for message in self._decoder.feed(data):
                    self._on_message(message)
        except codec.MessageTooLarge as exc:
            # The runtime began a message it can never finish (NRI v0.6.1 refuses to send more than
            # 16 MiB after the first frame; newer runtimes chunk first): waiting would hang forever.
            self.close(f"message too large: {exc}; the runtime cannot deliver it (a Synchronize this big means "
                       "the node's pods/containers carry over 16 MiB of data, which containerd 1.7 cannot send "
                       "in one message); reconnecting, which succeeds once that state shrinks",
                       level=logging.ERROR)
        except codec.ProtocolError as exc:
            self.close(f"protocol error: {exc}", level=logging.ERROR)
        except (ConnectionError, OSError) as exc:
            self.close(f"connection error: {exc}", level=logging.WARNING)
        except asyncio.CancelledError:
            self.close("cancelled")
            raise
        finally:
            if not self.closed:
                self.close("reader stopped")

    def close(self, reason: str, *, level: int = logging.INFO) -> None:
        """Close the trunk once: fail outstanding calls, drop in-flight request tasks' replies."""
        if self._closed.is_set():
            return
        self.close_reason = reason
        self._log.log(level, "nri connection closed", peer=self._name, reason=reason)
        self._closed.set()
        for future in self._pending.values():
            if not future.done():
                future.set_exception(PeerClosedError(reason))
        self._pending.clear()
        with contextlib.suppress(Exception):
            self._writer.close()

    async def call(self, service: str, method: str, payload: bytes, timeout: float | None) -> bytes:
        """Unary call; raises TtrpcStatusError, PeerClosedError or TimeoutError."""
        if self.closed:
            raise PeerClosedError(self.close_reason or "closed")
        stream_id = self._stream_ids.next()
        timeout_ns = int(timeout * 1e9) if timeout is not None else 0
        request = codec.encode_request(service, method, payload, timeout_ns)
        future: asyncio.Future[tuple[bytes, int, str]] = asyncio.get_running_loop().create_future()
        self._pending[stream_id] = future
        try:
            await self._write(self._encode(self._call_conn, stream_id, codec.MSG_REQUEST, request))
            async with asyncio.timeout(timeout):
                body, code, message = await future
        finally:
            self._pending.pop(stream_id, None)
        if code != OK:
            raise TtrpcStatusError(method, code, message)
        return body

    async def _write(self, data: bytes) -> None:
        if self.closed:
            raise PeerClosedError(self.close_reason or "closed")
        try:
            self._writer.write(data)
            await self._writer.drain()
        except (ConnectionError, OSError) as exc:
            self.close(f"write failed: {exc}", level=logging.WARNING)
            raise PeerClosedError(str(exc)) from exc

    def _on_message(self, message: codec.TtrpcMessage) -> None:
        if message.conn_id == self._serve_conn and message.msg_type == codec.MSG_REQUEST:
            codec.check_request_stream(self._last_request_stream, message.stream_id)
            self._last_request_stream = message.stream_id
            service, method, payload, timeout_ns = codec.decode_request(message.payload)
            task = asyncio.get_running_loop().create_task(
                self._serve(message.stream_id, service, method, payload, timeout_ns)
            )
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        elif message.conn_id == self._call_conn and message.msg_type == codec.MSG_RESPONSE:
            future = self._pending.get(message.stream_id)
            if future is None or future.done():
                self._log.debug("response for unknown or abandoned call", stream=message.stream_id)
                return
            future.set_result(codec.decode_response(message.payload))
        else:
            # Streams/data frames are not used by NRI; Go's mux drops unknown conn ids too.
            self._log.debug(
                "ignored message", conn=message.conn_id, type=message.msg_type, stream=message.stream_id
            )

    async def _serve(
        self, stream_id: int, service: str, method: str, payload: bytes, timeout_ns: int
    ) -> None:
        try:
            reply = await self._handler(service, method, payload, timeout_ns)
        except Exception as exc:  # a handler bug must not kill the trunk
            self._log.error("request handler failed", method=method, error=repr(exc))
            reply = Reply(code=UNKNOWN, message=f"internal error: {exc}")
        if self.closed:
            return
        try:
            frame = self._encode(
                self._serve_conn,
                stream_id,
                codec.MSG_RESPONSE,
                codec.encode_response(reply.payload, reply.code, reply.message),
            )
        except codec.MessageTooLarge as exc:
            self._log.error("reply too large for ttrpc", method=method, error=str(exc))
            frame = self._encode(
                self._serve_conn,
                stream_id,
                codec.MSG_RESPONSE,
                codec.encode_response(b"", RESOURCE_EXHAUSTED, f"reply too large: {exc}"),
            )
        with contextlib.suppress(PeerClosedError):
            await self._write(frame)

    async def aclose(self) -> None:
        """Close and wait for in-flight request tasks to finish."""
        self.close("closed locally")
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
