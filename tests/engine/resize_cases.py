"""The kubelet's resize allocator cases (``commonTakeByTopologyTestCasesForResize`` in
kubernetes/kubernetes pkg/kubelet/cm/cpumanager/cpu_assignment_test.go, KEP-5554 work),
restated as data: (description, topology, options, available, allocated, baseline, N, expected).

``expected`` is a cpuset string, or ``None`` when the kubelet reports not enough CPUs.
For scale-up the kubelet keeps ``allocated``; for scale-down it keeps ``baseline`` and picks
the rest from ``available`` (which is then the container's own set).
"""

from __future__ import annotations

from collections.abc import Callable

import kube_topologies as kt

from nri_pinner.engine.topology.model import Topology

PACKED: dict[str, bool] = {}
SPREAD = {"distribute_cpus_across_cores": True}
UNCORE = {"prefer_align_by_uncore_cache": True}

Case = tuple[str, Callable[[], Topology], dict[str, bool], str, str, str, int, str | None]

CASES: list[Case] = [
    ("insufficient 5 of 4", kt.single_socket_ht, PACKED, "0,2,4,6", "0", "0", 5, None),
    ("insufficient 256 of 254 large", kt.dual_socket_multi_numa_per_socket_ht_large, PACKED,
     "0-126,128-254", "0", "0", 256, None),
    ("no-scale 1", kt.single_socket_ht, PACKED, "0-7", "0", "0", 1, "0"),
    ("no-scale 2", kt.single_socket_ht, PACKED, "0-7", "0,4", "0,4", 2, "0,4"),
    ("no-scale 4 baseline 2", kt.dual_socket_ht, PACKED, "0-11", "0,2,6,8", "0,6", 4, "0,2,6,8"),
    ("up 1->2 sibling", kt.single_socket_ht, PACKED, "0-7", "0", "0", 2, "0,4"),
    ("up 1->2 sibling busy", kt.single_socket_ht, PACKED, "0,1,3,5,6,7", "0", "0", 2, "0,6"),
    ("up 1->3 sibling busy", kt.single_socket_ht, PACKED, "0,1,3,5,6,7", "0", "0", 3, "0,1,5"),
    ("up 1->8 socket", kt.single_socket_ht, PACKED, "0-7", "0", "0", 8, "0-7"),
    ("up 2->4 cores", kt.single_socket_ht, PACKED, "0-7", "0,4", "0,4", 4, "0,1,4,5"),
    ("up 1->2 dual", kt.dual_socket_ht, PACKED, "0-11", "11", "11", 2, "5,11"),
    ("up 1->6 dual socket", kt.dual_socket_ht, PACKED, "0-11", "11", "11", 6, "1,3,5,7,9,11"),
    ("up 2->6 dual socket", kt.dual_socket_ht, PACKED, "0-11", "0,6", "0,6", 6, "0,2,4,6,8,10"),
    ("up 1->8 dual", kt.dual_socket_ht, PACKED, "0-11", "11", "11", 8, "0,1,3,5,6,7,9,11"),
    ("up 1->2 multi-numa", kt.dual_socket_multi_numa_per_socket_ht, PACKED, "9,30-38,49", "9", "9", 2,
     "9,49"),
    ("up 2->6 multi-numa", kt.dual_socket_multi_numa_per_socket_ht, PACKED, "0-79", "0,40", "0,40", 6,
     "0-2,40-42"),
    ("up 1->20 numa", kt.dual_socket_multi_numa_per_socket_ht, PACKED, "0-79", "39", "39", 20,
     "30-39,70-79"),
    ("up 1->40 socket", kt.dual_socket_multi_numa_per_socket_ht, PACKED, "0-79", "39", "39", 40,
     "20-39,60-79"),
    ("up 20->40", kt.dual_socket_multi_numa_per_socket_ht, PACKED, "0-79", "0-9,40-49", "0-9,40-49", 40,
     "0-19,40-59"),
    ("up 2->60", kt.dual_socket_multi_numa_per_socket_ht, PACKED, "0-79", "39,59", "39,59", 60,
     "0-19,30-59,70-79"),
    ("up 1->40 partial socket", kt.dual_socket_multi_numa_per_socket_ht, PACKED, "0-69", "39", "39", 40,
     "0-8,20-30,39-48,60-69"),
    ("up 1->41 partial socket", kt.dual_socket_multi_numa_per_socket_ht, PACKED, "0-69", "39", "39", 41,
     "0-19,39-59"),
    ("up 1->128 large", kt.dual_socket_multi_numa_per_socket_ht_large, PACKED, "0-255", "127", "127", 128,
     "64-127,192-255"),
    ("up 1->32 large", kt.dual_socket_multi_numa_per_socket_ht_large, PACKED, "0-255", "127", "127", 32,
     "112-127,240-255"),
    ("spread 1->3 single", kt.single_socket_ht, SPREAD, "0-7", "7", "7", 3, "0,1,7"),
    ("spread 1->3 dual", kt.dual_socket_ht, SPREAD, "0-11", "11", "11", 3, "1,3,11"),
    ("spread 1->6 dual", kt.dual_socket_ht, SPREAD, "0-11", "11", "11", 6, "1,3,5,7,9,11"),
    ("spread 1->8 dual", kt.dual_socket_ht, SPREAD, "0-11", "11", "11", 8, "0,1,2,3,5,7,9,11"),
    ("spread 1->2 no-ht", kt.dual_socket_no_ht, SPREAD, "0-7", "7", "7", 2, "4,7"),
    ("spread 1->8 multi-numa", kt.dual_socket_multi_numa_per_socket_ht, SPREAD, "0-79", "39", "39", 8,
     "20-26,39"),
    ("spread 1->40 partial", kt.dual_socket_multi_numa_per_socket_ht, SPREAD, "0-69", "39", "39", 40,
     "0-9,20-39,60-69"),
    ("spread 1->4 quad", kt.quad_socket_four_way_ht, SPREAD, "0-287", "60", "60", 4, "3,4,11,60"),
    ("uncore 2->8 full caches", kt.uncore_single_socket_no_smt, UNCORE, "2-15", "8,9", "8,9", 8, "4-11"),
    ("up 2->4 baseline 1", kt.single_socket_ht, PACKED, "0-7", "0,4", "0", 4, "0,1,4,5"),
    ("up 2->4 baseline 1 dual", kt.dual_socket_ht, PACKED, "0-11", "0,6", "0", 4, "0,2,6,8"),
    ("up 4->8 baseline 2 dual", kt.dual_socket_ht, PACKED, "0-11", "0,2,6,8", "0,6", 8, "0-2,4,6-8,10"),
    ("up 2->4 baseline 1 multi", kt.dual_socket_multi_numa_per_socket_ht, PACKED, "0-79", "0,40", "0", 4,
     "0,1,40,41"),
    ("down 4->3", kt.single_socket_ht, PACKED, "0,2,4,6", "0,2,4,6", "0", 3, "0,2,4"),
    ("down 6->4 dual", kt.dual_socket_ht, PACKED, "0,2,4,6,8,10", "0,2,4,6,8,10", "0,6", 4, "0,2,6,8"),
    ("down 8->5 dual", kt.dual_socket_ht, PACKED, "0-2,4,6-8,10", "0-2,4,6-8,10", "0,6", 5, "0,2,4,6,8"),
    ("down 4->3 no-ht", kt.dual_socket_no_ht, PACKED, "0,2,4,6", "0,2,4,6", "0", 3, "0,2,4"),
    ("down 6->4 no-ht socket", kt.dual_socket_no_ht, PACKED, "0-4,6", "0-4,6", "0,2", 4, "0-3"),
    ("down 4->3 multi", kt.dual_socket_multi_numa_per_socket_ht, PACKED, "0,1,40,41", "0,1,40,41", "0", 3,
     "0,1,40"),
    ("down 6->4 multi", kt.dual_socket_multi_numa_per_socket_ht, PACKED, "0-2,40-42", "0-2,40-42", "0,40",
     4, "0,1,40,41"),
    ("down spread 4->3", kt.single_socket_ht, SPREAD, "0,2,3,4", "0,2,3,4", "0", 3, "0,2,3"),
    ("down spread 6->4", kt.dual_socket_ht, SPREAD, "0,2,4,6,8,10", "0,2,4,6,8,10", "0,6", 4, "0,2,4,6"),
    ("down spread 8->5", kt.dual_socket_ht, SPREAD, "0-2,4,6-8,10", "0-2,4,6-8,10", "0,6", 5, "0,2,4,6,8"),
    ("down to baseline", kt.single_socket_ht, PACKED, "0,2,4,6", "0,2,4,6", "0,4", 2, "0,4"),
    ("down to baseline dual", kt.dual_socket_ht, PACKED, "0,2,4,6,8,10", "0,2,4,6,8,10", "0,2,6,8", 4,
     "0,2,6,8"),
    ("uncore up 3->8 smt", kt.uncore_single_socket_smt, UNCORE, "0-15", "4-6", "4-6", 8, "4-7,12-15"),
    ("uncore down 10->8 smt", kt.uncore_single_socket_smt, UNCORE, "3-7,11-15", "3-7,11-15", "4-6", 8,
     "4-7,12-15"),
    ("uncore partial 1->3", kt.uncore_single_socket_no_smt, UNCORE, "0-15", "0", "0", 3, "0-2"),
    ("uncore partial 1->3 dual", kt.uncore_dual_socket_no_smt, UNCORE, "0-15", "0", "0", 3, "0-2"),
    ("uncore partial 1->3 multi-numa", kt.uncore_single_socket_multi_numa, UNCORE, "0-15", "0", "0", 3,
     "0-2"),
    ("uncore 2->4 smt cores", kt.uncore_single_socket_smt, UNCORE, "0-15", "0,1", "0,1", 4, "0,1,8,9"),
]

