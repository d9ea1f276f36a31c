"""nri-pinner: kubelet-grade CPU pinning and NUMA alignment as a containerd NRI plugin."""

__version__ = "0.1.0"
