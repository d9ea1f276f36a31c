"""The kubelet Memory Manager's static policy (pure: capacities come from topology discovery)."""
