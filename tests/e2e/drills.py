"""Fault drills against a real containerd and the real `nri-pinner run` (issue 20).

Used by tests/e2e/test_drills.py (a short CI profile) and scripts/drill-faults (the long profile).
Every drill ends with the truth check: what the kernel says (cgroup ``cpuset.cpus`` and each main
process's ``Cpus_allowed_list``) against what ``nri-pinner status`` says, for every running container:
nothing lost, no CPU given exclusively to two containers, no shared container on an exclusive CPU.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nri_pinner.edge.checkpoint import file as checkpoint_file
from nri_pinner.edge.observe.status_server import query
from nri_pinner.engine.cpuset import CPUSet

from .harness import PodHandle, PrivateContainerd
from .pinner import Pinner, start_pinner, wait_for

FAST = {"nri": {"reconnect_max_seconds": 0.5}}  # re-dial quickly after a containerd restart


@dataclass
class Figures:
    runtime: str
    kills: int = 0
    restarts: int = 0
    ops: int = 0
    truth_checks: int = 0
    created_while_down: int = 0
    resync_s: list[float] = field(default_factory=list)  # plugin start -> synchronized
    containerd_resync_s: list[float] = field(default_factory=list)  # containerd restart -> re-registered, synced
    repair_s: list[float] = field(default_factory=list)  # restart -> truth holds (down-created repaired)
    hostile: list[str] = field(default_factory=list)
    bad_annotations: int = 0
    flood_calls: int = 0
    flood_max_s: float = 0.0
    flood_creates: int = 0
    exclusive_seen: int = 0  # truth checks that saw a container on an exclusive CPU (the check is not vacuous)

    def lines(self) -> list[str]:
        def worst(xs: list[float]) -> str:
            return f"max {max(xs):.2f}s, mean {sum(xs) / len(xs):.2f}s" if xs else "-"
        return [
            f"e2e: drills containerd {self.runtime}: {self.kills} kill -9 of the plugin during {self.ops} lifecycle "
            f"ops, {self.created_while_down} containers created while it was down, {self.truth_checks} truth checks "
            f"passed ({self.exclusive_seen} with an exclusive container): nothing lost, nothing doubled",
            f"e2e: drills containerd {self.runtime}: plugin start to synchronized ({len(self.resync_s)} starts) "
            f"{worst(self.resync_s)}; {self.restarts} containerd restarts to re-registered and synchronized "
            f"{worst(self.containerd_resync_s)}; truth restored {worst(self.repair_s)}",
            f"e2e: drills containerd {self.runtime}: hostile checkpoints survived: {', '.join(self.hostile) or '-'}; "
            f"{self.bad_annotations} bad-annotation pods (plugin up and down) never failed Synchronize",
            f"e2e: drills containerd {self.runtime}: inspection flood of {self.flood_calls} status calls (100 "
            f"concurrent) during {self.flood_creates} lifecycle ops: slowest status {self.flood_max_s:.2f}s, "
            "0 late NRI replies",
        ]


class Drill:
    def __init__(self, runtime: PrivateContainerd, workdir: Path, figures: Figures, seed: int = 20) -> None:
        self.rt, self.workdir, self.fig = runtime, workdir, figures
        self.rng = random.Random(seed)
        self.pinner: Pinner | None = None
        self.pods: list[PodHandle] = []
        self.sections: dict[str, dict[str, Any]] = {k: dict(v) for k, v in FAST.items()}

    # -- the plugin ---------------------------------------------------------------------------------
    def start(self) -> float:
        """Start the plugin on the same state; seconds until it is synchronized."""
        started = time.monotonic()
        self.pinner = start_pinner(self.rt, self.workdir, test_settings=True, timeout=30.0, **self.sections)
        assert wait_for(self.synchronized, timeout=20, interval=0.02), self.log_tail()
        took = time.monotonic() - started
        self.fig.resync_s.append(took)
        return took

    def kill(self) -> None:
        assert self.pinner is not None
        proc = self.pinner.process.proc
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        self.pinner.stop()
        self.pinner = None

    def status(self) -> dict[str, Any]:
        assert self.pinner is not None
        doc: dict[str, Any] = query(str(self.pinner.inspect_socket))
        return doc

    def synchronized(self) -> bool:
        try:
            return bool(self.status()["health"].get("synchronized"))
        except Exception:
            return False

    def registered_again(self, before: int) -> bool:
        try:
            health = self.status()["health"]
        except Exception:
            return False
        return bool(health["stats"]["registrations"] > before and health.get("synchronized"))

    def log_tail(self) -> str:
        return self.pinner.process.log_text()[-3000:] if self.pinner else ""

    # -- pods ---------------------------------------------------------------------------------------
    def run_pod(self, kind: str, **kwargs: Any) -> PodHandle | None:
        """A pod; None when the create failed (the plugin may die during it)."""
        self.fig.ops += 1
        try:
            if kind == "guaranteed":
                pod = self.rt.run_pod("guaranteed", 1000, 1000, **kwargs)
            else:
                pod = self.rt.run_pod("burstable", 100, 250, **kwargs)
        except Exception:
            return None
        self.pods.append(pod)
        return pod

    def remove_pod(self, pod: PodHandle) -> None:
        self.fig.ops += 1
        self.pods.remove(pod)
        self.rt.remove_pod(pod, stop_timeout_s=2)

    def lifecycle_op(self) -> None:
        """Churn: a new pod (Guaranteed only when CPU 1 could be free) or the oldest pod removed."""
        if len(self.pods) >= 3 or (self.pods and self.rng.random() < 0.3):
            self.remove_pod(self.pods[0])
        else:
            self.run_pod(self.rng.choice(["guaranteed", "burstable"]))

    # -- the truth ----------------------------------------------------------------------------------
    def truth(self) -> list[str]:
        """What is wrong now (empty when the kernel and the plugin agree and nothing is shared wrongly)."""
        problems: list[str] = []
        rows = {a["container_id"]: a for a in self.status()["assignments"]}
        exclusive: dict[int, str] = {}
        shared: list[tuple[str, CPUSet]] = []
        for c in self.rt.cri.list_containers():
            if c.state != "RUNNING":
                continue
            row = rows.get(c.id)
            if row is None:
                problems.append(f"{c.name} {c.id[:12]}: running but not in status (lost)")
                continue
            want = CPUSet.parse(row["cpus"])
            try:
                cg = CPUSet.parse(self.rt.cgroup_cpuset(c.id))
                allowed = CPUSet.parse(self.rt.cpus_allowed_list(c.id))
            except (OSError, ValueError, RuntimeError) as exc:  # exited meanwhile
                problems.append(f"{c.id[:12]}: unreadable ({exc})")
                continue
            if cg != want or allowed != want:
                problems.append(f"{c.id[:12]}: status {want}, cgroup {cg}, Cpus_allowed_list {allowed}")
            if row["exclusive"]:
                for cpu in want:
                    if cpu in exclusive:
                        problems.append(f"CPU {cpu} exclusive to {exclusive[cpu]} and {c.id[:12]} (doubled)")
                    exclusive[cpu] = c.id[:12]
            else:
                shared.append((c.id, want))
        for cid, cpus in shared:
            if any(cpu in exclusive for cpu in cpus):
                problems.append(f"{cid[:12]}: shared container on exclusive CPUs {cpus}")
        return problems

    def check_truth(self, timeout: float = 20.0) -> float:
        """Wait until the truth holds (the reconcile timer repairs what was created while down)."""
        started = time.monotonic()
        last: list[str] = []

        def ok() -> bool:
            nonlocal last
            try:
                last = self.truth()
            except Exception as exc:
                last = [repr(exc)]
            return not last

        assert wait_for(ok, timeout=timeout, interval=0.2), f"truth check failed: {last}\n{self.log_tail()}"
        self.fig.truth_checks += 1
        if any(a["exclusive"] for a in self.status()["assignments"]):
            self.fig.exclusive_seen += 1
        return time.monotonic() - started

    # -- drills -------------------------------------------------------------------------------------
    def kills(self, n: int) -> None:
        """kill -9 at a random point of a lifecycle op; a pod created while down; restart; truth."""
        for _ in range(n):
            self.lifecycle_op()
            killer = threading.Timer(self.rng.uniform(0.0, 0.4), self.kill)
            killer.start()
            self.lifecycle_op()  # the kill lands somewhere in (or after) this op
            killer.join()
            self.fig.kills += 1
            if self.run_pod(self.rng.choice(["guaranteed", "burstable"])) is not None:
                self.fig.created_while_down += 1
            started = time.monotonic()
            self.start()
            self.check_truth()
            self.fig.repair_s.append(time.monotonic() - started)

    def containerd_restarts(self, n: int) -> None:
        for _ in range(n):
            self.lifecycle_op()
            before = self.status()["health"]["stats"]["registrations"]
            started = time.monotonic()
            self.rt.restart()
            assert wait_for(lambda b=before: self.registered_again(b), timeout=30, interval=0.02), self.log_tail()
            self.fig.containerd_resync_s.append(time.monotonic() - started)
            self.fig.restarts += 1
            self.check_truth()
            self.fig.repair_s.append(time.monotonic() - started)
            self.lifecycle_op()  # events still arrive after the re-registration
            self.check_truth()

    def hostile_checkpoints(self, state_dir: Path) -> None:
        """Each hostile checkpoint once: the plugin is killed, the file is spoilt, the plugin restarts."""
        cp = state_dir / "checkpoint.json"
        self.sections["state"] = {"checkpoint": str(cp)}
        if self.pinner is not None:
            self.kill()
        self.start()
        for name, spoil in HOSTILE.items():
            self.lifecycle_op()
            # the file a spoiler reads is written behind the replies (LINGER_SECONDS, then fsync): a kill
            # right after a quick op (a pod removed) can come first on a busy disk
            assert wait_for(cp.exists, timeout=10.0, interval=0.02), f"{name}: no checkpoint written"
            self.kill()
            with spoil(cp, state_dir):
                self.start()
                self.check_truth()
                self.lifecycle_op()  # decisions still work with a checkpoint that cannot be written
                self.check_truth()
                # A write in flight has its temp file for a moment (written behind the replies, 100 ms
                # after the change, then fsync): a leftover is one still there once the writer is done.
                def temps() -> list[str]:
                    return [p.name for p in state_dir.glob(".*.tmp")]
                assert wait_for(lambda: not temps(), timeout=3.0), f"{name}: temp files left behind: {temps()}"
            self.fig.hostile.append(name)

    def bad_annotations(self) -> None:
        """Pods whose nri-pinner annotations cannot be read, created while the plugin is up and down."""
        for key, value in BAD_ANNOTATIONS:
            try:
                self.rt.run_pod("guaranteed", 1000, 1000, annotations={key: value}, name=f"bad-up-{len(self.pods)}")
                raise AssertionError(f"create with {key}={value!r} succeeded")
            except AssertionError:
                raise
            except Exception as exc:
                assert "nri-pinner:" in str(exc) and key in str(exc), str(exc)
            self.fig.bad_annotations += 1
        self.kill()
        down = []
        for key, value in BAD_ANNOTATIONS:
            pod = self.run_pod("guaranteed", annotations={key: value})
            assert pod is not None
            down.append(pod)
            self.fig.bad_annotations += 1
        self.start()  # Synchronize sees them: it must not fail
        self.check_truth()
        rows = {a["container_id"]: a for a in self.status()["assignments"]}
        for pod in down:
            assert not rows[pod.container_ids[0]]["exclusive"]
        good = self.run_pod("burstable")  # events keep flowing (1.7 once went silent here)
        assert good is not None and good.container_ids[0] in {a["container_id"] for a in self.status()["assignments"]}
        for pod in down:
            self.remove_pod(pod)
        self.check_truth()

    def inspection_flood(self, calls: int, creates: int, workers: int = 100) -> None:
        """`workers` threads call Status back to back while pods are created and removed, until both
        the lifecycle ops and at least `calls` status calls are done; no NRI reply may come late."""
        assert self.pinner is not None
        socket = str(self.pinner.inspect_socket)
        durations: list[float] = []
        ops_done = threading.Event()

        def worker() -> None:
            while not ops_done.is_set() or len(durations) < calls:
                started = time.monotonic()
                query(socket, timeout=30)
                durations.append(time.monotonic() - started)

        with ThreadPoolExecutor(max_workers=workers) as pool:
            running = [pool.submit(worker) for _ in range(workers)]
            for _ in range(creates):
                self.lifecycle_op()
            ops_done.set()
            for r in running:
                r.result()
        stats = self.status()["health"]["stats"]
        assert stats["fallbacks"] == 0 and stats["late_replies"] == 0, stats
        self.fig.flood_calls += len(durations)
        self.fig.flood_creates += creates
        self.fig.flood_max_s = max(durations)
        self.check_truth()

    def cleanup(self) -> None:
        for pod in list(self.pods):
            with contextlib.suppress(Exception):
                self.remove_pod(pod)
        if self.pinner is not None:
            self.pinner.stop()
            self.pinner = None


# the values of issue 20's defect 1, each once
BAD_ANNOTATIONS = [("nri-pinner.io/cpu.c0", "abc"), ("nri-pinner.io/cpu.c0", "inf"), ("nri-pinner.io/cpu.c0", "-1"),
                   ("nri-pinner.io/exclusive-cpus.c0", "0"), ("nri-pinner.io/exclusive-cpus.c0", "\u00b2")]


# -- hostile checkpoints: each spoils the file (or its directory) for one plugin start ---------------------
Spoil = Callable[[Path, Path], contextlib.AbstractContextManager[None]]


def _rewrite(cp: Path, change: Callable[[dict[str, Any]], None]) -> None:
    loaded = checkpoint_file.read(cp)
    body = loaded.body or {"policy": "static", "entries": []}
    change(body)
    checkpoint_file.write(cp, body)  # a valid checksum over a hostile body


@contextlib.contextmanager
def truncated(cp: Path, _d: Path) -> Iterator[None]:
    data = cp.read_bytes()
    cp.write_bytes(data[: len(data) // 2])
    yield


@contextlib.contextmanager
def random_bytes(cp: Path, _d: Path) -> Iterator[None]:
    cp.write_bytes(random.Random(7).randbytes(4096))
    yield


@contextlib.contextmanager
def wrong_checksum(cp: Path, _d: Path) -> Iterator[None]:
    doc = json.loads(cp.read_bytes())
    doc["body"]["shared"] = "0-63"
    cp.write_text(json.dumps(doc))
    yield


@contextlib.contextmanager
def other_node(cp: Path, _d: Path) -> Iterator[None]:
    def change(body: dict[str, Any]) -> None:
        body["reserved"] = "0-3"
        for e in body.get("entries", []):
            e["admitted"] = e["current"] = "40-47"
    _rewrite(cp, change)
    yield


@contextlib.contextmanager
def hostile_values(cp: Path, _d: Path) -> Iterator[None]:
    def change(body: dict[str, Any]) -> None:
        for i, e in enumerate(body.get("entries", [])):
            e["current"] = ["\u00b2", "0-999999999", "99999999999"][i % 3]
            e["numa_affinity"] = "inf"
    _rewrite(cp, change)
    yield


@contextlib.contextmanager
def dangling_symlink(cp: Path, d: Path) -> Iterator[None]:
    cp.unlink(missing_ok=True)
    cp.symlink_to(d / "nowhere" / "checkpoint.json")
    yield


@contextlib.contextmanager
def symlink_to_device(cp: Path, _d: Path) -> Iterator[None]:
    cp.unlink(missing_ok=True)
    cp.symlink_to("/dev/zero")  # read whole, it would never end
    yield


@contextlib.contextmanager
def _tmpfs(d: Path, options: str) -> Iterator[None]:
    """A small tmpfs over the state directory; the existing checkpoint is copied onto it."""
    data = d.joinpath("checkpoint.json").read_bytes() if d.joinpath("checkpoint.json").is_file() else b""
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,mode=0700", "tmpfs", str(d)], check=True)
    try:
        if data:
            d.joinpath("checkpoint.json").write_bytes(data)
        if "ro" in options:
            subprocess.run(["mount", "-o", "remount,ro", str(d)], check=True)
        else:  # disk full: a filler takes every free block
            with contextlib.suppress(OSError), d.joinpath("filler").open("wb") as f:
                while True:
                    f.write(b"\0" * 4096)
                    f.flush()
        yield
    finally:
        subprocess.run(["umount", "-l", str(d)], check=False)


@contextlib.contextmanager
def read_only_dir(_cp: Path, d: Path) -> Iterator[None]:
    with _tmpfs(d, "ro"):
        yield


@contextlib.contextmanager
def disk_full(_cp: Path, d: Path) -> Iterator[None]:
    with _tmpfs(d, "full"):
        yield


HOSTILE: dict[str, Spoil] = {
    "truncated": truncated, "random-bytes": random_bytes, "wrong-checksum": wrong_checksum,
    "other-node-shape": other_node, "hostile-values": hostile_values, "dangling-symlink": dangling_symlink,
    "symlink-to-dev-zero": symlink_to_device,
    "read-only-dir": read_only_dir, "disk-full": disk_full,
}


def run_profile(runtime: PrivateContainerd, workdir: Path, *, kills: int, restarts: int, flood: int,
                seed: int = 20) -> Figures:
    """Every drill once in this order; returns the figures (raises on the first broken guarantee)."""
    fig = Figures(runtime.version)
    drill = Drill(runtime, workdir, fig, seed)
    state_dir = workdir / "state"
    state_dir.mkdir(exist_ok=True)
    try:
        drill.start()
        drill.check_truth()
        drill.kills(kills)
        drill.containerd_restarts(restarts)
        drill.bad_annotations()
        drill.inspection_flood(flood, creates=6)
        drill.hostile_checkpoints(state_dir)
    finally:
        drill.cleanup()
        if os.path.ismount(state_dir):
            subprocess.run(["umount", "-l", str(state_dir)], check=False)
    return fig
