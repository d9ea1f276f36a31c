"""The CRI requests the kubelet v1.32 builds for a pod: RunPodSandbox's PodSandboxConfig, CreateContainer's
ContainerConfig, UpdateContainerResources' resources. Every field below cites its source line (paths as in
kubelet_model.py's docstring: ``vendor/k8s.io/kubernetes/pkg/`` of kubeedge/kubeedge, kubelet v1.32.10).

The pods modelled are what the harness can run: host network (no CNI), no volumes, ports, env, probes,
lifecycle hooks or securityContext in the spec, a standalone kubelet (no API server: no service env vars,
kubelet_pods.go:649-664). Fields the kubelet sends that are *not* modelled, because they are files on the
kubelet's host that no CPU decision reads:
- ``mounts``: /etc/hosts of a host-network pod (kubelet_pods.go:255-265 shouldMountHostsFile) and the
  termination-log file (kuberuntime/kuberuntime_container.go:460-490);
- ``linux.security_context.supplemental_groups`` from volumes (none here).
Nothing is sent that the kubelet does not send: in particular no container carries a "container type";
the kubelet writes none (kuberuntime/labels.go:96-147), init and app containers are told apart only by
the order of its calls (kubelet_sync.py).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import kubelet_model as km

# k8s.io/kubelet/pkg/types/labels.go:21-24 (the vendored k8s.io/kubelet module)
POD_NAME_LABEL = "io.kubernetes.pod.name"
POD_NAMESPACE_LABEL = "io.kubernetes.pod.namespace"
POD_UID_LABEL = "io.kubernetes.pod.uid"
CONTAINER_NAME_LABEL = "io.kubernetes.container.name"
# kuberuntime/labels.go:32-40
POD_TERMINATION_GRACE_PERIOD = "io.kubernetes.pod.terminationGracePeriod"
CONTAINER_HASH = "io.kubernetes.container.hash"
CONTAINER_RESTART_COUNT = "io.kubernetes.container.restartCount"
CONTAINER_TERMINATION_MESSAGE_PATH = "io.kubernetes.container.terminationMessagePath"
CONTAINER_TERMINATION_MESSAGE_POLICY = "io.kubernetes.container.terminationMessagePolicy"
# apis/core/v1/defaults.go:97, :100 (SetDefaults_Container), :252-254 (30 s, v1.DefaultTerminationGracePeriodSeconds)
DEFAULT_TERMINATION_MESSAGE_PATH = "/dev/termination-log"
DEFAULT_TERMINATION_MESSAGE_POLICY = "File"
DEFAULT_TERMINATION_GRACE_PERIOD = 30
# securitycontext/util.go:196-227 defaultMaskedPaths / defaultReadonlyPaths (procMount Default)
MASKED_PATHS = (
    "/proc/asound", "/proc/acpi", "/proc/interrupts", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
    "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi", "/sys/firmware",
    "/sys/devices/virtual/powercap",
)
READONLY_PATHS = ("/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger")
MAX_DNS_NAMESERVERS = 3  # apis/core/validation/validation.go:3736
MAX_DNS_SEARCH_PATHS = 32  # :3738


@dataclass(frozen=True)
class Container:
    """One entry of pod.spec.containers or pod.spec.initContainers (``restartable``: restartPolicy Always,
    a sidecar; only for init containers)."""

    name: str
    resources: km.ContainerResources = field(default_factory=km.ContainerResources)
    image: str = "e2e.local/busybox:1"
    command: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    restartable: bool = False


@dataclass(frozen=True)
class Pod:
    name: str
    namespace: str
    uid: str
    containers: tuple[Container, ...]
    init_containers: tuple[Container, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    termination_grace_period: int = DEFAULT_TERMINATION_GRACE_PERIOD
    resources: km.PodLevel | None = None  # spec.resources as written (pod-level resources, KEP-2837)

    def __post_init__(self) -> None:
        names = [c.name for c in self.init_containers + self.containers]
        if len(set(names)) != len(names):
            raise ValueError(f"pod {self.name}: container names repeat: {names}")
        if any(c.restartable for c in self.containers):
            raise ValueError("restartable applies to init containers only")
        if self.level is not None:
            self.level.validate(self.totals())

    @property
    def level(self) -> km.PodLevel | None:
        """spec.resources after the API's defaulting (PodLevel.defaulted); None when the pod sets none."""
        return None if self.resources is None else self.resources.defaulted(self.totals())

    @property
    def qos(self) -> km.QOSClass:
        if self.level is not None:  # qos.go:97-110: the pod-level values alone
            return self.level.qos()
        return km.qos_class([c.resources for c in self.containers + self.init_containers])

    def container(self, name: str) -> Container:
        for c in self.init_containers + self.containers:
            if c.name == name:
                return c
        raise KeyError(f"pod {self.name} has no container {name!r}")

    def is_init(self, name: str) -> bool:
        return any(c.name == name for c in self.init_containers)

    def totals(self) -> km.PodContainers:
        return km.PodContainers(
            tuple(c.resources for c in self.containers),
            tuple((c.resources, c.restartable) for c in self.init_containers),
        )


