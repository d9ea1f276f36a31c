"""structlog setup: JSON lines in production, readable on a terminal; `log.file` reopened on SIGHUP."""

from __future__ import annotations

import logging
import sys
from typing import Any, TextIO

import structlog


class LogStream:
    """Where every log line goes: stderr, or ``log.file`` opened for appending. `reopen` (SIGHUP, after
    logrotate moved the file away) opens the path again and swaps it in (one reference assignment, no
    lock: structlog and the stdlib handler serialise their own writes); a line being written meanwhile
    goes whole to the old file, which is closed only at the next reopen (logrotate runs hours apart)."""

    def __init__(self, file: str = "") -> None:
        self.file = file
        self._stream: TextIO = self._open() if file else sys.stderr
        self._retired: TextIO | None = None

    def _open(self) -> TextIO:
        return open(self.file, "a", buffering=1)

    def reopen(self) -> bool:
        """Open ``log.file`` again (False: logging to stderr, nothing to reopen). OSError if it cannot be
        opened: the old stream is kept."""
        if not self.file:
            return False
        new = self._open()
        if self._retired is not None:
            self._retired.close()
        self._retired, self._stream = self._stream, new
        self._retired.flush()
        return True

    def write(self, text: str) -> int:
        return self._stream.write(text)

    def flush(self) -> None:
        self._stream.flush()

    def isatty(self) -> bool:
        return self._stream.isatty()


_current: LogStream | None = None


def configure(level: str = "info", fmt: str = "auto", file: str = "") -> LogStream:
    """Log to ``file`` (or stderr); OSError when the file cannot be opened."""
    global _current
    stream = _current = LogStream(file)
    use_json = fmt == "json" or (fmt == "auto" and not stream.isatty())
    renderer: Any = structlog.processors.JSONRenderer() if use_json else structlog.dev.ConsoleRenderer(colors=False)
    numeric = logging.getLevelNamesMapping()[level.upper()]
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(stream),  # type: ignore[arg-type]
        cache_logger_on_first_use=False,
    )
    # stdlib loggers (the NRI stub, grpc) go to the same stream
    logging.basicConfig(level=numeric, stream=stream, format="%(asctime)s %(levelname)s %(name)s %(message)s",
                        force=True)
    return stream


def reopen() -> None:
    """SIGHUP: reopen ``log.file`` (logrotate's convention) and say so in the log."""
    log = structlog.get_logger("nri_pinner")
    if _current is None or not _current.file:
        log.info("SIGHUP: logging to stderr, no log file to reopen")
        return
    try:
        _current.reopen()
    except OSError as exc:
        log.error("SIGHUP: cannot reopen the log file; still writing to the old one", file=_current.file,
                  error=str(exc))
        return
    log.info("SIGHUP: log file reopened", file=_current.file)
