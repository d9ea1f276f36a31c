"""structlog setup: JSON lines in production, readable on a terminal."""

from __future__ import annotations

import logging
import sys
from typing import Any, TextIO

import structlog


def configure(level: str = "info", fmt: str = "auto", file: str = "") -> None:
    stream: TextIO = open(file, "a", buffering=1) if file else sys.stderr  # noqa: SIM115 (lives for the process)
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
        logger_factory=structlog.PrintLoggerFactory(stream),
        cache_logger_on_first_use=False,
    )
    # stdlib loggers (the NRI stub, grpc) go to the same stream
    logging.basicConfig(level=numeric, stream=stream, format="%(asctime)s %(levelname)s %(name)s %(message)s",
                        force=True)
