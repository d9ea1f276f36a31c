"""The NIC lookup service (``nri-pinner nic-lookup-server``) and the plugin's side of it, on real network
namespaces with real links (pyroute2), real netlink, and real privilege boundaries: the service runs as
uid 0 with CAP_SYS_ADMIN only, the plugin's side as uid 0 with no capability at all (util-linux's
setpriv), or under the setns rule systemd's RestrictNamespaces= installs (a real seccomp filter,
nic_privileges.py). The service process is the CLI's (`python -m nri_pinner nic-lookup-server`), started
as systemd starts it (READY=1 on $NOTIFY_SOCKET once it listens)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from nic_fixtures import PodNetns, fixture_sysfs, host_nic, host_pci_of, on_thread, unique
from nic_privileges import CAP_SYS_ADMIN, CLONE_NEWNET, effective_caps, restricted, setpriv

from nri_pinner.edge.nic_lookup import server as nic_lookup_server
from nri_pinner.edge.nic_lookup.client import SOCKET_ENV, NetnsReader, ServiceUnavailable, ask
from nri_pinner.edge.nic_lookup.lookup import LOOKUP_WAIT_SECONDS, NicLookup
from nri_pinner.edge.nic_lookup.netns import LinkDevice, read_devices, read_links
from nri_pinner.edge.nic_lookup.protocol import HEADER, MAX_REPLY, ServiceError, encode_request, frame_length
from nri_pinner.edge.nic_lookup.server import MAX_LOOKUPS, LookupServer
from nri_pinner.nri.gen import api_pb2 as api

if os.geteuid() != 0:
    pytest.skip("network namespaces and setpriv need root", allow_module_level=True)

REPO = Path(__file__).resolve().parents[2]
PROBE = Path(__file__).with_name("nic_lookup_probe.py")


@pytest.fixture
def workdir() -> Iterator[Path]:
    directory = tempfile.mkdtemp(prefix="nicl-", dir="/tmp")  # short: unix socket paths
    yield Path(directory)
    shutil.rmtree(directory, ignore_errors=True)


def pod_with_nics(pod_netns: PodNetns, workdir: Path) -> tuple[str, str]:
    """The pod's eth0 (veth) and net1 (a macvlan on this machine's NIC, which a fixture sysfs places on
    NUMA node 1): returns (sysfs root, the NIC's PCI address)."""
    ifname, bus, dev = host_nic()
    pci = host_pci_of(bus, dev)
    root = fixture_sysfs(workdir / "sysfs", {pci: 1}, {} if bus == "pci" else {(bus, dev): pci})
    pod_netns.add_veth("eth0")
    pod_netns.add_macvlan(ifname, "net1")
    return root, pci


def expected_links(pci: str) -> dict[str, tuple[str, str | None, int | None]]:
    return {"eth0": ("veth", None, None), "net1": ("macvlan", pci, 1)}


def by_name(links: Sequence[dict[str, Any]]) -> dict[str, tuple[str, str | None, int | None]]:
    return {x["name"]: (x["kind"], x["pci"], x["numa"]) for x in links}


@contextlib.contextmanager
def lookup_service(workdir: Path, wrap: Callable[[list[str]], list[str]],
                   log: list[str] | None = None) -> Iterator[tuple[str, int]]:
    """The CLI's lookup service in a process of its own, ``wrap``ped (setpriv, seccomp); (socket, pid)
    once it said READY=1. Stopped by SIGTERM afterwards, which must end it with status 0; its log
    (stderr) goes into ``log``."""
    sock, notify_path = str(workdir / "lookup.sock"), str(workdir / "notify")
    env = {**os.environ, "PYTHONPATH": str(REPO), "NOTIFY_SOCKET": notify_path}
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as notify:
        notify.bind(notify_path)
        notify.settimeout(30)
        proc = subprocess.Popen(wrap([sys.executable, "-m", "nri_pinner", "nic-lookup-server", "--socket", sock]),
                                cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            try:
                ready = notify.recv(4096).decode()
            except TimeoutError:
                proc.kill()
                pytest.fail(f"the lookup service did not get ready: {proc.communicate()[1][-3000:]}")
            assert ready.startswith("READY=1\n") and f"STATUS=listening on {sock}" in ready, ready
            assert os.stat(sock).st_mode & 0o777 == 0o600
            yield sock, proc.pid
        finally:
            proc.terminate()
            _out, err = proc.communicate(timeout=20)
            if log is not None:
                log.append(err)
    assert proc.returncode == 0 and "NIC lookup service stopped" in err, err[-3000:]
    assert "Traceback" not in err, err[-3000:]


def probe(argv_wrap: Callable[[list[str]], list[str]], netns: str, sock: str, root: str) -> dict[str, Any]:
    """nic_lookup_probe.py (the plugin's side) in a process of its own, ``argv_wrap``ped."""
    env = {**os.environ, "PYTHONPATH": str(REPO), SOCKET_ENV: sock}
    done = subprocess.run(argv_wrap([sys.executable, str(PROBE), netns, sock, root]), cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])  # after structlog's default lines
    return result


# -- least privilege, proven on this host --------------------------------------------------------


def test_root_without_capabilities_reads_a_pod_netns_through_the_sys_admin_only_service(
        pod_netns: PodNetns, workdir: Path) -> None:
    """The hardened unit's and the DaemonSet plugin container's situation: uid 0, no capability. Its own
    setns is refused; through the service (uid 0, CAP_SYS_ADMIN and nothing else) it gets the pod's
    links, the same as root reads them in-process; with no service, one line naming the fix."""
    root, pci = pod_with_nics(pod_netns, workdir)
    with lookup_service(workdir, lambda argv: setpriv(["sys_admin"], argv)) as (sock, pid):
        assert effective_caps(pid) == 1 << CAP_SYS_ADMIN
        got = probe(lambda argv: setpriv([], argv), pod_netns.path, sock, root)
        # /proc/PID/ns/net of a process holding capabilities the service lacks (init) stays closed to
        # it: ptrace access mode, not a capability it could be given for this
        with pytest.raises(ServiceError, match=r"\[Errno 13\] Permission denied: '/proc/1/ns/net'"):
            ask(sock, "/proc/1/ns/net")
    assert int(got["caps"], 16) == 0
    assert got["direct"].startswith("SetnsRefused: [Errno 1] setns into the pod's network namespace not permitted")
    assert by_name(got["service"]) == expected_links(pci)
    in_process = {x.name: x.to_json() for x in on_thread(read_links, pod_netns.path, root)}
    assert {x["name"]: x for x in got["service"]} == in_process  # the same answer as root's own setns
    hint = got["no_service"]
    assert hint.startswith("LookupError: cannot enter the pod's network namespace: setns() is not permitted here")
    assert "nri-pinner-nic-lookup.service" in hint and "components/nic-lookup" in hint and "\n" not in hint
    # NicLookup as the plugin constructs it (NicLookup(sysfs_root)), its socket from the environment
    lookup = got["lookup"]
    assert lookup["problem"] == "" and by_name(lookup["links"]) == expected_links(pci)
    assert lookup["waited"] < LOOKUP_WAIT_SECONDS + 0.1


def test_restrict_namespaces_refuses_setns_to_full_root_and_the_service_enters_under_net(
        pod_netns: PodNetns, workdir: Path) -> None:
    """RestrictNamespaces=yes (the main unit) refuses setns whatever the capabilities: full root under
    that filter is refused and gets the hint. The service runs under RestrictNamespaces=net's rule, which
    refuses setns with nstype 0: it enters because it passes CLONE_NEWNET."""
    root, pci = pod_with_nics(pod_netns, workdir)
    control = subprocess.run(restricted("net", [sys.executable, "-c", SETNS_BOTH, pod_netns.path]),
                             capture_output=True, text=True, timeout=60, check=False)
    assert control.stdout.split() == ["nstype0:1", f"newnet:{0}"], control.stderr  # EPERM, then entered
    with lookup_service(workdir, lambda argv: setpriv(["sys_admin"], restricted("net", argv))) as (sock, _pid):
        got = probe(lambda argv: restricted("yes", argv), pod_netns.path, sock, root)
        no_filter = probe(lambda argv: argv, pod_netns.path, sock, root)
    assert int(got["caps"], 16) & (1 << CAP_SYS_ADMIN)  # full root ...
    assert got["direct"].startswith("SetnsRefused")  # ... and still refused by the filter
    assert by_name(got["service"]) == expected_links(pci)
    assert "nri-pinner-nic-lookup.service" in got["no_service"]
    assert no_filter["direct"] == "ok: 2 links"  # plain root (tests, pre-installed mode): setns works
    assert by_name(no_filter["no_service"]) == expected_links(pci)  # and is the fallback


SETNS_BOTH = f"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
fd = os.open(sys.argv[1], os.O_RDONLY)
for label, nstype in (("nstype0", 0), ("newnet", {CLONE_NEWNET})):
    rc = libc.setns(fd, nstype)
    print(f"{{label}}:{{ctypes.get_errno() if rc else 0}}")
"""


def test_lookup_latency_through_the_service_and_in_process(pod_netns: PodNetns, workdir: Path) -> None:
    root, _pci = pod_with_nics(pod_netns, workdir)

    def timed(fn: Callable[[], Any], n: int = 40) -> tuple[float, float]:
        on_thread(fn)  # warm
        ms = sorted(_ms(lambda: on_thread(fn)) for _ in range(n))
        return statistics.median(ms), ms[int(n * 0.9)]

    with lookup_service(workdir, lambda argv: setpriv(["sys_admin"], argv)) as (sock, _pid):
        reader = NetnsReader(sock)
        service = timed(lambda: reader(pod_netns.path, root, None))
    in_process = timed(lambda: read_links(pod_netns.path, root))
    print(f"\nNIC lookup, 2 links: service median {service[0]:.2f} ms (p90 {service[1]:.2f}), "
          f"in-process median {in_process[0]:.2f} ms (p90 {in_process[1]:.2f})")
    assert service[0] < 50  # far inside LOOKUP_WAIT_SECONDS (200 ms)


def _ms(fn: Callable[[], Any]) -> float:
    began = time.perf_counter()
    fn()
    return (time.perf_counter() - began) * 1000


# -- the service survives what a client does ------------------------------------------------------


@contextlib.contextmanager
def served(path: str, lookup: Callable[[str], Sequence[LinkDevice]] = read_devices,
           **kwargs: float) -> Iterator[LookupServer]:
    """A LookupServer in this (root) process, serving on a thread until the block ends."""
    server = LookupServer(path, lookup, **kwargs)
    server.bind()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.stop()
        thread.join(timeout=5)
        assert not thread.is_alive() and not os.path.exists(path)


def raw(path: str, data: bytes, close_write: bool = True) -> dict[str, Any]:
    """Send ``data`` as is; the service's one reply, decoded as JSON."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(10)
        sock.connect(path)
        sock.sendall(data)
        if close_write:
            sock.shutdown(socket.SHUT_WR)
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
    assert frame_length(reply[:HEADER.size], MAX_REPLY) == len(reply) - HEADER.size
    result: dict[str, Any] = json.loads(reply[HEADER.size:])
    return result


def test_bad_requests_get_an_error_reply_and_the_service_goes_on(pod_netns: PodNetns, workdir: Path) -> None:
    pod_netns.add_veth("eth0")
    path = str(workdir / "s.sock")
    not_netns = f"/var/run/netns/{unique('npf')}"
    Path(not_netns).write_text("")  # a plain file where a namespace should be
    body = b'{"v":1,"netns":"/etc/passwd"}'
    cases = [
        (HEADER.pack(1 << 30), "bad request: frame of 1073741824 bytes"),
        (HEADER.pack(0), "bad request: frame of 0 bytes"),
        (HEADER.pack(5) + b"hello", "bad request: not UTF-8 JSON"),
        (HEADER.pack(len(body)) + body, "is not /var/run/netns/NAME"),
        (HEADER.pack(9) + b'{"v":2}xx', "bad request: not UTF-8 JSON"),
        (HEADER.pack(7) + b'{"v":2}', "protocol version '2'"),
        (HEADER.pack(10) + b"{", "bad request: connection closed after 1 of 10 bytes"),
        (b"\0\0", "bad request: connection closed after 2 of 4 bytes"),
        (encode_request("/run/netns/" + unique("gone")), "[Errno 2] No such file or directory"),
        (encode_request(not_netns), "[Errno 22] Invalid argument"),  # setns: not a network namespace
    ]
    try:
        with served(path, read_seconds=0.3) as server:
            for data, error in cases:
                assert error in raw(path, data)["error"], data
                assert [x.name for x in ask(path, pod_netns.path)] == ["eth0"]  # still serving
            began = time.monotonic()
            assert "not sent within 0.3 s" in raw(path, b"", close_write=False)["error"]  # a client that waits
            assert time.monotonic() - began < 2
            assert server.lookups_running == 0
    finally:
        os.unlink(not_netns)


def ask_as(uid: int, path: str, netns: str) -> str:
    """``ask`` from a child forked from this process that then dropped to ``uid``: what it raised, as
    text, or "answered". The child runs the client this process already imported, so neither the
    checkout nor the interpreter has to be readable by ``uid`` (a clone under a 0700 directory, or
    /root, is not); SO_PEERCRED still reports the child's own uid to the server."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: no pytest, no threads of its own; leave through os._exit only
        code = 0
        try:
            os.close(read_end)
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            try:
                ask(path, netns)
                text = "answered"
            except Exception as exc:  # the outcome under test, reported to the parent
                text = str(exc)
            os.write(write_end, f"{os.getuid()}:{text}".encode())
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as reader:
        out = reader.read().decode()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, f"child could not become uid {uid}: {out!r}"
    child_uid, _, text = out.partition(":")
    assert child_uid == str(uid), out
    return text


def test_only_root_may_ask(pod_netns: PodNetns, workdir: Path) -> None:
    pod_netns.add_veth("eth0")
    path = str(workdir / "s.sock")
    with served(path):
        os.chmod(workdir, 0o755)
        os.chmod(path, 0o666)  # past the file mode: SO_PEERCRED still says who asks
        assert ask_as(65534, path, pod_netns.path) == "uid 65534 may not ask"
        assert [x.name for x in ask(path, pod_netns.path)] == ["eth0"]  # root, on the same server


def test_a_hung_lookup_is_answered_at_its_deadline_and_never_holds_a_create(workdir: Path) -> None:
    release = threading.Event()

    def hangs(_netns: str) -> Sequence[LinkDevice]:
        release.wait(30)  # netlink that does not answer
        return ()

    path = str(workdir / "s.sock")
    with served(path, hangs, lookup_seconds=0.05) as server:
        began = time.monotonic()
        with pytest.raises(ServiceError, match=r"did not finish within 0\.05 s"):
            ask(path, "/run/netns/x")
        assert time.monotonic() - began < 1
        for _ in range(MAX_LOOKUPS - 1):  # each leaves its thread behind, counted
            with pytest.raises(ServiceError, match="did not finish"):
                ask(path, "/run/netns/x")
        assert server.lookups_running == MAX_LOOKUPS
        with pytest.raises(ServiceError, match=f"busy: {MAX_LOOKUPS} lookups still running"):
            ask(path, "/run/netns/x")
        release.set()
        deadline = time.monotonic() + 5
        while server.lookups_running and time.monotonic() < deadline:
            time.sleep(0.01)
        assert server.lookups_running == 0 and ask(path, "/run/netns/x") == ()


def test_a_service_that_never_answers_costs_a_create_at_most_the_wait(pod_netns: PodNetns, workdir: Path) -> None:
    """A socket that accepts connections into its backlog and never reads: the client gives up at its
    deadline and falls back to its own setns (root here); the create waits LOOKUP_WAIT_SECONDS only."""
    pod_netns.add_veth("eth0")
    path = str(workdir / "silent.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as silent:
        silent.bind(path)
        silent.listen(8)
        began = time.monotonic()
        with pytest.raises(ServiceUnavailable, match=r"no answer from .* within 0\.3 s"):
            ask(path, pod_netns.path, timeout=0.3)
        assert 0.25 < time.monotonic() - began < 1
        lookup = NicLookup("/", reader=NetnsReader(path, timeout=0.5))
        pod = api.PodSandbox(id="sb-silent", uid="uid-silent", name="silent")
        pod.linux.namespaces.add(type="network", path=pod_netns.path)
        began = time.monotonic()
        assert lookup.wait(pod) is None and lookup.late == 1
        assert time.monotonic() - began < LOOKUP_WAIT_SECONDS + 0.1
        found = lookup.start(pod).result(timeout=10)
    assert [x.name for x in found.links] == ["eth0"] and not found.problem


def test_nic_lookup_finds_the_service_through_the_environment(pod_netns: PodNetns, workdir: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    pod_netns.add_veth("eth0")
    path = str(workdir / "s.sock")
    asked: list[str] = []

    def counting(netns: str) -> Sequence[LinkDevice]:
        asked.append(netns)
        return read_devices(netns)

    pod = api.PodSandbox(id="sb-env", uid="uid-env", name="env")
    pod.linux.namespaces.add(type="network", path=pod_netns.path)
    with served(path, counting):
        monkeypatch.setenv(SOCKET_ENV, path)
        found = NicLookup("/", wait_seconds=10).wait(pod)
        assert found is not None and [x.name for x in found.links] == ["eth0"] and asked == [pod_netns.path]
        monkeypatch.setenv(SOCKET_ENV, "")  # turned off: never asked
        found = NicLookup("/", wait_seconds=10).wait(pod)
        assert found is not None and [x.name for x in found.links] == ["eth0"] and asked == [pod_netns.path]
    monkeypatch.delenv(SOCKET_ENV)
    assert NetnsReader().socket_path == "/run/nri-pinner-nic-lookup/nic-lookup.sock"


def test_the_service_says_when_it_lacks_the_capability(pod_netns: PodNetns, workdir: Path) -> None:
    """Started without CAP_SYS_ADMIN (a unit or container missing it), it says so at start, and each
    lookup's error says why."""
    log: list[str] = []
    with lookup_service(workdir, lambda argv: setpriv([], argv), log) as (sock, pid):
        assert effective_caps(pid) == 0
        with pytest.raises(ServiceError, match=r"\[Errno 1\] setns into the pod's network namespace not permitted"):
            ask(sock, pod_netns.path)
    assert '"no CAP_SYS_ADMIN: every lookup will be refused' in log[0], log
    assert nic_lookup_server.can_setns()  # this test process: root with every capability
