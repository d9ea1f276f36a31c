"""What the plugin shows: Prometheus metrics and their HTTP listener, the status socket, readiness and logs."""
