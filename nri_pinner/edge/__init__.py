"""The I/O edge around the node core: the service that wires it (app.py, plugin.py, timers.py,
instance_lock.py, request_intake.py) and one package per thing it talks to or effect it carries out:
cgroups (cpusets, quotas, systemd units), checkpoint (the state file), clients (CRI, kubelet pod
resources), nic_lookup (a pod's NICs, inside its network namespace), watch (drift and CPU hotplug),
observe (metrics, status, readiness, logs); gen holds their generated protobuf messages."""
