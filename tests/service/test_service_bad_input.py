"""A refusal travels through the stub as a decision, not a fault (issue 20). The bad-input rules
themselves (annotations and checkpoint values Synchronize and create cannot read) are tested at the
core: tests/core/test_core_bad_input.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import structlog.testing
from svc_harness import container, create, make_settings, pod, running

from nri_pinner.nri.stub.wire import TtrpcStatusError


async def test_admission_rejection_is_logged_as_a_decision_not_an_error(workdir: Path) -> None:
    settings = make_settings(workdir, topology_manager={"policy": "single-numa-node"})
    with structlog.testing.capture_logs() as logs:
        async with running(settings) as r:
            big_pod = pod("big")
            with pytest.raises(TtrpcStatusError, match="TopologyAffinityError"):
                await r.conn.create_container(create(big_pod, container(big_pod, "app", 8000, 8000)))
    refused = [e for e in logs if "TopologyAffinityError" in json.dumps(e, default=str)]
    assert refused and all(e["log_level"] == "info" for e in refused), refused
    assert not [e for e in logs if e["log_level"] == "error"]
