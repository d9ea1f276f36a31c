"""Init and sidecar containers as the kubelet runs them (no annotation marks an init container, the kubelet
writes none; created one after another): a regular init container's
exclusive CPUs are reused by its pod's next containers, a sidecar's (an init container still running
when the app is created) are not (kubelet v1.32 policy_static.go updateCPUsToReuse). The shared
neighbour never holds any of them."""

from __future__ import annotations

from nri_pinner.engine.cpuset import CPUSet
from tests.e2e.harness import PrivateContainerd
from tests.e2e.node_env import online_cpus
from tests.e2e.pinner import start_pinner, wait_for
from tests.e2e.pods import DEFAULT_GUARANTEED_MEMORY, resources_for


def test_init_cpus_reused_by_the_sidecar_and_the_app_gets_its_own(containerd: PrivateContainerd) -> None:
    pinner = start_pinner(containerd)
    burst = containerd.run_pod("burstable", 250, 500)
    (b,) = burst.container_ids
    res = resources_for("guaranteed", 2000, 2000, None, None)
    # the sandbox as the kubelet sizes it (PodLimits, component-helpers resource/helpers.go): the
    # sidecar's and the app's limits together, 4 CPUs and twice the memory (the init container alone
    # asks half); a smaller sandbox reads as a pod with pod-level resources, which gets nothing exclusive
    pod = containerd.run_pod("guaranteed", 4000, 4000, memory_request=2 * DEFAULT_GUARANTEED_MEMORY,
                             memory_limit=2 * DEFAULT_GUARANTEED_MEMORY, containers=0)
    init = containerd.add_container(pod, "init", res, init=True, command=("sh", "-c", "exit 0"))
    containerd.cri.wait_exited(init, timeout=60)
    init_cpus = CPUSet.parse(pinner.assignment(init)["cpus"])
    assert len(init_cpus) == 2
    sidecar = containerd.add_container(pod, "sidecar", res, init=True, restartable=True)  # keeps running
    side_cpus = CPUSet.parse(containerd.cpus_allowed_list(sidecar))
    assert side_cpus == init_cpus  # the exited init container's CPUs are reusable
    app = containerd.add_container(pod, "app", res)
    app_cpus = CPUSet.parse(containerd.cpus_allowed_list(app))
    # the sidecar still runs: the app must not get its CPUs (as it would reuse a regular init's)
    assert len(app_cpus) == 2 and app_cpus.isdisjoint(side_cpus), (app_cpus, side_cpus)
    assert CPUSet.parse(containerd.cpus_allowed_list(sidecar)) == side_cpus
    assert pinner.assignment(app)["exclusive"] is True and pinner.assignment(sidecar)["exclusive"] is True
    shared = str(online_cpus() - side_cpus - app_cpus)
    assert wait_for(lambda: pinner.shared_cpus(b) == shared, timeout=5), pinner.shared_cpus(b)
    assert containerd.cpus_allowed_list(b) == shared
    print(f"\ncontainerd {containerd.version}: init {init_cpus}, sidecar {side_cpus}, app {app_cpus}, "
          f"shared {shared}")
    containerd.remove_pod(pod)
    assert wait_for(lambda: pinner.shared_cpus(b) == str(online_cpus()), timeout=5), pinner.shared_cpus(b)
    containerd.remove_pod(burst)
