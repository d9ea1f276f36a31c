"""What every example plugin's ``main`` does: stderr logging for the stub, an output for events."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Callable, Coroutine
from typing import Any, TextIO

Runner = Callable[[argparse.Namespace, TextIO], Coroutine[Any, Any, int]]


def run_example(args: argparse.Namespace, run: Runner) -> int:
    """``args.log`` ('-' = stderr) receives the plugin's JSON lines; ``args.verbose`` turns on stub debug logs."""
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.log == "-":
        return asyncio.run(run(args, sys.stderr))
    with open(args.log, "a", encoding="utf-8") as out:
        return asyncio.run(run(args, out))
