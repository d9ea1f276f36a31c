"""End-to-end tests against real, private containerd instances (see harness.py)."""
