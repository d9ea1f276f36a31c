"""containerd configuration for a private instance: nothing shared with a system containerd or a sibling.

containerd 1.7 reads config ``version = 2`` (CRI under ``io.containerd.grpc.v1.cri``, ``sandbox_image``);
containerd 2.x reads ``version = 3`` (CRI split into ``io.containerd.cri.v1.images`` with
``pinned_images.sandbox`` and ``io.containerd.cri.v1.runtime``; ``cni.bin_dirs`` is a list).
NRI (``io.containerd.nri.v1.nri``) is off by default in 1.7 and has the same keys in both.
``restrict_oom_score_adj`` is required on machines whose root lacks CAP_SYS_RESOURCE: without it runc
cannot lower oom_score_adj for the sandbox (-998) or Guaranteed containers (-997) and fails with
"can't get final child's PID from pipe: EOF".
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ContainerdPaths:
    """Every path a containerd instance owns; all of them private to one instance."""

    root: Path
    state: Path
    grpc_socket: Path
    ttrpc_socket: Path
    debug_socket: Path
    nri_socket: Path
    runc_root: Path
    opt_dir: Path
    cni_bin_dir: Path
    cni_conf_dir: Path
    nri_plugin_dir: Path
    nri_plugin_config_dir: Path


@dataclass(frozen=True)
class ContainerdSettings:
    sandbox_image: str
    runc_binary: str = "/usr/sbin/runc"
    snapshotter: str = "overlayfs"
    nri_registration_timeout: str = "5s"
    nri_request_timeout: str = "2s"
    systemd_cgroup: bool = False  # runc's cgroup driver: systemd (scopes under slices) or cgroupfs


def settings_from_env(sandbox_image: str) -> ContainerdSettings:
    """The node's driver and NRI timeouts (node_env: the VM guest sets systemd and emulation-sized values)."""
    from . import node_env

    return ContainerdSettings(sandbox_image, nri_registration_timeout=node_env.NRI_REGISTRATION_TIMEOUT,
                              nri_request_timeout=node_env.NRI_REQUEST_TIMEOUT, systemd_cgroup=node_env.SYSTEMD)


def _q(value: object) -> str:
    """A TOML basic string / list literal (JSON's escaping is valid TOML for these)."""
    return json.dumps(str(value)) if not isinstance(value, list) else json.dumps([str(v) for v in value])


def _common_head(version: int, p: ContainerdPaths, s: ContainerdSettings) -> str:
    return f"""version = {version}
root = {_q(p.root)}
state = {_q(p.state)}

[grpc]
  address = {_q(p.grpc_socket)}

[ttrpc]
  address = {_q(p.ttrpc_socket)}

[debug]
  address = {_q(p.debug_socket)}
  level = "debug"

[metrics]
  address = ""

[plugins."io.containerd.nri.v1.nri"]
  disable = false
  disable_connections = false
  socket_path = {_q(p.nri_socket)}
  plugin_path = {_q(p.nri_plugin_dir)}
  plugin_config_path = {_q(p.nri_plugin_config_dir)}
  plugin_registration_timeout = {_q(s.nri_registration_timeout)}
  plugin_request_timeout = {_q(s.nri_request_timeout)}
"""


def _runc_runtime(prefix: str, p: ContainerdPaths, s: ContainerdSettings, extra: str = "") -> str:
    # The cgroup driver the kubelet would be configured with, and a private runc state root.
    return f"""
[{prefix}.containerd]
  default_runtime_name = "runc"
{extra}
[{prefix}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[{prefix}.containerd.runtimes.runc.options]
  SystemdCgroup = {"true" if s.systemd_cgroup else "false"}
  BinaryName = {_q(s.runc_binary)}
  Root = {_q(p.runc_root)}
"""


def render_config_v2(p: ContainerdPaths, s: ContainerdSettings) -> str:
    """Config for containerd 1.7 (config version 2)."""
    cri = '[plugins."io.containerd.grpc.v1.cri"]'
    return (
        _common_head(2, p, s)
        + f"""
[plugins."io.containerd.internal.v1.opt"]
  path = {_q(p.opt_dir)}

{cri}
  sandbox_image = {_q(s.sandbox_image)}
  disable_apparmor = true
  restrict_oom_score_adj = true
  disable_hugetlb_controller = true
  tolerate_missing_hugetlb_controller = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

[plugins."io.containerd.grpc.v1.cri".cni]
  bin_dir = {_q(p.cni_bin_dir)}
  conf_dir = {_q(p.cni_conf_dir)}
"""
        + _runc_runtime('plugins."io.containerd.grpc.v1.cri"', p, s, f"  snapshotter = {_q(s.snapshotter)}\n")
    )


def render_config_v3(p: ContainerdPaths, s: ContainerdSettings) -> str:
    """Config for containerd 2.x (config version 3)."""
    return (
        _common_head(3, p, s)
        + f"""
[plugins."io.containerd.internal.v1.opt"]
  path = {_q(p.opt_dir)}

[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

[plugins."io.containerd.cri.v1.images"]
  snapshotter = {_q(s.snapshotter)}

[plugins."io.containerd.cri.v1.images".pinned_images]
  sandbox = {_q(s.sandbox_image)}

[plugins."io.containerd.cri.v1.runtime"]
  disable_apparmor = true
  restrict_oom_score_adj = true
  disable_hugetlb_controller = true
  tolerate_missing_hugetlb_controller = true

[plugins."io.containerd.cri.v1.runtime".cni]
  bin_dirs = {_q([p.cni_bin_dir])}
  conf_dir = {_q(p.cni_conf_dir)}
"""
        + _runc_runtime('plugins."io.containerd.cri.v1.runtime"', p, s)
    )


def render_config(major: int, p: ContainerdPaths, s: ContainerdSettings) -> str:
    if major == 1:
        return render_config_v2(p, s)
    if major == 2:
        return render_config_v3(p, s)
    raise ValueError(f"no config template for containerd major version {major}")
