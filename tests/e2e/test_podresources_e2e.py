"""The PodResources provider on real containerd (plumbing): pods created through CRI like a kubelet
(its container labels name the pod), a fake kubelet serving PodResources on a real unix socket (no
kubelet runs on this VM; testkit/fake_kubelet.py), the plugin as its own process. RunPodSandbox makes
the plugin List; the container's admission carries the kubelet-reported device's hints, which
`nri-pinner status` shows. One NUMA node here: alignment itself is proven in tests/service.
"""

from __future__ import annotations

import tempfile
import uuid
from pathlib import Path

from testkit.fake_kubelet import FakeKubelet

from .harness import PrivateContainerd
from .pinner import start_pinner
from .pods import resources_for


def test_kubelet_reported_devices_reach_the_provider(containerd: PrivateContainerd) -> None:
    with tempfile.TemporaryDirectory(prefix="podres-", dir="/tmp") as tmp, \
            FakeKubelet(str(Path(tmp) / "kubelet.sock")) as kubelet:
        kubelet.allocatable = [("example.com/accel", ["acc-0"], [0]), ("example.com/accel", ["acc-1"], [0])]
        # the kubelet lists a pod from its admission on, before the sandbox runs
        name = f"e2e-podres-{uuid.uuid4().hex[:8]}"
        kubelet.set_pod("default", name, {"c0": [("example.com/accel", ["acc-1"], [0])]})
        pinner = start_pinner(containerd, topology_manager={"policy": "single-numa-node"},
                              hints={"providers": ["cpu", "podresources"]},
                              podresources={"socket": kubelet.socket_path, "refresh_seconds": 3600})
        assert kubelet.wait_calls("List", 1, timeout=15)  # at start
        pod = containerd.run_pod("guaranteed", 1000, 1000, containers=0, name=name)
        assert kubelet.wait_calls("List", 2, timeout=15)  # RunPodSandbox asked for another
        cid = containerd.add_container(pod, "c0", resources_for("guaranteed", 1000, 1000, None, None))
        a = pinner.assignment(cid)
        assert a["exclusive"] is True
        assert a["hints"]["provider_hints"]["podresources"] == {"example.com/accel": "{0}"}
        assert "podresources[example.com/accel] {0}" in pinner.status(as_json=False)
        containerd.remove_pod(pod)
