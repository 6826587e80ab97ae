"""The Pod Security Standards (https://kubernetes.io/docs/concepts/security/pod-security-standards/, policy version
v1.33, as k8s.io/pod-security-admission checks them), field by field, for pods and pod templates.

``violations(pod_spec, annotations, level)`` lists every control the spec breaks at ``baseline`` or ``restricted``
(``privileged`` checks nothing); each entry names the control and the fields, as the admission's message does.
Windows pods (``spec.os.name: windows``) are out of scope: the platform runs none.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, Literal

Level = Literal["privileged", "baseline", "restricted"]
Spec = Mapping[str, Any]

BASELINE_CAPABILITIES = frozenset(
    {
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    }
)
"""Capabilities baseline lets a container add (the Docker defaults)."""
SAFE_SYSCTLS = frozenset(
    {
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
    }
)
"""The safe sysctls of baseline (v1.33)."""
SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"})
RESTRICTED_VOLUMES = frozenset(
    {
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "persistentVolumeClaim",
        "projected",
        "secret",
        "image",
    }
)
"""Volume sources restricted admits (``image`` from v1.33, kubernetes#130394)."""


def containers(spec: Spec) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(``kind[name]``, container) for containers, init containers and ephemeral containers."""
    for kind in ("containers", "initContainers", "ephemeralContainers"):
        for c in spec.get(kind) or []:
            yield f"{kind}[{c.get('name')}]", c


def _sc(c: Mapping[str, Any]) -> Mapping[str, Any]:
    return c.get("securityContext") or {}


# ---------------------------------------------------------------- baseline


def host_process(spec: Spec, _: Mapping[str, str]) -> list[str]:
    where = [
        f"{n}.securityContext.windowsOptions.hostProcess"
        for n, c in containers(spec)
        if (_sc(c).get("windowsOptions") or {}).get("hostProcess")
    ]
    if ((spec.get("securityContext") or {}).get("windowsOptions") or {}).get("hostProcess"):
        where.insert(0, "spec.securityContext.windowsOptions.hostProcess")
    return where


def host_namespaces(spec: Spec, _: Mapping[str, str]) -> list[str]:
    return [f"spec.{k}" for k in ("hostNetwork", "hostPID", "hostIPC") if spec.get(k)]


def privileged(spec: Spec, _: Mapping[str, str]) -> list[str]:
    return [f"{n}.securityContext.privileged" for n, c in containers(spec) if _sc(c).get("privileged")]


def baseline_capabilities(spec: Spec, _: Mapping[str, str]) -> list[str]:
    return [
        f"{n}.securityContext.capabilities.add={cap}"
        for n, c in containers(spec)
        for cap in (_sc(c).get("capabilities") or {}).get("add") or []
        if cap not in BASELINE_CAPABILITIES
    ]


def host_path_volumes(spec: Spec, _: Mapping[str, str]) -> list[str]:
    return [f"spec.volumes[{v.get('name')}].hostPath" for v in spec.get("volumes") or [] if "hostPath" in v]


def host_ports(spec: Spec, _: Mapping[str, str]) -> list[str]:
    return [
        f"{n}.ports.hostPort={p['hostPort']}"
        for n, c in containers(spec)
        for p in c.get("ports") or []
        if p.get("hostPort") not in (None, 0)
    ]


def app_armor(spec: Spec, annotations: Mapping[str, str]) -> list[str]:
    def bad(profile: Any) -> bool:
        return isinstance(profile, Mapping) and profile.get("type") not in (None, "RuntimeDefault", "Localhost")

    where = []
    if bad((spec.get("securityContext") or {}).get("appArmorProfile")):
        where.append("spec.securityContext.appArmorProfile.type")
    where += [
        f"{n}.securityContext.appArmorProfile.type" for n, c in containers(spec) if bad(_sc(c).get("appArmorProfile"))
    ]
    prefix = "container.apparmor.security.beta.kubernetes.io/"
    where += [
        f"annotation {k}={v}"
        for k, v in annotations.items()
        if k.startswith(prefix) and not (v == "runtime/default" or v.startswith("localhost/"))
    ]
    return where


def se_linux(spec: Spec, _: Mapping[str, str]) -> list[str]:
    def bad(options: Any) -> list[str]:
        if not isinstance(options, Mapping):
            return []
        out = [f"type={options['type']}"] if options.get("type", "") not in SELINUX_TYPES else []
        return out + [f"{k}={options[k]}" for k in ("user", "role") if options.get(k, "")]

    where = [
        f"spec.securityContext.seLinuxOptions.{b}"
        for b in bad((spec.get("securityContext") or {}).get("seLinuxOptions"))
    ]
    return where + [
        f"{n}.securityContext.seLinuxOptions.{b}"
        for n, c in containers(spec)
        for b in bad(_sc(c).get("seLinuxOptions"))
    ]


def proc_mount(spec: Spec, _: Mapping[str, str]) -> list[str]:
    return [
        f"{n}.securityContext.procMount={_sc(c)['procMount']}"
        for n, c in containers(spec)
        if _sc(c).get("procMount") not in (None, "Default")
    ]


def baseline_seccomp(spec: Spec, _: Mapping[str, str]) -> list[str]:
    where = []
    if ((spec.get("securityContext") or {}).get("seccompProfile") or {}).get("type") == "Unconfined":
        where.append("spec.securityContext.seccompProfile.type=Unconfined")
    return where + [
        f"{n}.securityContext.seccompProfile.type=Unconfined"
        for n, c in containers(spec)
        if (_sc(c).get("seccompProfile") or {}).get("type") == "Unconfined"
    ]


def sysctls(spec: Spec, _: Mapping[str, str]) -> list[str]:
    found = (spec.get("securityContext") or {}).get("sysctls") or []
    return [f"spec.securityContext.sysctls={s.get('name')}" for s in found if s.get("name") not in SAFE_SYSCTLS]


# ---------------------------------------------------------------- restricted


def volume_types(spec: Spec, _: Mapping[str, str]) -> list[str]:
    return [
        f"spec.volumes[{v.get('name')}].{source}"
        for v in spec.get("volumes") or []
        for source in v
        if source != "name" and source not in RESTRICTED_VOLUMES
    ]


def privilege_escalation(spec: Spec, _: Mapping[str, str]) -> list[str]:
    return [
        f"{n}.securityContext.allowPrivilegeEscalation != false"
        for n, c in containers(spec)
        if _sc(c).get("allowPrivilegeEscalation") is not False
    ]


def run_as_non_root(spec: Spec, _: Mapping[str, str]) -> list[str]:
    pod = (spec.get("securityContext") or {}).get("runAsNonRoot")
    where = ["spec.securityContext.runAsNonRoot=false"] if pod is False else []
    for n, c in containers(spec):
        own = _sc(c).get("runAsNonRoot")
        if own is False or (own is None and pod is not True):
            where.append(f"{n}.securityContext.runAsNonRoot != true")
    return where


def run_as_user(spec: Spec, _: Mapping[str, str]) -> list[str]:
    where = ["spec.securityContext.runAsUser=0"] if (spec.get("securityContext") or {}).get("runAsUser") == 0 else []
    return where + [f"{n}.securityContext.runAsUser=0" for n, c in containers(spec) if _sc(c).get("runAsUser") == 0]


def restricted_seccomp(spec: Spec, _: Mapping[str, str]) -> list[str]:
    allowed = ("RuntimeDefault", "Localhost")
    pod = ((spec.get("securityContext") or {}).get("seccompProfile") or {}).get("type")
    where = [f"spec.securityContext.seccompProfile.type={pod}"] if pod is not None and pod not in allowed else []
    for n, c in containers(spec):
        own = (_sc(c).get("seccompProfile") or {}).get("type")
        if (own is not None and own not in allowed) or (own is None and pod not in allowed):
            where.append(f"{n}.securityContext.seccompProfile.type={own}")
    return where


def restricted_capabilities(spec: Spec, _: Mapping[str, str]) -> list[str]:
    where = []
    for n, c in containers(spec):
        caps = _sc(c).get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            where.append(f"{n}.securityContext.capabilities.drop must include ALL")
        where += [
            f"{n}.securityContext.capabilities.add={cap}" for cap in caps.get("add") or [] if cap != "NET_BIND_SERVICE"
        ]
    return where


Check = Callable[[Spec, Mapping[str, str]], list[str]]
BASELINE: dict[str, Check] = {
    "HostProcess": host_process,
    "Host Namespaces": host_namespaces,
    "Privileged Containers": privileged,
    "Capabilities": baseline_capabilities,
    "HostPath Volumes": host_path_volumes,
    "Host Ports": host_ports,
    "AppArmor": app_armor,
    "SELinux": se_linux,
    "/proc Mount Type": proc_mount,
    "Seccomp": baseline_seccomp,
    "Sysctls": sysctls,
}
RESTRICTED: dict[str, Check] = {
    "Volume Types": volume_types,
    "Privilege Escalation": privilege_escalation,
    "Running as Non-root": run_as_non_root,
    "Running as Non-root user": run_as_user,
    "Seccomp (restricted)": restricted_seccomp,
    "Capabilities (restricted)": restricted_capabilities,
}
"""Restricted's controls on top of baseline's (baseline's Seccomp and Capabilities are then implied)."""


def checks(level: Level) -> dict[str, Check]:
    return {} if level == "privileged" else {**BASELINE, **(RESTRICTED if level == "restricted" else {})}


def violations(spec: Spec, annotations: Mapping[str, str] | None = None, level: Level = "restricted") -> list[str]:
    """Every control of ``level`` the pod spec breaks, as ``control: field, field``."""
    found = []
    for control, check in checks(level).items():
        where = check(spec, annotations or {})
        if where:
            found.append(f"{control}: {', '.join(where)}")
    return found


# ---------------------------------------------------------------- where pods come from


def pod_templates(obj: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """(path, pod template or pod) of every pod an object makes: a Pod itself, a workload's template, a CronJob's
    job template, a training runtime's replicated jobs, a PyTorchJob's/TFJob's replicas, a Volcano Job's tasks."""
    kind, spec = obj.get("kind"), obj.get("spec") or {}
    if kind == "Pod":
        return [("", obj)]
    if kind == "Job" and obj.get("apiVersion", "").startswith("batch.volcano.sh/"):
        return [(f"spec.tasks[{t['name']}].template", t["template"]) for t in spec.get("tasks") or []]
    if kind in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"):
        return [("spec.template", spec["template"])]
    if kind == "CronJob":
        return [("spec.jobTemplate.spec.template", spec["jobTemplate"]["spec"]["template"])]
    if kind in ("ClusterTrainingRuntime", "TrainingRuntime"):
        jobs = spec["template"]["spec"]["replicatedJobs"]
        return [(f"replicatedJobs[{j['name']}]", j["template"]["spec"]["template"]) for j in jobs]
    if kind in ("PyTorchJob", "TFJob"):
        replicas = spec.get("pytorchReplicaSpecs") or spec.get("tfReplicaSpecs") or {}
        return [(f"replicaSpecs[{r}]", s["template"]) for r, s in replicas.items()]
    return []


def namespace_levels(namespace: Mapping[str, Any]) -> tuple[Level, Level]:
    """(enforce, warn) levels a Namespace's labels set (unset: privileged, as the admission's default)."""
    labels = (namespace.get("metadata") or {}).get("labels") or {}
    enforce = labels.get("pod-security.kubernetes.io/enforce", "privileged")
    return enforce, labels.get("pod-security.kubernetes.io/warn", enforce)
