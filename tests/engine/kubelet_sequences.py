# mypy: disable-error-code="untyped-decorator"
# (hypothesis is imported untyped by the project mypy config)
"""Create/remove sequences run through the engine and through the kubelet port (naive_kubelet), for
the properties of test_known_pod.py.

A sequence creates the containers of a few pods (each pod's in spec order), creates some again (a
restart) and removes some. ``back_to_back``: a pod's containers are created one pod after the
other, and only the pod being created is created again, so no other pod allocates in between (the
kubelet's own order, removals aside); otherwise pods interleave freely.
"""

from __future__ import annotations

from dataclasses import dataclass

import kube_topologies as kt
from hypothesis import strategies as st
from naive_kubelet import KContainer, KPod, Kubelet, Outcome

from nri_pinner.config import from_mapping
from nri_pinner.engine.admission_engine import AdmissionRequest, Decision, Engine
from nri_pinner.engine.cpuset import EMPTY, CPUSet
from nri_pinner.engine.topology.model import Topology

TOPOLOGIES = {"single_socket_ht": kt.single_socket_ht, "dual_socket_ht": kt.dual_socket_ht,
              "dual_socket_no_ht": kt.dual_socket_no_ht, "triple_socket_ht": kt.triple_socket_ht}
# Two NUMA nodes per socket (16 CPUs, 4 nodes of 2 cores x 2 threads): align-by-socket takes CPUs
# from the hint's sockets, outside its nodes (policy_static.go:726-731). Not in TOPOLOGIES, whose
# draws the container/pod properties keep.
def dual_socket_two_numa_ht() -> Topology:
    return kt.regular(2, 2, 2, 2)


SOCKET_TOPOLOGIES = {"dual_socket_two_numa_ht": dual_socket_two_numa_ht}
POLICIES = ["none", "best-effort", "restricted", "single-numa-node"]


@dataclass(frozen=True)
class Step:
    pod: str
    container: str
    ours: tuple[bool, CPUSet | None, str]
    kubelet: tuple[bool, CPUSet | None, str]
    kubelet_took_held: bool  # the kubelet's answer holds a CPU another (non-init) container holds


@st.composite
def pods(draw: st.DrawFn, uid: str) -> KPod:
    cpus = st.sampled_from([0, 1, 2, 2, 3, 4, 6])
    inits = draw(st.lists(st.tuples(cpus, st.booleans()), max_size=2))
    apps = draw(st.lists(cpus, min_size=1, max_size=3))
    return KPod(uid, (*(KContainer(f"init{i}", n, init=True, restartable=r) for i, (n, r) in enumerate(inits)),
                      *(KContainer(f"app{i}", n) for i, n in enumerate(apps))))


@st.composite
def sequences(draw: st.DrawFn) -> tuple[list[KPod], list[tuple[str, int]]]:
    """Pods and ops: ("next", pod index) creates a pod's next container; ("again", i) creates the i-th
    created container again; ("remove", i) removes it."""
    kinds = st.sampled_from(["next", "next", "next", "again", "remove"])
    return ([draw(pods(f"pod{i}")) for i in range(draw(st.integers(2, 4)))],
            draw(st.lists(st.tuples(kinds, st.integers(0, 20)), min_size=4, max_size=24)))


def engines(topology: str, policy: str, scope: str, full_pcpus: bool, reserved: int,
            options: tuple[str, ...] = ()) -> tuple[Engine, Kubelet, Kubelet]:
    topo = {**TOPOLOGIES, **SOCKET_TOPOLOGIES}[topology]()
    e = Engine.from_settings(from_mapping({
        "cpu_manager": {"reserved_cpu_count": reserved,
                        "policy_options": [*options, *(["full-pcpus-only"] if full_pcpus else [])]},
        "topology_manager": {"policy": policy, "scope": scope}}), topo)
    opts = e.policy.options
    return (e, Kubelet(topo, e.policy.reserved, opts, policy, scope),
            Kubelet(topo, e.policy.reserved, opts, policy, scope, nri=True))


def _request(pod: KPod, c: KContainer) -> AdmissionRequest:
    milli = c.cpus * 1000 or 500  # a fractional CPU in a Guaranteed pod: the shared pool
    return AdmissionRequest(pod.uid, c.name, "guaranteed", milli, milli, init=c.init, restartable=c.restartable,
                            pod_exclusive_cpus=pod.pod_guaranteed_cpus())


def _ours(c: KContainer, d: Decision) -> tuple[bool, CPUSet | None, str]:
    return d.admitted, d.cpus if d.exclusive else None, d.reason if not d.admitted else ""


def _theirs(c: KContainer, o: Outcome) -> tuple[bool, CPUSet | None, str]:
    return o.admitted, o.cpus if o.admitted and c.cpus else None, o.reason


def _took_held(k: Kubelet, pod: KPod, c: KContainer, cpus: CPUSet) -> bool:
    held = EMPTY
    for key, other in k.assignments.items():
        spec = k.spec[key]
        if key != (pod.uid, c.name) and (key[0] != pod.uid or not spec.init or spec.restartable):
            held = held | other
    return bool(cpus & held)


def run(e: Engine, kubelets: tuple[Kubelet, ...], pod_specs: list[KPod], ops: list[tuple[str, int]],
        back_to_back: bool) -> list[Step]:
    """Each create's answers: the engine's and ``kubelets[0]``'s (the others are run alongside)."""
    state = e.initial_state()
    cursor = {p.uid: 0 for p in pod_specs}
    created: list[tuple[KPod, KContainer]] = []
    current = 0
    steps: list[Step] = []
    for kind, arg in ops:
        if kind == "next":
            if back_to_back:
                while current < len(pod_specs) and cursor[pod_specs[current].uid] == len(pod_specs[current].containers):
                    current += 1
                if current == len(pod_specs):
                    break
                pod = pod_specs[current]
            else:
                pod = pod_specs[arg % len(pod_specs)]
                if cursor[pod.uid] == len(pod.containers):
                    continue
            c = pod.containers[cursor[pod.uid]]
            cursor[pod.uid] += 1
            created.append((pod, c))
        elif not created:
            continue
        else:
            pod, c = created[arg % len(created)]
            if kind == "remove":
                for k in kubelets:
                    k.remove(pod.uid, c.name)
                state = e.remove(state, pod.uid, c.name)
                created.remove((pod, c))
                continue
            if back_to_back and current < len(pod_specs) and pod is not pod_specs[current]:
                continue  # another pod's restart would be an allocation in between
        outcomes = [k.step(pod, c) for k in kubelets]
        took = outcomes[0].admitted and c.cpus > 0 and _took_held(kubelets[0], pod, c, outcomes[0].cpus)
        state, d = e.admit(state, _request(pod, c))
        steps.append(Step(pod.uid, c.name, _ours(c, d), _theirs(c, outcomes[0]), took))
    return steps
