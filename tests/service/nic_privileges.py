"""Processes with fewer privileges than this root test process, for the NIC lookup service tests.

- `setpriv(caps, argv)`: argv run as uid 0 with only ``caps`` in its bounding set (so root's permitted
  and effective sets are those, nothing inheritable or ambient) and no_new_privs, by util-linux's
  setpriv: ``[]`` is the hardened unit's and the DaemonSet plugin container's "root without
  capabilities", ``["sys_admin"]`` the lookup service's.
- Run as a script, this file installs a seccomp filter on itself and execs the rest of its argv:
  ``python nic_privileges.py yes|net -- ARGV...``. The filters are the rules systemd's
  ``RestrictNamespaces=`` puts on setns() (src/shared/seccomp-util.c, seccomp_restrict_namespaces):
  ``yes`` (nothing retained) refuses every setns(); ``net`` (network namespaces retained) refuses
  setns() with nstype 0 and with any other namespace type's flag. Only setns() is filtered here
  (systemd also filters unshare and clone): setns is what the lookup does.
"""

from __future__ import annotations

import ctypes
import os
import platform
import shutil
import struct
import sys

import pytest

CLONE_NEWNET = 0x40000000
OTHER_NAMESPACES = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x00000080
CAP_SYS_ADMIN = 21
_NR_SETNS_X86_64, _AUDIT_ARCH_X86_64 = 308, 0xC000003E
_LD_ABS, _JEQ, _JSET, _RET = 0x20, 0x15, 0x45, 0x06
_ALLOW, _EPERM = 0x7FFF0000, 0x00050000 | 1
_PR_SET_NO_NEW_PRIVS, _PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 38, 22, 2


def setpriv(caps: list[str], argv: list[str]) -> list[str]:
    tool = shutil.which("setpriv")
    if tool is None:
        pytest.skip("setpriv (util-linux) is not installed")
    bounding = ",".join(["-all", *(f"+{c}" for c in caps)])
    return [tool, "--reuid=0", f"--bounding-set={bounding}", "--inh-caps=-all", "--no-new-privs", *argv]


def restricted(mode: str, argv: list[str]) -> list[str]:
    """argv under the setns filter of ``RestrictNamespaces=<mode>`` (``yes`` or ``net``)."""
    if platform.machine() != "x86_64":
        pytest.skip("the seccomp filter here is written for x86-64")
    return [sys.executable, os.path.abspath(__file__), mode, "--", *argv]


def effective_caps(pid: int | str = "self") -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        return int(next(ln for ln in f if ln.startswith("CapEff:")).split()[1], 16)


def _filter(mode: str) -> list[tuple[int, int, int, int]]:
    """(code, jt, jf, k) instructions over struct seccomp_data (nr at 0, arch at 4, args[1] at 24)."""
    head = [(_LD_ABS, 0, 0, 4), (_JEQ, 1, 0, _AUDIT_ARCH_X86_64), (_RET, 0, 0, _ALLOW),
            (_LD_ABS, 0, 0, 0), (_JEQ, 1, 0, _NR_SETNS_X86_64), (_RET, 0, 0, _ALLOW)]
    if mode == "yes":
        return [*head, (_RET, 0, 0, _EPERM)]
    if mode == "net":
        return [*head, (_LD_ABS, 0, 0, 24), (_JEQ, 2, 0, 0), (_JSET, 1, 0, OTHER_NAMESPACES),
                (_RET, 0, 0, _ALLOW), (_RET, 0, 0, _EPERM)]
    raise ValueError(f"mode {mode!r}: yes or net")


def install_filter(mode: str) -> None:
    code = _filter(mode)
    program = ctypes.create_string_buffer(b"".join(struct.pack("HBBI", *ins) for ins in code))
    fprog = struct.pack("HxxxxxxP", len(code), ctypes.addressof(program))
    fprog_buf = ctypes.create_string_buffer(fprog)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 or \
            libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.addressof(fprog_buf), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "seccomp filter not installed")


if __name__ == "__main__":
    mode, sep, *rest = sys.argv[1:]
    assert sep == "--" and rest, "usage: nic_privileges.py yes|net -- ARGV..."
    install_filter(mode)
    os.execv(rest[0], rest)
