"""The NIC hint provider: NUMA hints from the network devices a pod already has (pure; the service's
lookup inside the pod's network namespace, ``edge/nic_lookup/lookup.py``, supplies their NUMA nodes)."""
