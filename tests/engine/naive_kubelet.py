"""A statement-by-statement port of the kubelet v1.32's stateful CPU admission, the oracle of the
re-admission tests (as naive_alloc.py is the oracle of the allocator).

Ported from kubelet v1.32.10 (vendored in kubeedge/kubeedge, vendor/k8s.io/kubernetes/pkg/kubelet/cm/):
- cpumanager/policy_static.go: ``updateCPUsToReuse`` (:285-313), ``Allocate`` (:315-392),
  ``RemoveContainer`` (:407-418), ``allocateCPUs`` (:420-455), ``podGuaranteedCPUs`` (:480-512),
  ``GetTopologyHints`` (:531-576), ``GetPodTopologyHints`` (:578-634), ``generateCPUTopologyHints``
  (:642-703: every reusable CPU counts towards the request, even one also in the available set; with
  align-by-socket a socket-aligned hint is preferred too, :692-695, ``isHintSocketAligned`` :706-717),
  ``getAlignedCPUs`` (:719-739);
- topologymanager/scope_container.go ``Admit`` (:47-70), scope_pod.go ``Admit`` (:47-70),
  scope.go ``admitPolicyNone`` (:138-146): a pod's containers, init containers first, back to back.
  In pod scope the pod's hints are merged once (scope_pod.go:48) and that best hint is every
  container's (:55-57); scope.go ``RemoveContainer`` (:113-136) drops it with the pod's last container.

The pieces already checked against the kubelet's own code elsewhere are reused: the allocator
(``take_by_topology``) and the hint merge. The hint generator is written here again, as the kubelet
writes it (a loop over NUMA masks), so that the double count of a reusable CPU that is also available
comes from the kubelet's code, not from ours.

``nri=True`` adds what nri-pinner does differently, as the README states it: the reusable set of a pod
other than the last allocating one is not dropped but keeps the CPUs the pod's regular init containers
hold (and no other container of it), and a CPU another container holds is never reusable.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import combinations

from nri_pinner.engine.cpumanager.allocator import take_by_topology
from nri_pinner.engine.cpumanager.options import StaticPolicyOptions
from nri_pinner.engine.cpuset import EMPTY, CPUSet
from nri_pinner.engine.errors import AdmissionError, InsufficientCPUs, SMTAlignmentError
from nri_pinner.engine.topology.model import Topology
from nri_pinner.engine.topologymanager.hints import ResourceHints, TopologyHint
from nri_pinner.engine.topologymanager.merge import TopologyManager, merge


@dataclass(frozen=True)
class KContainer:
    name: str
    cpus: int  # the kubelet's guaranteedCPUs: 0 = shared pool
    init: bool = False
    restartable: bool = False


@dataclass(frozen=True)
class KPod:
    uid: str
    containers: tuple[KContainer, ...]  # spec order: init containers first, then app containers
    hints: ResourceHints = field(default_factory=dict)  # another provider's hints (pod and each container)

    def pod_guaranteed_cpus(self) -> int:
        """policy_static.go:480-512."""
        by_init = by_restartable = by_app = 0
        for c in self.containers:
            if c.init and c.restartable:
                by_restartable += c.cpus
            elif c.init:
                by_init = max(by_init, by_restartable + c.cpus)
            else:
                by_app += c.cpus
        return max(by_init, by_app + by_restartable)


@dataclass(frozen=True)
class Outcome:
    container: str
    admitted: bool
    cpus: CPUSet  # exclusive CPUs; EMPTY for a shared container or a refusal
    reason: str = ""
    affinity: int | None = None


class Kubelet:
    def __init__(self, topology: Topology, reserved: CPUSet, options: StaticPolicyOptions, policy: str = "none",
                 scope: str = "container", *, nri: bool = False) -> None:
        self.nri = nri
        self.last_pod: str | None = None
        self.spec: dict[tuple[str, str], KContainer] = {}
        self.topology, self.reserved, self.options = topology, reserved, options
        self.manager = TopologyManager.from_topology(topology, policy)
        self.policy, self.scope = policy, scope
        mask = 0
        for cpu in reserved:
            mask |= topology.siblings(cpu).mask
        self.reserved_physical = CPUSet.from_mask(mask)
        self.group = max(len(cpus) for cpus in topology.core_cpus.values())
        self.default = topology.online
        self.assignments: dict[tuple[str, str], CPUSet] = {}
        self.reuse: dict[str, CPUSet] = {}
        self.pod_hint: dict[str, int | None] = {}  # pod scope: the pod's merged affinity (scope.go:61)
        self.members: dict[str, set[str]] = {}  # the pod's admitted containers (podTopologyHints[pod])

    # -- cpumanager/policy_static.go -------------------------------------------------------------
    def update_cpus_to_reuse(self, pod: KPod, c: KContainer, cset: CPUSet) -> None:
        for uid in list(self.reuse):
            if uid != pod.uid and (not self.nri or uid == self.last_pod):
                dropped = self.reuse.pop(uid)
                kept = dropped & self.init_only(uid) if self.nri else EMPTY
                if kept:
                    self.reuse[uid] = kept
        self.last_pod = pod.uid
        self.reuse.setdefault(pod.uid, EMPTY)
        if c.init and not c.restartable:
            self.reuse[pod.uid] = self.reuse[pod.uid] | cset
            return
        self.reuse[pod.uid] = self.reuse[pod.uid] - cset

    def allocate(self, pod: KPod, c: KContainer, affinity: int | None) -> CPUSet:
        n = c.cpus
        if n == 0:
            return EMPTY
        if self.options.full_pcpus_only:
            if n % self.group:
                raise SMTAlignmentError(n, self.group)
            physical = len(self.default - self.reserved_physical)
            if n > physical:
                raise SMTAlignmentError(n, self.group, physical, caused_by_physical_cpus=True)
        held = self.assignments.get((pod.uid, c.name))
        if held is not None:
            self.update_cpus_to_reuse(pod, c, held)
            return held
        cpus = self.allocate_cpus(n, affinity, self.reusable(pod.uid))
        self.assignments[(pod.uid, c.name)] = cpus
        self.spec[(pod.uid, c.name)] = c
        self.update_cpus_to_reuse(pod, c, cpus)
        return cpus

    def allocate_cpus(self, n: int, affinity: int | None, reusable: CPUSet) -> CPUSet:
        allocatable = (self.default - self.reserved) | reusable
        result = EMPTY
        if affinity is not None:
            aligned = self.aligned(affinity, allocatable)
            result = self.take(aligned, min(n, len(aligned)))
        result = result | self.take(allocatable - result, n - len(result))
        self.default = self.default - result
        return result

    def take(self, available: CPUSet, n: int) -> CPUSet:
        if n > len(available):
            raise InsufficientCPUs(n, len(available))
        o = self.options
        return take_by_topology(self.topology, available, n, full_pcpus_only=o.full_pcpus_only,
                                distribute_cpus_across_numa=o.distribute_cpus_across_numa,
                                distribute_cpus_across_cores=o.distribute_cpus_across_cores,
                                prefer_align_by_uncore_cache=o.prefer_align_cpus_by_uncorecache)

    def aligned(self, affinity: int, allocatable: CPUSet) -> CPUSet:
        nodes = [n for n in self.topology.numa_nodes if affinity >> n & 1]
        cpus = self.topology.cpus_in_numa(nodes)
        if self.options.align_by_socket:
            sockets = {self.topology.by_cpu[cpu].socket for cpu in cpus}
            cpus = CPUSet.from_mask(sum(self.topology.socket_cpus[s].mask for s in sockets))
        return allocatable & cpus

    def remove(self, uid: str, name: str) -> None:
        members = self.members.get(uid, set())
        members.discard(name)
        if not members:  # scope.go:129-132: the pod's hints go with its last container
            self.members.pop(uid, None)
            self.pod_hint.pop(uid, None)
        in_use = EMPTY
        for (p, other), cpus in self.assignments.items():
            if p == uid and other != name:
                in_use = in_use | cpus
        if (uid, name) in self.assignments:
            cpus = self.assignments.pop((uid, name))
            self.default = self.default | (cpus - in_use)
            if self.nri and uid != self.last_pod and uid in self.reuse:
                left = self.reuse.pop(uid) - (cpus - in_use)
                if left and any(p == uid for p, _ in self.assignments):
                    self.reuse[uid] = left

    def init_only(self, uid: str) -> CPUSet:
        """CPUs the pod's regular init containers hold and no other container of it holds."""
        init = other = EMPTY
        for key, cpus in self.assignments.items():
            if key[0] == uid:
                c = self.spec[key]
                if c.init and not c.restartable:
                    init = init | cpus
                else:
                    other = other | cpus
        return init - other

    def reusable(self, uid: str) -> CPUSet:
        """``cpusToReuse[pod]``; with ``nri``, less what another container holds, and for a pod other
        than the last allocating one only what its regular init containers hold."""
        raw = self.reuse.get(uid, EMPTY)
        if not self.nri:
            return raw
        held = EMPTY
        for key, cpus in self.assignments.items():
            c = self.spec[key]
            if key[0] != uid or not c.init or c.restartable:
                held = held | cpus
        usable = raw - held
        return usable if uid == self.last_pod else usable & self.init_only(uid)

    def hints(self, pod: KPod, c: KContainer) -> list[TopologyHint] | None:
        if c.cpus == 0:
            return None
        held = self.assignments.get((pod.uid, c.name))
        if held is not None:
            return [] if len(held) != c.cpus else self.generate(held, EMPTY, c.cpus)
        return self.generate(self.default - self.reserved, self.reusable(pod.uid), c.cpus)

    def pod_hints(self, pod: KPod) -> list[TopologyHint] | None:
        requested = pod.pod_guaranteed_cpus()
        if requested == 0:
            return None
        assigned = EMPTY
        for c in pod.containers:
            held = self.assignments.get((pod.uid, c.name))
            if held is not None:
                if len(held) != c.cpus:
                    return []
                assigned = assigned | held
        if len(assigned) == requested:
            return self.generate(assigned, EMPTY, requested)
        reusable = self.reusable(pod.uid) | assigned
        return self.generate(self.default - self.reserved, reusable, requested)

    def generate(self, available: CPUSet, reusable: CPUSet, request: int) -> list[TopologyHint]:
        nodes = list(self.topology.numa_nodes)
        min_size = len(nodes)
        hints: list[TopologyHint] = []
        for mask in _masks(nodes):
            in_mask = self.topology.cpus_in_numa([n for n in nodes if mask >> n & 1])
            if len(in_mask) >= request and mask.bit_count() < min_size:
                min_size = mask.bit_count()
            if any(not mask >> self.topology.by_cpu[cpu].numa & 1 for cpu in reusable):
                continue
            if len(reusable) + len(available & in_mask) >= request:
                hints.append(TopologyHint(mask, False))
        return [TopologyHint(h.affinity, h.affinity is not None and (
            h.affinity.bit_count() == min_size or self.socket_aligned(h.affinity, min_size))) for h in hints]

    def socket_aligned(self, mask: int, min_size: int) -> bool:
        """isHintSocketAligned (:706-717), asked with align-by-socket (:692-695): the hint spans as
        few sockets as the narrowest hint needs."""
        if not self.options.align_by_socket:
            return False
        per_socket = len(self.topology.numa_nodes) // len(self.topology.socket_cpus)
        if per_socket == 0:
            return False
        sockets = {self.topology.by_cpu[cpu].socket
                   for cpu in self.topology.cpus_in_numa([n for n in self.topology.numa_nodes if mask >> n & 1])}
        return len(sockets) == (min_size + per_socket - 1) // per_socket

    # -- topologymanager: one pod's admission ----------------------------------------------------
    def step(self, pod: KPod, c: KContainer) -> Outcome:
        """One container of ``pod`` on its own: its hint and Allocate. Pod scope: the pod's hint,
        merged at the pod's first admitted container (scope_pod.go:48) and that container's and every
        later one's (:55-57); a container holding CPUs (created again: the kubelet re-admitting after
        its restart) is checked by a merge of the pod as it stands, which leaves the pod's hint alone."""
        affinity: int | None = None
        fresh = False
        if self.policy != "none":
            held = (pod.uid, c.name) in self.assignments
            if self.scope == "pod" and not held and pod.uid in self.pod_hint:
                affinity = self.pod_hint[pod.uid]
            else:
                own = self.pod_hints(pod) if self.scope == "pod" else self.hints(pod, c)
                result = merge(self.manager, [{"cpu": own}, pod.hints])
                if not result.admit:
                    return Outcome(c.name, False, EMPTY, "TopologyAffinityError")
                affinity, fresh = result.hint.affinity, self.scope == "pod" and not held
        try:
            cpus = self.allocate(pod, c, affinity)
        except AdmissionError as exc:
            return Outcome(c.name, False, EMPTY, exc.reason)
        if fresh:
            self.pod_hint[pod.uid] = affinity
        self.members.setdefault(pod.uid, set()).add(c.name)
        return Outcome(c.name, True, cpus, affinity=affinity)

    def admit(self, pod: KPod) -> list[Outcome]:
        """The containers' outcomes up to the first refusal (the kubelet stops there: the pod fails).
        A new pod's containers back to back: in pod scope one merge, before the first Allocate."""
        out: list[Outcome] = []
        for c in pod.containers:
            out.append(self.step(pod, c))
            if not out[-1].admitted:
                break
        return out


def _masks(nodes: list[int]) -> Iterator[int]:
    """bitmask.IterateBitMasks: every non-empty subset, by size, then lexicographically."""
    for k in range(1, len(nodes) + 1):
        for combo in combinations(nodes, k):
            yield sum(1 << n for n in combo)
