"""Device hints (the kubelet's device-manager rules), pure: no I/O."""
