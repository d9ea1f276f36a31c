"""A pod's network interfaces and the NUMA nodes of their PCI devices, read inside its network namespace.

Names like ``eth0`` repeat in every pod, so the links are read inside the pod's namespace
(``netns``): by the NIC lookup service, a separate process holding the one capability that needs
(``server``, asked by `NetnsReader` in ``client``), or, where none answers, by
this process on a short-lived thread of its own. The devices found are placed on this process's sysfs
root (PCI function, NUMA node).

Host-network pods have no namespace of their own: they name their interfaces in the pod annotation
``nri-pinner.io/nics: "eth1,eth2"`` (in a pod namespace the annotation narrows the links that count).

Looked up once per sandbox (RunPodSandbox, or its first container) and cached; a create waits at most
``LOOKUP_WAIT_SECONDS`` for a lookup still running, then gets no NIC hint (warning, counted).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import structlog

from ...nri.gen import api_pb2 as api
from .client import NetnsReader
from .netns import IFNAMSIZ, NicLink, bus_info, read_links

__all__ = ["NICS_ANNOTATION", "NicAnnotationError", "NicLink", "NicLookup", "SandboxNics", "annotated_names",
           "bus_info", "pod_key", "pod_netns_path", "read_links"]

log = structlog.get_logger("nri_pinner.nics")

NICS_ANNOTATION = "nri-pinner.io/nics"
LOOKUP_WAIT_SECONDS = 0.2  # well inside the create budget (runtime timeout 2 s minus the margin)
CONCURRENT_LOOKUPS = 4  # a Synchronize starts one per running pod: keep netlink and threads bounded


class NicAnnotationError(ValueError):
    """A malformed ``nri-pinner.io/nics`` annotation (the message quotes it)."""


@dataclass(frozen=True)
class SandboxNics:
    sandbox_id: str
    pod_key: str
    netns: str  # "" = the host's namespace (host-network pod)
    links: tuple[NicLink, ...] = ()
    problem: str = ""  # the lookup failed or an annotated interface is missing
    seconds: float = 0.0

    @property
    def numa_nodes(self) -> tuple[int, ...]:
        """One NUMA node per interface that has one (the NIC provider's input)."""
        return tuple(link.numa for link in self.links if link.numa is not None)

    def to_json(self) -> dict[str, Any]:
        return {"sandbox_id": self.sandbox_id, "pod": self.pod_key, "netns": self.netns or "host",
                "links": [link.to_json() for link in self.links], "numa": list(self.numa_nodes),
                "problem": self.problem, "lookup_ms": round(self.seconds * 1000, 3)}


def pod_key(pod: api.PodSandbox) -> str:
    return pod.uid or pod.name  # the same key as the container intent's


def pod_netns_path(pod: api.PodSandbox) -> str:
    """The network namespace path from the sandbox's Linux namespaces; "" for host-network pods."""
    for ns in pod.linux.namespaces:
        if ns.type == "network":
            return ns.path
    return ""


def annotated_names(pod: api.PodSandbox) -> tuple[str, ...] | None:
    """Interface names from ``nri-pinner.io/nics`` (``None`` when absent)."""
    text = pod.annotations.get(NICS_ANNOTATION)
    if text is None:
        return None
    names = tuple(n.strip() for n in text.split(","))
    bad = [n for n in names if not n or len(n) >= IFNAMSIZ or "/" in n or any(c.isspace() for c in n)]
    if bad or len(set(names)) != len(names):
        raise NicAnnotationError(f"{NICS_ANNOTATION}: {text!r}: expected distinct interface names like "
                                 '"eth1,eth2"')
    return names


# -- the per-sandbox cache ----------------------------------------------------------------------

Reader = Callable[[str, str, Sequence[str] | None], tuple[NicLink, ...]]


class NicLookup:
    """Sandbox NICs, looked up once per sandbox in the background and cached until RemovePodSandbox.

    Its dictionaries change only on the node thread (the NRI handlers and the NIC provider run there);
    the lookups themselves run on threads of their own and only complete a future; `snapshot` (status,
    another thread) reads a copy. No lock: the provider's read in the middle of an admission never waits.
    """

    def __init__(self, sysfs_root: str = "/", wait_seconds: float = LOOKUP_WAIT_SECONDS,
                 reader: Reader | None = None, on_late: Callable[[], None] | None = None) -> None:
        self.sysfs_root, self.wait_seconds, self.on_late = sysfs_root, wait_seconds, on_late
        self._reader: Reader = NetnsReader() if reader is None else reader  # the lookup service, else setns here
        # lookups wait in a queue for one of CONCURRENT_LOOKUPS dispatchers (started at the first), each
        # running one lookup at a time on a fresh thread (a setns'd thread is never reused)
        self._jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._dispatchers: list[threading.Thread] = []
        self._pending: dict[str, Future[SandboxNics]] = {}  # by sandbox id
        self._by_pod: dict[str, str] = {}  # pod key -> sandbox id
        self.late = 0

    def start(self, pod: api.PodSandbox) -> Future[SandboxNics]:
        """Begin the sandbox's lookup unless it is known (idempotent; never blocks)."""
        future = self._pending.get(pod.id)
        if future is not None:
            return future
        future = self._pending[pod.id] = Future()
        self._by_pod[pod_key(pod)] = pod.id
        path, key = pod_netns_path(pod), pod_key(pod)
        try:
            names = annotated_names(pod)
        except NicAnnotationError as exc:
            future.set_result(SandboxNics(pod.id, key, path, problem=str(exc)))
            log.warning("NIC annotation refused; no NIC hints for this pod", pod=key, error=str(exc))
            return future
        if not path and names is None:  # host network and nothing named: no constraint
            future.set_result(SandboxNics(pod.id, key, ""))
            return future
        if not self._dispatchers:  # the node thread is the only caller: no race on the first start
            self._dispatchers = [threading.Thread(target=self._dispatch, name=f"nri-pinner-nics-{i}", daemon=True)
                                 for i in range(CONCURRENT_LOOKUPS)]
            for t in self._dispatchers:
                t.start()
        self._jobs.put(lambda: self._run(future, pod.id, key, path, names))
        return future

    def _dispatch(self) -> None:
        while True:
            job = self._jobs.get()
            lookup = threading.Thread(target=job, name="nri-pinner-netns", daemon=True)
            lookup.start()
            lookup.join()

    def _run(self, future: Future[SandboxNics], sandbox: str, key: str, path: str,
             names: tuple[str, ...] | None) -> None:
        started = time.perf_counter()
        try:
            links, problem = self._reader(path, self.sysfs_root, names), ""
        except Exception as exc:
            links, problem = (), f"NIC lookup failed: {exc}"
        result = SandboxNics(sandbox, key, path, links, problem, time.perf_counter() - started)
        if problem:
            log.warning("NIC lookup failed; no NIC hints for this pod", pod=key, netns=path or "host", error=problem)
        else:
            log.info("pod NICs", pod=key, netns=path or "host", numa=list(result.numa_nodes),
                     links=[f"{x.name}:{x.pci or '-'}:{x.numa if x.numa is not None else '-'}" for x in links])
        future.set_result(result)

    def wait(self, pod: api.PodSandbox) -> SandboxNics | None:
        """The sandbox's NICs, waiting at most ``wait_seconds`` for a lookup still running."""
        future = self.start(pod)
        try:
            return future.result(timeout=self.wait_seconds)
        except TimeoutError:
            self.note_late(pod)
            return None

    def note_late(self, pod: api.PodSandbox) -> None:
        """A create waited ``wait_seconds`` for this pod's lookup: it goes on without NIC hints."""
        self.late += 1
        if self.on_late is not None:
            self.on_late()
        log.warning("NIC lookup not finished in time; container admitted without NIC hints",
                    pod=pod_key(pod), wait_seconds=self.wait_seconds)

    def numa_nodes(self, key: str) -> tuple[int, ...] | None:
        """The pod's NIC NUMA nodes if its lookup is done (the provider's source; never blocks)."""
        future = self._pending.get(self._by_pod.get(key, ""))
        if future is None or not future.done():
            return None
        return future.result().numa_nodes

    def forget(self, sandbox_id: str) -> None:
        self._pending.pop(sandbox_id, None)
        for key in [k for k, s in self._by_pod.items() if s == sandbox_id]:
            del self._by_pod[key]

    def snapshot(self) -> list[dict[str, Any]]:
        """Finished lookups for ``status`` (pending ones are listed as such)."""
        items = sorted(dict(self._pending).items())  # a copy: the node thread may add one meanwhile
        out = []
        for sandbox, future in items:
            out.append(future.result().to_json() if future.done() else {"sandbox_id": sandbox, "pending": True})
        return out
