"""Carrying out `WriteCgroups`: cpuset writes, pod CPU quotas, systemd units and the QoS slices."""
