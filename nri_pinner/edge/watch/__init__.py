"""Watching the node: cpuset drift repair (reconcile.py) and CPU hotplug uevents (uevents.py)."""
