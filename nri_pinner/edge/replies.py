"""The core's replies as the plugin hands them to the stub (edge/plugin.py): each checked to be of the
type its event is answered with (core/node.py `Reply`), with a clear error on anything else."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from ..nri.handlers import Deferred

R = TypeVar("R")


def expect(reply: object, want: type[R]) -> R:
    """The reply as a ``want``; a TypeError on anything else."""
    if not isinstance(reply, want):
        raise TypeError(f"the core answered {reply!r} where a {want.__name__} was due")
    return reply


def resolver(deferred: Deferred[R], want: type[R]) -> Callable[[object], None]:
    """What resolves ``deferred`` with a parked reply once it comes: a ``want``, else the deferred fails."""
    def resolve(reply: object) -> None:
        try:
            checked = expect(reply, want)
        except TypeError as exc:
            deferred.fail(exc)
            return
        deferred.resolve(checked)

    return resolve