# The NUMA-distributed resize cases (``commonTakeByTopologyExtendedTestCasesForResize``, the
# mustKeepCPUs revision of the same test file): (description, topology, available, must-keep,
# N, cpu group size, expected). ``available`` includes the must-keep CPUs.
DistCase = tuple[str, Callable[[], Topology], str, str, int, int, str | None]

DIST_CASES: list[DistCase] = [
    ("more than available", kt.dual_socket_ht, "0-7", "0,2,4", 10, 1, None),
    ("1 -> 8, 2 per NUMA", kt.dual_socket_ht, "0-11", "11", 8, 1, "0-2,5-8,11"),
    ("8 -> 64 over 4 NUMA", kt.dual_socket_multi_numa_per_socket_ht, "0-79", "36-39,76-79", 64, 1,
     "0-7,10-17,20-27,30-33,36-39,40-47,50-57,60-67,70-73,76-79"),
    ("2 -> 16 over 8 cores", kt.dual_socket_multi_numa_per_socket_ht,
     "0-2,10-12,20-22,30-32,40-41,50-51,60-61,70-71", "0,1", 16, 1,
     "0-1,10-11,20-21,30-31,40-41,50-51,60-61,70-71"),
    ("1 -> 1", kt.dual_socket_ht, "0-11", "11", 1, 1, "11"),
    ("1 -> 2", kt.dual_socket_ht, "0-11", "11", 2, 1, "5,11"),
    ("2 -> 62 spill to 0,1", kt.dual_socket_multi_numa_per_socket_ht, "0-79", "0,1", 62, 1,
     "0-7,10-17,20-27,30-37,40-47,50-57,60-66,70-76"),
    ("2 -> 62 group 2", kt.dual_socket_multi_numa_per_socket_ht, "0-79", "0,1", 62, 2,
     "0-7,10-17,20-27,30-36,40-47,50-57,60-67,70-76"),
    ("2 -> 62 balance", kt.dual_socket_multi_numa_per_socket_ht, "0-8,10-18,20-39,40-48,50-58,60-79", "0,1",
     62, 1, "0-7,10-17,20-27,30-37,40-46,50-56,60-67,70-77"),
    ("2 -> 62 balance group 2", kt.dual_socket_multi_numa_per_socket_ht,
     "0-8,10-18,20-39,40-48,50-58,60-79", "0,1", 62, 2, "0-7,10-16,20-27,30-37,40-47,50-56,60-67,70-77"),
    ("4 -> 34 best remainder", kt.dual_socket_multi_numa_per_socket_ht,
     "0-3,10-13,20-23,30-36,40-43,50-53,60-63,70-76", "0-3", 34, 1,
     "0-3,10-13,20-23,30-34,40-43,50-53,60-63,70-74"),
    ("4 -> 28 live machine", kt.dual_socket_multi_numa_per_socket_ht_large,
     "0,128,30,31,158,159,43-47,171-175,62,63,190,191,75-79,203-207,94,96,222,223,101-111,229-239,126,127,"
     "254,255", "43-46", 28, 1, "43-47,75-79,96,101-105,171-174,203-206,229-232"),
    ("16 -> 48 over 3 NUMA", kt.dual_socket_multi_numa_per_socket_ht, "0-79", "0-7,40-47", 48, 1,
     "0-7,10-17,20-27,40-47,50-57,60-67"),
    ("20 -> 48 held node over", kt.dual_socket_multi_numa_per_socket_ht, "0-79", "0-9,40-49", 48, 1,
     "0-23,40-63"),
    ("14 -> 48 all but 2", kt.dual_socket_multi_numa_per_socket_ht, "1-29,32-39,41-69,72-79", "1-7,41-47", 48,
     1, "1-8,10-17,20-27,41-48,50-57,60-67"),
    ("12 -> 48 spread anyway", kt.dual_socket_multi_numa_per_socket_ht, "2-29,31-39,42-69,71-79", "2-7,42-47",
     48, 1, "2-9,10-17,20-27,42-49,50-57,60-67"),
    ("2 -> 26 two NUMA", kt.dual_socket_multi_numa_per_socket_ht, "0-79", "30,70", 26, 1,
     "20-26,30-36,60-65,70-75"),
    ("2 -> 26 two NUMA group 2", kt.dual_socket_multi_numa_per_socket_ht, "0-79", "30,70", 26, 2,
     "20-25,30-36,60-65,70-76"),
    ("3 -> 5 held over distribution", kt.dual_socket_ht, "0-7", "0,2,4", 5, 1, "0-2,4,7"),
    ("17 -> 67", kt.dual_socket_multi_numa_per_socket_ht, "0-79", "0-8,40-47", 67, 1,
     "0-8,40-47,10-18,50-57,20-28,60-67,30-37,70-77"),
    ("18 -> 70 group 2", kt.dual_socket_multi_numa_per_socket_ht, "0-79", "0-8,40-48", 70, 2,
     "0-8,40-48,10-18,50-58,20-28,60-68,30-37,70-77"),
    ("scale down keep 1 -> 8", kt.dual_socket_ht, "0-11", "11", 8, 1, "0-2,5-8,11"),
    ("odd request falls back to packed", kt.dual_socket_ht, "0-8", "0,2,4", 5, 2, "0,2,4,6,8"),
]
