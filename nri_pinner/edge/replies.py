"""The core's replies as the plugin hands them to the stub (edge/plugin.py): each checked to be of the
type its event is answered with (core/node.py `Reply`), with a clear error on anything else."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from ..nri.handlers import ParkedReply

R = TypeVar("R")


def expect(reply: object, want: type[R]) -> R:
    """The reply as a ``want``; a TypeError on anything else."""
    if not isinstance(reply, want):
        raise TypeError(f"the core answered {reply!r} where a {want.__name__} was due")
    return reply


def resolver(parked: ParkedReply[R], want: type[R]) -> Callable[[object], None]:
    """What resolves ``parked`` with the core's reply once it comes: a ``want``, else ``parked`` fails."""
    def resolve(reply: object) -> None:
        try:
            checked = expect(reply, want)
        except TypeError as exc:
            parked.fail(exc)
            return
        parked.resolve(checked)

    return resolve