@dataclass(frozen=True)
class Image:
    """What ImageStatus says about the image (kuberuntime_image.go:87-97 GetImageRef, helpers.go:133-152)."""

    ref: str  # ImageStatus image.id, e.g. "sha256:<config digest>"
    uid: int | None = 0  # image.uid; None with a user name; no user at all = root (helpers.go:150-151)
    username: str = ""


def hash_container(name: str, image: str) -> str:
    """The io.kubernetes.container.hash value: kubelet/container/helpers.go:114-130 HashContainer (fnv32a
    over DeepHashObject of json.Marshal({"image", "name"}), util/hash/hash.go:29-32: the spew "%#v" form
    of a []byte, k8s.io/apimachinery/pkg/util/dump/dump.go ForHash), hex (labels.go:115)."""
    # Go's json.Marshal sorts map keys, writes no spaces and escapes <, >, &, U+2028, U+2029
    text = json.dumps({"image": image, "name": name}, separators=(",", ":"), ensure_ascii=False)
    for ch, esc in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(ch, esc)
    spewed = "([]uint8)[" + " ".join(str(b) for b in text.encode()) + "]"
    h = 0x811C9DC5
    for b in spewed.encode():
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    return format(h, "x")


def pod_labels(pod: Pod) -> dict[str, str]:
    """kuberuntime/labels.go:75-88 newPodLabels: the pod's labels, then the three pod labels."""
    return {**pod.labels, POD_NAME_LABEL: pod.name, POD_NAMESPACE_LABEL: pod.namespace, POD_UID_LABEL: pod.uid}


def container_labels(pod: Pod, name: str) -> dict[str, str]:
    """kuberuntime/labels.go:96-104 newContainerLabels: the same four for every container, init or not."""
    return {POD_NAME_LABEL: pod.name, POD_NAMESPACE_LABEL: pod.namespace, POD_UID_LABEL: pod.uid,
            CONTAINER_NAME_LABEL: name}


def container_annotations(
    pod: Pod, c: Container, restart_count: int, device_annotations: Mapping[str, str] | None = None
) -> dict[str, str]:
    """kuberuntime/labels.go:107-147 newContainerAnnotations (no deletion grace period: the pod is not being
    deleted, :120-122; no preStop hook, :127-135; no ports, :137-144)."""
    out = dict(device_annotations or {})  # :111-113 device plugins' annotations, overridden below
    out[CONTAINER_HASH] = hash_container(c.name, c.image)  # :115
    out[CONTAINER_RESTART_COUNT] = str(restart_count)  # :116
    out[CONTAINER_TERMINATION_MESSAGE_PATH] = DEFAULT_TERMINATION_MESSAGE_PATH  # :117
    out[CONTAINER_TERMINATION_MESSAGE_POLICY] = DEFAULT_TERMINATION_MESSAGE_POLICY  # :118
    out[POD_TERMINATION_GRACE_PERIOD] = str(pod.termination_grace_period)  # :123-125
    return out


def log_directory(pod: Pod, node: km.Node) -> str:
    """kuberuntime/helpers.go:197-200 BuildPodLogsDirectory: <podLogsDir>/<namespace>_<name>_<uid>."""
    return f"{node.pod_logs_dir.rstrip('/')}/{pod.namespace}_{pod.name}_{pod.uid}"


def log_path(name: str, restart_count: int) -> str:
    """kuberuntime/helpers.go:187-189 buildContainerLogsPath, relative to the sandbox's log_directory."""
    return f"{name}/{restart_count}.log"


