"""Cost of the PodResources provider on both sides of the fetcher.

Handler side: one ``PodResourcesHintProvider.hints`` call (snapshot lookup + device-manager hints
over the resource's allocatable devices), what each admission adds; 4 GPUs per NUMA node, the
container holding one. Fetcher side: turning one ``List`` answer (parsed from its bytes) into the
immutable snapshot, done off the handlers on every refresh and RunPodSandbox.

Target: the provider adds < 1 ms p99 per admission on 16 NUMA nodes (the decision budget of
bench_alignment.py); the snapshot is off the reply path (printed only).
Run: .venv/bin/python benchmarks/bench_podresources.py [--repeat N]
"""

from __future__ import annotations

import argparse
import statistics
import time

from nri_pinner.edge.clients.podresources import PodResources, view_of
from nri_pinner.edge.gen import podresources_pb2 as pr
from nri_pinner.engine.devicemanager.podresources import PodResourcesHintProvider
from nri_pinner.engine.topologymanager.hints import HintRequest

GPU = "vendor.com/gpu"


def devices(pairs: list[tuple[str, int]]) -> list[pr.ContainerDevices]:
    out = []
    for ident, node in pairs:
        d = pr.ContainerDevices(resource_name=GPU, device_ids=[ident])
        d.topology.nodes.add(ID=node)
        out.append(d)
    return out


def listing(pods: int, nodes: int) -> bytes:
    listed = pr.ListPodResourcesResponse()
    for i in range(pods):
        p = listed.pod_resources.add(namespace="bench", name=f"p{i}")
        p.containers.add(name="app", devices=devices([(f"g{i % (4 * nodes)}", i % nodes)]))
        p.containers.add(name="sidecar")
    return listed.SerializeToString()


def percentile(samples: list[float], q: float) -> float:
    return sorted(samples)[min(len(samples) - 1, int(q * len(samples)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=2000)
    args = parser.parse_args()
    print(f"{'NUMA':>4} {'pods':>5} {'List bytes':>10} {'snapshot ms':>11} {'hints p50 us':>12} {'hints p99 us':>12}")
    for nodes in (2, 8, 16):
        for pods in (100, 1000):
            raw = listing(pods, nodes)
            alloc = pr.AllocatableResourcesResponse(devices=devices([(f"g{i}", i % nodes) for i in range(4 * nodes)]))
            builds = []
            for _ in range(20):
                started = time.perf_counter()
                view = view_of(pr.ListPodResourcesResponse.FromString(raw), alloc)
                builds.append(time.perf_counter() - started)
            source = PodResources("/nonexistent/kubelet.sock", 10.0)  # never started: no I/O here
            source.view = view
            source._pods = {f"uid{i}": ("bench", f"p{i}") for i in range(pods)}
            provider = PodResourcesHintProvider(range(nodes), source)
            samples = []
            for i in range(args.repeat):
                request = HintRequest(f"uid{i % pods}", "app", exclusive_cpus=2)
                started = time.perf_counter()
                provider.hints(request)
                samples.append(time.perf_counter() - started)
            print(f"{nodes:>4} {pods:>5} {len(raw):>10} {statistics.median(builds) * 1e3:>11.2f} "
                  f"{statistics.median(samples) * 1e6:>12.1f} {percentile(samples, 0.99) * 1e6:>12.1f}")


if __name__ == "__main__":
    main()
