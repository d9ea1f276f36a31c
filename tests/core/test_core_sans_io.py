"""The core does no I/O, takes no lock and starts no thread (issue 34, core/node.py): checked from its
source (what it imports and calls) and by running a whole container's life through it in a fresh
interpreter where sockets, thread starts, sleeps and opening a file for writing all raise."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CORE = REPO / "nri_pinner" / "core"
PACKAGE = "nri_pinner.core"

# nothing the core or anything it imports may import: sockets, threads, processes, event loops, RPC
NEVER = {"socket", "threading", "_thread", "subprocess", "multiprocessing", "asyncio", "selectors", "concurrent",
         "grpc", "pyroute2", "jeepney", "queue", "sched"}
# and the core itself touches no file, device or process state either (structlog logging is allowed)
NOT_IN_CORE = NEVER | {"os", "io", "pathlib", "shutil", "tempfile", "signal", "fcntl", "mmap", "ctypes", "tomllib",
                       "prometheus_client", "urllib", "http"}
# the rooms of nri_pinner the core may reach at run time (the edge and the CLI not even for types:
# tests/layout/test_layout.py)
ALLOWED_OWN = ("nri_pinner.engine", "nri_pinner.config", "nri_pinner.nri.handlers", "nri_pinner.nri.gen",
               "nri_pinner.core")


def module_path(name: str) -> Path | None:
    base = REPO.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def module_name(path: Path) -> str:
    rel = path.relative_to(REPO).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def _type_checking_only(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")


def imports(path: Path) -> set[str]:
    """Modules ``path`` imports when it runs (``if TYPE_CHECKING:`` blocks left out), relative ones
    resolved."""
    tree = ast.parse(path.read_text(), str(path))
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if _type_checking_only(node):
                assert isinstance(node, ast.If)
                visit(node.orelse)
                continue
            for sub in ast.walk(node):
                if isinstance(sub, ast.Import):
                    found.update(a.name for a in sub.names)
                elif isinstance(sub, ast.ImportFrom):
                    if sub.level:
                        base = package.split(".")
                        base = base[:len(base) - sub.level + 1]
                        target = ".".join(base + ([sub.module] if sub.module else []))
                    else:
                        target = sub.module or ""
                    found.add(target)
                    for a in sub.names:  # `from . import lifecycle`: a submodule
                        if module_path(f"{target}.{a.name}") is not None:
                            found.add(f"{target}.{a.name}")

    visit(tree.body)
    return found


def core_modules() -> list[Path]:
    found = sorted(CORE.glob("*.py"))
    assert {p.stem for p in found} >= {"node", "events", "effects", "state", "lifecycle", "resizing", "connection",
                                       "repairs", "passes"}
    return found


def test_core_modules_import_nothing_that_does_io() -> None:
    for path in core_modules():
        for name in imports(path):
            top = name.split(".")[0]
            assert top not in NOT_IN_CORE, f"{path.name} imports {name}"
            if top == "nri_pinner":
                assert name.startswith(ALLOWED_OWN), f"{path.name} imports {name} (the edge's)"


def test_core_calls_no_open_sleep_or_lock() -> None:
    for path in core_modules():
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                called = ast.unparse(node.func)
                assert called not in ("open", "input", "print", "exec", "eval", "__import__"), \
                    f"{path.name}:{node.lineno} calls {called}"
                assert not called.endswith((".sleep", ".acquire", ".wait", ".read_text", ".write_text", ".open")), \
                    f"{path.name}:{node.lineno} calls {called}"


def test_nothing_the_core_imports_does_io() -> None:
    """The closure of nri_pinner modules the core imports at run time: none imports sockets or threads."""
    seen: set[str] = set()
    todo = [module_name(p) for p in core_modules()]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        path = module_path(name)
        if path is None:
            continue
        for imported in imports(path):
            top = imported.split(".")[0]
            assert top not in NEVER, f"{name} (reached from the core) imports {imported}"
            if top == "nri_pinner":
                assert imported.startswith(ALLOWED_OWN), f"{name} (reached from the core) imports {imported}"
                todo.append(imported)
                parent = imported.rpartition(".")[0]
                while parent:  # a package's __init__ runs too
                    todo.append(parent)
                    parent = parent.rpartition(".")[0]
    assert f"{PACKAGE}.node" in seen and "nri_pinner.engine.admission_engine" in seen


SCRIPT = r'''
import builtins, io, os, socket, sys, threading, time
from nri_pinner.config import from_mapping
from nri_pinner.engine.admission_engine import Engine
from nri_pinner.engine.topology.sysfs import discover
from nri_pinner.nri.gen import api_pb2 as api
import structlog  # the edge sets up logging before any core runs (structlog imports asyncio, ssl)

# the edge's part, before the guard: settings, sysfs, the engine, logging
settings = from_mapping({
    "sysfs_root": SYSFS, "cpu_manager": {"reserved_cpus": "0"}, "nri": {"socket": "/nonexistent/nri.sock"},
    "state": {"checkpoint": "/nonexistent/cp.json"}, "inspect": {"socket": "/nonexistent/i.sock"},
    "reconcile": {"period_seconds": 0, "cri_socket": "", "cgroup_root": "/nonexistent/cgroup"}}, "<core test>")
engine = Engine.from_settings(settings, discover(settings.sysfs_root), [], memory=None)
assert not any(m.startswith("nri_pinner.core") for m in sys.modules), "core imported before the guard"

def refuse(what):
    def refused(*args, **kwargs):
        raise AssertionError(f"the core did I/O: {what}")
    return refused

real_open, real_os_open = builtins.open, os.open
def guarded_open(file, mode="r", *args, **kwargs):
    if any(c in mode for c in "wax+"):
        raise AssertionError(f"the core did I/O: open({file!r}, {mode!r})")
    return real_open(file, mode, *args, **kwargs)
def guarded_os_open(path, flags, *args, **kwargs):
    if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
        raise AssertionError(f"the core did I/O: os.open({path!r})")
    return real_os_open(path, flags, *args, **kwargs)
builtins.open = io.open = guarded_open
os.open = guarded_os_open
socket.socket = refuse("socket")
socket.create_connection = refuse("socket")
threading.Thread.start = refuse("a thread")
time.sleep = refuse("sleep")
for name in ("system", "popen", "fork", "write"):
    setattr(os, name, refuse(f"os.{name}"))

from nri_pinner.core import events as ev
from nri_pinner.core.effects import ArmTimer, Park, WriteCgroups
from nri_pinner.core.node import NodeCore

core = NodeCore(settings, engine, prior=None, cgroup_writes=True)
timers, flight = set(), []

def handle(event):
    out = core.handle(event)
    for e in out.effects:
        if isinstance(e, ArmTimer):
            timers.add(e.name)
        elif isinstance(e, WriteCgroups):
            flight.append(e)
    return out

def settle():
    while flight or any(not t.startswith("wait:") for t in timers):
        if flight:
            p = flight.pop()
            handle(ev.CgroupsWritten(p.pass_id, [ev.WriteResult(i.container_id, i.cpus, i.mems) for i in p.items]))
        else:
            name = min(t for t in timers if not t.startswith("wait:"))
            timers.discard(name)
            handle(ev.TimerFired(name))

def pod(name, parent):
    p = api.PodSandbox(id="sb-" + name, name=name, uid="uid-" + name, namespace="default")
    p.linux.cgroup_parent = parent
    return p

def container(p, milli):
    c = api.Container(id=p.name + "-app", pod_sandbox_id=p.id, name="app", state=api.CONTAINER_RUNNING)
    c.linux.resources.cpu.shares.value = max(2, milli * 1024 // 1000)
    c.linux.resources.cpu.quota.value, c.linux.resources.cpu.period.value = milli * 100, 100000
    c.linux.cgroups_path = p.linux.cgroup_parent + "/" + c.id
    return c

handle(ev.Configured(2000))
handle(ev.Synchronize([], []))
bpod, gpod = pod("b", "/kubepods/burstable/poduid-b"), pod("g", "/kubepods/poduid-g")
b, g = container(bpod, 500), container(gpod, 2000)
handle(ev.CreateContainer(api.CreateContainerRequest(pod=bpod, container=b)))
handle(ev.StartContainer(b.id))
settle()
reply = handle(ev.CreateContainer(api.CreateContainerRequest(pod=gpod, container=g))).reply
assert reply.cpus and reply.cpus != "0-11", reply
parked = handle(ev.StartContainer(g.id)).reply
assert isinstance(parked, Park), parked
settle()
probes = handle(ev.DriftCheck()).reply
handle(ev.CpusetsRead({p.container_id: engine.topology.online for p in probes}))
settle()
handle(ev.StopContainer(g.id))
handle(ev.StopPodSandbox(gpod))
handle(ev.RemovePodSandbox(gpod))
settle()
assert core.node.shared_pool == engine.topology.online
handle(ev.ConnectionClosed())
print("sans-io ok")
'''


def test_a_containers_life_through_the_core_does_no_io() -> None:
    sysfs = REPO / "tests" / "fixtures" / "sysfs" / "dual-socket-ht"
    script = f"SYSFS = {str(sysfs)!r}\n" + textwrap.dedent(SCRIPT)
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().endswith("sans-io ok"), done.stdout[-2000:]