def dns_config(node: km.Node) -> dict[str, Any]:
    """network/dns/dns.go:385-448 GetPodDNS for a host-network pod with the default dnsPolicy ClusterFirst
    (defaults.go:244): podDNSHost (:310-317), the kubelet's resolv.conf as parsed by :225-274
    parseResolvConf, cut to the limits (:148-162; search paths over 255 characters or 2048 in all: not
    modelled). An empty resolvConf would send 127.0.0.1 and "." (:429-441): not modelled."""
    servers: list[str] = []
    searches: list[str] = []
    options: dict[str, str] = {}  # appendOptions (:356-372): one per name, the last wins
    for line in node.resolv_conf.split("\n"):
        fields = line.strip().split()
        if not fields or fields[0].startswith("#"):
            continue
        if fields[0] == "nameserver" and len(fields) >= 2:
            servers.append(fields[1])
        elif fields[0] == "search":  # the last line wins, "." dropped, trailing dots trimmed (:259-267)
            searches = [s.removesuffix(".") for s in fields[1:] if s != "."]
        elif fields[0] == "options":
            for opt in fields[1:]:
                options[opt.split(":")[0]] = opt
    out: dict[str, Any] = {}
    if servers:
        out["servers"] = servers[:MAX_DNS_NAMESERVERS]
    if searches:
        out["searches"] = searches[:MAX_DNS_SEARCH_PATHS]
    if options:
        out["options"] = list(options.values())  # a Go map: the kubelet's order is random
    return out


def namespace_options() -> dict[str, str]:
    """kuberuntime/util/util.go:107-127 NamespacesForPod for a host-network pod: ipc POD (:69-74), network
    NODE (:78-83), pid CONTAINER (:87-98); no userns options (UserNamespacesSupport off in v1.32,
    kubelet/userns/userns_manager.go:381-394, features/versioned_kube_features.go:809-812)."""
    return {"ipc": "POD", "network": "NODE", "pid": "CONTAINER"}


def sandbox_config(pod: Pod, node: km.Node, attempt: int = 0) -> dict[str, Any]:
    """kuberuntime/kuberuntime_sandbox.go:80-158 generatePodSandboxConfig (``attempt``: :89; 0 for a pod's
    first sandbox, one more for each re-created one, kuberuntime/util/util.go:43-61 PodSandboxChanged)."""
    cfg: dict[str, Any] = {
        "metadata": {"name": pod.name, "uid": pod.uid, "namespace": pod.namespace},  # :85-90
        "labels": pod_labels(pod),  # :91
        "dns_config": dns_config(node),  # :95-99
        # hostname: left empty for a host-network pod (:101-112)
        "log_directory": log_directory(pod, node),  # :114-115
        # port_mappings: none without container ports (:117-137)
    }
    if attempt:
        cfg["metadata"]["attempt"] = attempt
    if pod.annotations:
        cfg["annotations"] = dict(pod.annotations)  # :92, labels.go:91-93 (the pod's own, verbatim)
    cfg["linux"] = {  # :139-143, :164-232 generatePodSandboxLinuxConfig
        "cgroup_parent": km.cgroup_parent(pod.qos, pod.uid, node.cgroup_driver),  # :165-167
        "security_context": {  # :168-176; privileged only with a privileged container (:169): none here
            "seccomp": {"profile_type": "RuntimeDefault"},  # :173-175
            "namespace_options": namespace_options(),  # :196-200 (the API defaults securityContext: defaults.go:250)
        },
        # sysctls: an empty map (:179-186) is not sent
        "resources": km.sandbox_linux_resources(pod.totals(), node, pod.level),  # :154, kuberuntime_sandbox_linux.go:66
        "overhead": {},  # kuberuntime_sandbox_linux.go:67, :32-44: no RuntimeClass overhead, an empty message
    }
    return cfg


def container_security_context(node: km.Node, image: Image) -> dict[str, Any]:
    """kuberuntime/security_context.go:29-95 determineEffectiveSecurityContext with no securityContext in
    the pod or container (securitycontext/util.go:48-50: an empty one)."""
    sc: dict[str, Any] = {
        "namespace_options": namespace_options(),  # :60-64
        # :40, helpers.go:276-297 getSeccompProfile: no profile and seccompDefault off (kubelet default)
        "seccomp": {"profile_type": "Unconfined"},
        # :91-92, securitycontext/util.go:232-251
        "masked_paths": list(MASKED_PATHS)
        + [f"/sys/devices/system/cpu/cpu{n}/thermal_throttle" for n in node.thermal_throttle_cpus],
        "readonly_paths": list(READONLY_PATHS),
        # apparmor: none without a profile (:46, security/apparmor/helpers.go:54-70)
        # no_new_privs: false without allowPrivilegeEscalation (:89, securitycontext/util.go:179-191)
    }
    if image.uid is not None:  # :52-57: the image's user
        sc["run_as_user"] = {"value": image.uid} if image.uid else {}
    if image.username:
        sc["run_as_username"] = image.username
    return sc


