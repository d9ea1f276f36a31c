"""nri-pinner installed into containerd's plugin_path (`nri-pinner install`) and launched by containerd,
on the guest's driver: it pins, and under the systemd driver systemd holds what it wrote, so a
re-application of the shared container's scope keeps it off the exclusive CPUs."""

from __future__ import annotations

import time

import pytest

from nri_pinner.engine.cpuset import CPUSet
from tests.e2e.harness import PrivateContainerd
from tests.e2e.node_env import online_cpus
from tests.e2e.pinner import preinstalled, wait_for

from .node import allowed_cpus_of_unit, systemctl, systemd_driver


def test_preinstalled_pins_and_systemd_holds_the_shared_pool(containerd: PrivateContainerd,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    with preinstalled(containerd, monkeypatch) as pinner:
        assert pinner.status()["health"]["mode"] == "pre-installed"
        burst = containerd.run_pod("burstable", 250, 500)
        guar = containerd.run_pod("guaranteed", 2000, 2000)
        (b,), (g,) = burst.container_ids, guar.container_ids
        exclusive = CPUSet.parse(pinner.assignment(g)["cpus"])
        assert len(exclusive) == 2 and pinner.assignment(g)["exclusive"] is True
        assert containerd.cpus_allowed_list(g) == containerd.cgroup_cpuset(g) == str(exclusive)
        shared = str(online_cpus() - exclusive)
        assert wait_for(lambda: pinner.shared_cpus(b) == shared, timeout=5), pinner.shared_cpus(b)
        assert containerd.cpus_allowed_list(b) == shared
        if systemd_driver():
            scope = containerd.scope_unit(b)
            assert scope == f"cri-containerd-{b}.scope"
            # told through D-Bus, not only written: the scope, or the QoS slice that holds the pool
            bound = containerd.cgroup_dir(b).parent.parent.name if pinner.below_held_slice(b) else scope
            assert allowed_cpus_of_unit(bound) == shared, bound
            systemctl("set-property", "--runtime", scope, "CPUWeight=77")  # systemd re-applies the scope
            time.sleep(2)
            assert (pinner.shared_cpus(b), containerd.cpus_allowed_list(b)) == (shared, shared)
        print(f"\ncontainerd {containerd.version}: pre-installed nri-pinner pins {guar.name} on {exclusive}, "
              f"shared {shared}")
        containerd.remove_pod(guar)
        assert wait_for(lambda: pinner.shared_cpus(b) == str(online_cpus()), timeout=5), pinner.shared_cpus(b)
        containerd.remove_pod(burst)
