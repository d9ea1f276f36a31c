"""Fixtures for end-to-end tests: a private containerd per installed runtime, driven through CRI.

``containerd`` is parametrised over the runtimes in RUNTIMES; a runtime that is not installed (or a
non-root run) skips with the reason, so a dev box without them still runs the unit tests.
scripts/install-runtimes.sh installs both; CI sets NRI_PINNER_E2E_REQUIRED=1 to turn such skips
into failures. Workdirs live under $NRI_PINNER_E2E_WORKDIR
(default <repo>/e2e-work), one lockable slot per concurrent run.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from . import final_counts
from .cri_stubs import CriStubError, ensure_cri_stubs
from .harness import PrivateContainerd, claim_workdir
from .host_cleanup import RuntimeMissing, find_runtime
from .plugins import PluginProcess

RUNTIMES = ("1.7", "2.1")
REPO = Path(__file__).resolve().parents[2]


def e2e_base_dir() -> Path:
    return Path(os.environ.get("NRI_PINNER_E2E_WORKDIR", str(REPO / "e2e-work")))


def pytest_report_header() -> list[str]:
    lines = []
    for key in RUNTIMES:
        try:
            lines.append(f"e2e containerd {key}: {find_runtime(key).reported}")
        except RuntimeMissing as missing:
            lines.append(f"e2e containerd {key}: not installed ({missing})")
    return lines


@pytest.fixture(scope="session", params=RUNTIMES, ids=[f"containerd-{k}" for k in RUNTIMES])
def containerd_session(request: pytest.FixtureRequest) -> Iterator[PrivateContainerd]:
    key: str = request.param
    try:
        if os.geteuid() != 0:
            raise RuntimeMissing(f"containerd {key}: e2e tests need root (they start containerd, write cgroups)")
        find_runtime(key)
        ensure_cri_stubs()
    except (RuntimeMissing, CriStubError) as missing:
        if os.environ.get("NRI_PINNER_E2E_REQUIRED") == "1":
            pytest.fail(f"NRI_PINNER_E2E_REQUIRED=1 but {missing}")
        pytest.skip(str(missing))
    workdir, lock = claim_workdir(e2e_base_dir() / f"containerd-{key}")
    runtime = PrivateContainerd(key, workdir)
    try:
        runtime.start()
        print(
            f"\ne2e: containerd {key} running version {runtime.version} "
            f"({runtime.install.reported}); workdir {workdir}; started in {runtime.start_seconds:.2f}s"
        )
        yield runtime
    finally:
        runtime.stop()
        lock.close()


@pytest.fixture
def containerd(
    containerd_session: PrivateContainerd, record_property: Callable[[str, object], None]
) -> Iterator[PrivateContainerd]:
    """The session's private containerd; pods and plugins a test leaves behind are removed after it."""
    record_property("containerd_version", containerd_session.version)
    yield containerd_session
    final_counts.record_live(containerd_session)  # a plugin the test left running: before it is stopped
    for plugin in containerd_session.plugins:
        plugin.stop()
    containerd_session.plugins.clear()
    if not containerd_session.is_running:  # a test stopped it: later tests get a fresh instance
        containerd_session.start()
    containerd_session.cri.remove_everything()


@pytest.fixture
def start_plugin(containerd: PrivateContainerd) -> Callable[..., PluginProcess]:
    """``start_plugin(argv, name=None, env=None, timeout=15)``: start an external NRI plugin on this
    containerd's NRI socket (also in $NRI_SOCKET_PATH) and wait until containerd logs it connected."""
    return containerd.start_plugin


# Figures the end-to-end tests print (runtime versions, sync times, churn repairs) are shown in the
# summary even when pytest captures output, so every CI log names what ran and what it measured.
_FIGURES: list[str] = []
_FIGURE_LINE = re.compile(r"^(e2e: |containerd \d|packaging: )")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when in ("setup", "call") and report.passed:
        for line in report.capstdout.splitlines():
            if _FIGURE_LINE.match(line) and line not in _FIGURES:
                _FIGURES.append(line)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _FIGURES:
        terminalreporter.section("end-to-end figures")
        for line in _FIGURES:
            terminalreporter.write_line(line)
