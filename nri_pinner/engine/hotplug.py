"""CPU hotplug and the reserved set: the settings an engine for the online CPUs is built from.

The static policy refuses reserved CPUs that are not online (as the kubelet refuses to start), but a
CPU going offline under a running node is no configuration error: until it returns, the online rest
of the reserved set is reserved (edge/watch/reconcile.py rebuilds the engine with these settings)."""

from __future__ import annotations

from dataclasses import replace

from ..config import Settings
from .cpuset import EMPTY, CPUSet


def settings_for_online(settings: Settings, online: CPUSet) -> tuple[Settings, CPUSet]:
    """``settings`` with the reserved CPUs narrowed to ``online``, and the reserved CPUs that are offline
    (empty: every reserved CPU is online, or none is named, and ``settings`` is returned as it is)."""
    reserved = settings.cpu_manager.reserved_cpus
    if reserved is None or reserved.issubset(online):
        return settings, EMPTY
    narrowed = replace(settings.cpu_manager, reserved_cpus=reserved & online)
    return replace(settings, cpu_manager=narrowed), reserved - online
