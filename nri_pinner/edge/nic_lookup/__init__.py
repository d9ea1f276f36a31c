"""A pod's NICs, read inside its network namespace: the lookup (lookup.py), the netns reads (netns.py) and the
separate lookup service (server.py, client.py, protocol.py)."""