def sidecar_floor(pod: Pod, c: Container) -> int | None:
    """The smallest app-container memory request, for a sidecar's oom_score_adj (qos/policy.go:89-108,
    qos/helpers.go:36-44; SidecarContainers is on in v1.32, features/versioned_kube_features.go:736-739).
    None for other containers, or while an incrementally built pod has no app container yet."""
    if not (c.restartable and pod.is_init(c.name)) or not pod.containers:
        return None
    return min(a.resources.effective().memory_request for a in pod.containers)


def container_config(
    pod: Pod,
    name: str,
    node: km.Node,
    image: Image,
    restart_count: int = 0,
    *,
    devices: Sequence[tuple[str, str, str]] = (),
    device_annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """kuberuntime/kuberuntime_container.go:332-393 generateContainerConfig. ``restart_count`` comes from
    startContainer (:217-240): 0 for a new container, the last instance's count + 1 for a restart.
    ``devices`` (container path, host path, permissions) and ``device_annotations`` stand for what device
    plugins put into the RunContainerOptions (:367, :409-419; labels.go:111-113)."""
    c = pod.container(name)
    cfg: dict[str, Any] = {
        "metadata": {"name": c.name},  # :357-360
        "image": {"image": image.ref, "user_specified_image": c.image},  # :361
        "labels": container_labels(pod, c.name),  # :365
        "annotations": container_annotations(pod, c, restart_count, device_annotations),  # :366
        "log_path": log_path(c.name, restart_count),  # :354, :370
    }
    if restart_count:
        cfg["metadata"]["attempt"] = restart_count  # :355, :359
    if c.command:
        cfg["command"] = list(c.command)  # :348, :362 (no $(VAR) to expand without env)
    if c.args:
        cfg["args"] = list(c.args)  # :363
    if devices:
        cfg["devices"] = [{"container_path": cp, "host_path": hp, "permissions": p} for cp, hp, p in devices]
    # working_dir, stdin, stdin_once, tty: zero without them in the spec (:364, :371-373); envs: none (:381-390)
    if pod.level is not None and pod.qos is km.QOSClass.BURSTABLE:
        # qos/policy.go:70-84: pod-level memory requests not given to containers are shared out among
        # them (remainingPodMemReqPerContainer) for a Burstable pod's oom_score_adj: not modelled
        raise NotImplementedError("oom_score_adj of a Burstable pod with pod-level resources is not modelled")
    cfg["linux"] = {  # :377, kuberuntime_container_linux.go:54-96
        "resources": km.container_linux_resources(
            c.resources, pod.qos, node, sidecar_floor_request=sidecar_floor(pod, c), level=pod.level
        ),  # :86
        "security_context": container_security_context(node, image),  # :81-88
    }
    # cm/internal_container_lifecycle_linux.go:31-51 PreCreateContainer adds cpuset_cpus/cpuset_mems only
    # from the static CPU / Memory Manager: with cpuManagerPolicy none (what nri-pinner needs) nothing
    return cfg


def resize_resources(pod: Pod, name: str, new: km.ContainerResources, node: km.Node) -> dict[str, Any]:
    """UpdateContainerResources' ``linux`` for an in-place resize (alpha in v1.32, the
    InPlacePodVerticalScaling gate is off by default: features/versioned_kube_features.go:413-415).
    kuberuntime_manager.go:797-874 updatePodContainerResources rebuilds the container with explicit cpu
    and memory requests and limits (:804-823) and sends kuberuntime_container.go:395-406 generateContainerResources
    (kuberuntime_container_linux.go:234-244): the whole LinuxContainerResources again, with the cpu request
    key always present. ``new`` holds both resources as they are after this step (the kubelet sends cpu
    and memory changes as separate calls, :764-794)."""
    c = pod.container(name)
    eff = new.effective()
    explicit = km.ContainerResources(eff.cpu_milli_request, eff.cpu_milli_limit, eff.memory_request, eff.memory_limit)
    # without a cpu request the key still exists (with 0): MilliCPUToShares(0), the same 2 shares as a nil one
    return km.container_linux_resources(explicit, pod.qos, node, sidecar_floor_request=sidecar_floor(pod, c),
                                        level=pod.level)  # generateLinuxContainerResources: getCPULimit too
