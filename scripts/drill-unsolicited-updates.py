#!/usr/bin/env python3
"""Deadlock drill: re-apply a container's cpuset as fast as a repair path allows while pods churn.

A private containerd (tests/e2e/harness.py; needs root and scripts/install-runtimes.sh) runs one
long-lived Burstable "victim" container. Three worker threads loop RunPodSandbox -> CreateContainer ->
StartContainer -> StopContainer -> RemoveContainer -> StopPodSandbox -> RemovePodSandbox through CRI
(one Burstable pod per cycle) while the victim's cpuset is re-applied:

* ``--mode unsolicited``: a small plugin on the project's NRI stub (in this process, on its own
  asyncio thread; nri-pinner is not connected) sends NRI UpdateContainers for the victim every 40 ms.
  On runtimes whose NRI is older than v0.12.1 this can deadlock containerd.
* ``--mode cri``: the way nri-pinner repairs: CRI UpdateContainerResources with only ``cpuset_cpus``,
  back to back, with the real `nri-pinner run` connected so each update also passes through NRI
  (nri-pinner's UpdateContainer handler). The cpuset written is the one nri-pinner wants for the victim.

A CRI call (worker or repair) with no answer within 20 s counts as a hang. The script then prints
``hung after N s (M pod cycles)``, checks whether CRI Version still answers, and stops the private
containerd so the machine is usable again; otherwise ``no hang in N s (M pod cycles, K repairs, E errors)``.
Exit status: 0 no hang, 3 hang.

    .venv/bin/python scripts/drill-unsolicited-updates.py [--runtime 1.7|2.1] [--seconds 120]
        [--mode unsolicited|cri]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the e2e harness lives in tests/e2e

from nri_pinner.nri.gen import api_pb2 as api  # noqa: E402
from nri_pinner.nri.stub import Stub  # noqa: E402
from tests.e2e.conftest import e2e_base_dir  # noqa: E402
from tests.e2e.cri_client import CriClient  # noqa: E402
from tests.e2e.harness import PrivateContainerd, claim_workdir  # noqa: E402
from tests.e2e.pin_plugin import online_cpus  # noqa: E402
from tests.e2e.pinner import Pinner, start_pinner  # noqa: E402
from tests.e2e.pods import remove_pod, run_pod  # noqa: E402

HANG_SECONDS = 20.0
UPDATE_INTERVAL = 0.040  # unsolicited mode: ~25 UpdateContainers per second
WORKERS = 3
PLUGIN_NAME, PLUGIN_IDX = "drill-updater", "50"


class CallHung(Exception):
    def __init__(self, method: str, started: float) -> None:
        super().__init__(f"CRI {method} had no answer in {HANG_SECONDS:.0f} s")
        self.method, self.started = method, started


class WatchedCri(CriClient):
    """CRI client whose calls time out after HANG_SECONDS and then raise CallHung."""

    def __init__(self, socket: Path) -> None:
        super().__init__(socket, timeout=HANG_SECONDS)

    def _call(self, method: str, request: Any) -> Any:
        started = time.monotonic()
        try:
            return super()._call(method, request)
        except grpc.RpcError as err:
            if err.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                raise CallHung(method, started) from err
            raise


class Drill:
    def __init__(self, runtime: PrivateContainerd, seconds: float) -> None:
        self.runtime, self.seconds = runtime, seconds
        self.cri = WatchedCri(runtime.paths.grpc_socket)
        self.done = threading.Event()
        self.lock = threading.Lock()
        self.began = 0.0
        self.cycles = self.repairs = self.errors = self.update_timeouts = 0
        self.hang: CallHung | None = None
        self.cycles_at_hang = 0
        self.first_errors: list[str] = []

    def elapsed(self, at: float | None = None) -> float:
        return (time.monotonic() if at is None else at) - self.began

    def count(self, what: str, message: str = "") -> None:
        with self.lock:
            setattr(self, what, getattr(self, what) + 1)
            if message and len(self.first_errors) < 5:
                self.first_errors.append(f"{self.elapsed():.1f}s {message}")

    def hung(self, hang: CallHung) -> None:
        with self.lock:
            if self.hang is None or hang.started < self.hang.started:
                self.hang, self.cycles_at_hang = hang, self.cycles
        self.done.set()

    def guarded(self, body: Callable[[], None]) -> Callable[[], None]:
        """Loop ``body`` until done; a hang ends the drill, other errors are counted."""
        def loop() -> None:
            while not self.done.is_set():
                try:
                    body()
                except CallHung as hang:
                    self.hung(hang)
                except Exception as exc:
                    self.count("errors", repr(exc)[:300])
        return loop

    def churn_once(self) -> None:
        pod = run_pod(self.cri, self.runtime.pods_dir, self.runtime.record_pod_cgroup, "burstable", 100, 200)
        remove_pod(self.cri, pod, stop_timeout_s=2)
        self.count("cycles")

    def run(self, repair: Callable[[], None] | None) -> None:
        self.began = time.monotonic()
        bodies = [self.churn_once] * WORKERS + ([repair] if repair is not None else [])
        threads = [threading.Thread(target=self.guarded(b), daemon=True) for b in bodies]
        for t in threads:
            t.start()
        next_report = 10.0
        while not self.done.wait(0.5):
            if self.elapsed() >= self.seconds:
                self.done.set()
            elif self.elapsed() >= next_report:
                print(f"  t={self.elapsed():5.1f}s cycles={self.cycles} repairs={self.repairs} errors={self.errors}"
                      f" update_timeouts={self.update_timeouts}", flush=True)
                next_report += 10.0
        for t in threads:  # a thread in a hung call returns when its 20 s deadline passes
            t.join(HANG_SECONDS + 5)


class UnsolicitedUpdater:
    """NRI plugin on the project's stub: no-op event handlers (so it is in every event's path) and a
    loop sending UpdateContainers for one container every UPDATE_INTERVAL."""

    def __init__(self, drill: Drill, container_id: str, cpus: str) -> None:
        self.drill = drill
        self.update = api.ContainerUpdate(container_id=container_id)
        self.update.linux.resources.cpu.cpus = cpus
        self.stub = Stub(self, name=PLUGIN_NAME, idx=PLUGIN_IDX, socket_path=str(drill.runtime.nri_socket))
        self.loop: asyncio.AbstractEventLoop | None = None
        self.thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)

    def create_container(self, req: api.CreateContainerRequest) -> None:
        return None

    def start_container(self, event: api.StateChangeEvent) -> None:
        return None

    def stop_container(self, req: api.StopContainerRequest) -> None:
        return None

    def remove_container(self, event: api.StateChangeEvent) -> None:
        return None

    async def _main(self) -> None:
        self.loop = asyncio.get_running_loop()
        repairs = asyncio.create_task(self._repair_loop())
        try:
            await self.stub.run()
        finally:
            repairs.cancel()

    async def _repair_loop(self) -> None:
        """Like a Go ``for { UpdateContainers(...); time.Sleep(40ms) }`` loop: one update in flight."""
        while not self.stub.synchronized:
            await asyncio.sleep(0.01)
        while True:
            try:
                failed = await self.stub.update_containers([self.update])
            except TimeoutError:  # the stub's request timeout (2 s): the runtime did not answer
                self.drill.count("update_timeouts")
            except Exception as exc:
                self.drill.count("errors", f"UpdateContainers: {exc!r}"[:300])
            else:
                if failed:
                    self.drill.count("errors", f"UpdateContainers failed: {failed}")
                else:
                    self.drill.count("repairs")
            await asyncio.sleep(UPDATE_INTERVAL)

    def start(self) -> None:
        since = self.drill.runtime.log_offset()
        self.thread.start()
        self.drill.runtime.wait_plugin_active(f"{PLUGIN_IDX}-{PLUGIN_NAME}", since)

    def stop(self) -> None:
        if self.loop is not None and self.thread.is_alive():
            asyncio.run_coroutine_threadsafe(self.stub.stop(), self.loop)
            self.thread.join(10)


def goroutine_dump(runtime: PrivateContainerd, out: Path) -> str:
    """SIGUSR1 makes containerd log all goroutine stacks; save them to ``out`` and return a summary
    of the goroutines blocked on a mutex inside NRI code (the two sides of a lock inversion)."""
    since = runtime.log_offset()
    os.kill(int((runtime.run_dir / "containerd.pid").read_text()), signal.SIGUSR1)
    try:
        runtime.wait_for_log("goroutine stack dump", since, timeout=5)
        time.sleep(0.5)  # the dump is written in one go; let it finish
    except Exception as exc:
        return f"no goroutine dump: {exc}"
    text = runtime.log_text(since).replace("\\n", "\n").replace("\\t", "\t")
    out.write_text(text)
    blocked: Counter[str] = Counter()
    for stack in re.split(r"\n(?=goroutine \d+ \[)", text):
        if "sync.(*Mutex).Lock" not in stack or "nri" not in stack:
            continue
        calls = [re.sub(r"\([^()]*\)$", "", ln.strip()).split("/")[-1]  # drop the argument list
                 for ln in stack.splitlines() if "/nri" in ln and not ln.startswith("\t")]
        blocked[" <- ".join(calls[:3])] += 1
    lines = "".join(f"\n    {n} x {path}" for path, n in blocked.most_common())
    return f"goroutine dump in {out}; goroutines blocked on a mutex in NRI code:{lines}"


def drill(key: str, seconds: float, mode: str) -> int:
    workdir, lock = claim_workdir(e2e_base_dir() / f"drill-{key}")
    runtime = PrivateContainerd(key, workdir)
    pinner: Pinner | None = None
    updater: UnsolicitedUpdater | None = None
    run = Drill(runtime, seconds)
    try:
        runtime.start()
        victim = runtime.run_pod("burstable", 250, 500, name="drill-victim").container_ids[0]
        repair: Callable[[], None] | None = None
        if mode == "unsolicited":
            cpus = ",".join(map(str, online_cpus()))
            updater = UnsolicitedUpdater(run, victim, cpus)
            updater.start()
            how = (f"{PLUGIN_IDX}-{PLUGIN_NAME} (project stub) sends UpdateContainers cpus={cpus} every "
                   f"{UPDATE_INTERVAL * 1000:.0f} ms; runtime NRI {updater.stub.status()['runtime_nri_version']}, "
                   f"safe_unsolicited_updates={updater.stub.supports_safe_unsolicited_updates}")
        else:
            (workdir / "pinner").mkdir(exist_ok=True)
            pinner = start_pinner(runtime, workdir / "pinner")  # reserved CPU 0, drift check every 1 s
            cpus = str(pinner.assignment(victim)["cpus"])

            def repair() -> None:
                run.cri.update_container_resources(victim, cpuset_cpus=cpus)
                run.count("repairs")

            how = f"CRI UpdateContainerResources(cpuset_cpus={cpus!r}) back to back, nri-pinner connected"
        print(f"containerd {runtime.version} ({key}), mode {mode}: {how}; {WORKERS} churn workers, "
              f"hang = no CRI answer in {HANG_SECONDS:.0f} s, up to {seconds:.0f} s", flush=True)
        run.run(repair)
        if run.hang is not None:
            hang = run.hang
            print(f"hung after {run.elapsed(hang.started):.0f} s ({run.cycles_at_hang} pod cycles): "
                  f"{hang.method} issued at {run.elapsed(hang.started):.1f} s never answered; "
                  f"{run.repairs} repairs, {run.errors} errors, {run.update_timeouts} update timeouts before the stop")
            print("  " + goroutine_dump(runtime, workdir / f"goroutines-{mode}.txt"))
            try:
                version = CriClient(runtime.paths.grpc_socket, timeout=5).version().runtime_version
                print(f"  CRI Version still answers ({version}) while lifecycle calls hang")
            except grpc.RpcError as err:
                print(f"  CRI Version does not answer either: {err.code()}")
        else:
            print(f"no hang in {run.elapsed():.0f} s ({run.cycles} pod cycles, {run.repairs} repairs, "
                  f"{run.errors} errors)")
            if mode == "cri" and pinner is not None:
                print(f"  victim cpuset now {runtime.cgroup_cpuset(victim)}, nri-pinner wants "
                      f"{pinner.assignment(victim)['cpus']}")
        for line in run.first_errors:
            print(f"  error: {line}")
        return 3 if run.hang is not None else 0
    finally:
        run.done.set()
        if updater is not None:
            updater.stop()
        if pinner is not None:
            pinner.stop()
        if run.hang is not None:
            runtime.cri.timeout = 5.0  # a deadlocked containerd: don't wait 60 s per cleanup call
        runtime.stop()
        run.cri.close()
        lock.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runtime", choices=["1.7", "2.1"], default="1.7")
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--mode", choices=["unsolicited", "cri"], default="unsolicited")
    args = parser.parse_args()
    if args.seconds <= 0:
        parser.error("--seconds must be > 0")
    return drill(args.runtime, args.seconds, args.mode)


if __name__ == "__main__":
    sys.exit(main())
