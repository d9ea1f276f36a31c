"""Clients of the node's other services: the CRI runtime (cri.py) and the kubelet's pod resources API
(podresources.py)."""
