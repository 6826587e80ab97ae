"""The node cache volume: a home on each NVMe node's own disks for the caches of the cold tier (the JuiceFS client's
block cache) and of Fluid's datasets, so that neither fills the node's root disk.

Decision (issue 43, from the JuiceFS CSI and TopoLVM docs). JuiceFS CSI puts the cache where the mount option
``cache-dir`` points, as a hostPath of the mount pod; without a directory on a data disk it lands in
``/var/jfsCache`` on the root partition ("Cache" guide). Its other way, a PVC as cache path, needs a claim in the
mount pods' namespace that every node's mount pod can use: the hot tier's TopoLVM volumes are node-local
(ReadWriteOnce) and bind when the scheduler picks a node, which never happens for the mount pods (the CSI node
creates them with ``nodeName`` set), so a TopoLVM claim cannot be their cache. The node's NVMe belongs to TopoLVM's
volume group; TopoLVM manages only the logical volumes it creates and counts the group's free space for the rest. So
the platform carves a logical volume of its own out of the hot tier's volume group on each node
(``localNvme.cacheVolume``: ``sizeGib``), formats it and mounts it at ``path`` on the host, from a DaemonSet on the
TopoLVM nodes; the JuiceFS cache (``juicefs.cache.cacheDir``) and Fluid's SSD cache levels live under ``path`` (an
HDD level names a disk of its own), and their sizes must fit it (refused at render otherwise, naming both). The
DaemonSet's init container runs the host's own ``lvm``, ``mkfs`` and ``mount`` (``nsenter`` into PID 1's namespaces,
as TopoLVM's lvmd runs lvm): the mount belongs to the host, survives the pod, and is made again at each boot (the
pod restarts).
"""

from __future__ import annotations

import shlex
from typing import Any, Literal

import pulumi
import pulumi_kubernetes as k8s
from pydantic import Field

from ..common import kube, versions
from ..common.sections import Problem, Section

CACHE_PATH = "/var/lib/ai-storage-cache"
LV_NAME = "ai-storage-cache"
SKIPS = {
    "CKV_K8S_16": "it runs the host's lvm, mkfs and mount to give the caches a volume of their own: privileged",
    "CKV_K8S_17": "nsenter into PID 1's namespaces needs the host's PID namespace",
    "CKV_K8S_20": "privileged: the node's own lvm and mount",
    "CKV_K8S_23": "privileged host preparation runs as root",
    "CKV_K8S_37": "privileged host preparation keeps its capabilities",
    "CKV_K8S_40": "privileged host preparation runs as root",
    "CKV_K8S_22": "its root filesystem is never written (the work happens in the host's mount namespace)",
    "CKV_K8S_28": "privileged host preparation keeps its capabilities",
    "CKV_K8S_39": "privileged host preparation needs SYS_ADMIN (lvm, mount)",
    "CKV_K8S_8": "the pause container only holds the pod: nothing for a liveness probe to check",
    "CKV_K8S_9": "the pause container only holds the pod: nothing for a readiness probe to check",
}
"""The checkov checks the preparation's DaemonSet fails on purpose, with why."""


class CacheVolumeSettings(Section):
    """A logical volume of its own on each NVMe node for the JuiceFS and Fluid caches (see the module's docs)."""

    enabled: bool = True
    """Carve it out of the volume group and mount it (off: give `juicefs.cache.cacheDir` a data disk yourself)."""
    size_gib: int = Field(1700, ge=1, le=1_000_000)
    """Size of the volume in GiB: the JuiceFS cache (with its free-space ratio) and Fluid's SSD levels fit. Growing
    it extends each node's volume and filesystem online; a smaller value is never applied to a node (runbook)."""
    device_class: str | None = None
    """TopoLVM device class whose volume group holds it (unset: the default class, the hot tier's)."""
    path: str = Field(CACHE_PATH, pattern=r"^/[A-Za-z0-9._/-]+$")
    """Where it is mounted on each node; the caches' directories are under it."""
    filesystem: Literal["xfs", "ext4"] = "xfs"
    """Filesystem it is formatted with."""


def prepare_script(volume_group: str, s: CacheVolumeSettings) -> str:
    """The host's commands, idempotent at every start: create the volume once, extend it when ``sizeGib`` grew
    (lvextend, then the filesystem online), never shrink it (xfs cannot; the node keeps the bigger volume and says
    so), format it once, mount it."""
    vg, lv, path = shlex.quote(volume_group), LV_NAME, shlex.quote(s.path)
    mkfs = "mkfs.xfs -q" if s.filesystem == "xfs" else "mkfs.ext4 -q"
    grow = f"xfs_growfs {path} >/dev/null" if s.filesystem == "xfs" else f"resize2fs /dev/{vg}/{lv} >/dev/null 2>&1"
    want = s.size_gib * 2**30
    kept = (
        f"node cache volume {vg}/{lv} kept at $have bytes, above sizeGib {s.size_gib}: a volume is never shrunk "
        f"(docs/runbook.md#shrink-the-node-cache-volume)"
    )
    return "\n".join(
        [
            "set -eu",
            f"if ! lvm lvs {vg}/{lv} >/dev/null 2>&1; then lvm lvcreate -y -n {lv} -L {s.size_gib}g {vg}; fi",
            f"have=$(lvm lvs --noheadings --nosuffix --units b -o lv_size {vg}/{lv} | tr -d ' ')",
            f'if [ "$have" -lt {want} ]; then lvm lvextend -L {s.size_gib}g {vg}/{lv}; fi',
            f'if [ "$have" -gt {want} ]; then echo "{kept}" >&2; fi',
            f"if ! blkid /dev/{vg}/{lv} >/dev/null 2>&1; then {mkfs} /dev/{vg}/{lv}; fi",
            f"mkdir -p {path}",
            f"mountpoint -q {path} || mount /dev/{vg}/{lv} {path}",
            grow,
            f"mkdir -p {path}/juicefs {path}/fluid",
        ]
    )


def daemonset_spec(volume_group: str, s: CacheVolumeSettings, node_selector: dict[str, str], tolerations: list[Any]):
    """The DaemonSet: the preparation as an init container, then a pause container that keeps the pod (and so a
    rerun at each boot) on the node."""
    selector = kube.labels("node-cache", "preparation")
    host = ["nsenter", "--target", "1", "--mount", "--uts", "--ipc", "--net", "--pid", "--", "/bin/sh", "-c"]
    resources = {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"cpu": "500m", "memory": "256Mi"}}
    return {
        "selector": {"matchLabels": selector},
        "template": {
            "metadata": {"labels": selector},
            "spec": {
                "hostPID": True,
                "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
                "priorityClassName": "system-node-critical",
                "automountServiceAccountToken": False,
                "nodeSelector": dict(node_selector),
                "tolerations": list(tolerations),
                "initContainers": [
                    {
                        "name": "prepare",
                        "image": versions.TOPOLVM_IMAGE,
                        "imagePullPolicy": "Always",
                        "command": [*host, prepare_script(volume_group, s)],
                        "securityContext": {"privileged": True},
                        "resources": resources,
                    }
                ],
                "containers": [
                    {
                        "name": "hold",
                        "image": versions.PAUSE_IMAGE,
                        "imagePullPolicy": "Always",
                        "securityContext": {**kube.restricted_container(65535)},
                        "resources": {
                            "requests": {"cpu": "1m", "memory": "8Mi"},
                            "limits": {"cpu": "10m", "memory": "16Mi"},
                        },
                    }
                ],
            },
        },
    }


def node_cache(
    name: str,
    volume_group: str,
    s: CacheVolumeSettings,
    namespace: pulumi.Input[str],
    node_selector: dict[str, str],
    tolerations: list[Any],
    parent: pulumi.Resource,
) -> k8s.apps.v1.DaemonSet:
    """The preparation's DaemonSet in TopoLVM's (privileged) namespace, and a NetworkPolicy that isolates its pods
    (they need no traffic: the host's lvm and mount, then a pause container)."""
    isolated = {"podSelector": {"matchLabels": kube.labels("node-cache", "preparation")}}
    k8s.networking.v1.NetworkPolicy(
        f"{name}-node-cache-isolated",
        metadata={"name": "node-cache", "namespace": namespace, "labels": kube.labels("node-cache", "isolation")},
        spec={**isolated, "policyTypes": ["Ingress", "Egress"]},
        opts=pulumi.ResourceOptions(parent=parent),
    )
    metadata = {
        "name": "node-cache",
        "namespace": namespace,
        "labels": kube.labels("node-cache", "preparation"),
        "annotations": kube.skip_annotations({"CKV_K8S_43": kube.CHECKOV_SKIPS["CKV_K8S_43"], **SKIPS}),
    }
    spec = daemonset_spec(volume_group, s, node_selector, tolerations)
    return k8s.apps.v1.DaemonSet(
        f"{name}-node-cache", metadata=metadata, spec=spec, opts=pulumi.ResourceOptions(parent=parent)
    )


def _under(path: str, home: str) -> bool:
    return path == home or path.startswith(home.rstrip("/") + "/")


def cache_home_problems(
    home: CacheVolumeSettings | None, juicefs: Any, fluid_levels: list[tuple[str, Any]], team_mib: int = 0
) -> list[Problem]:
    """The caches live on the node cache volume and fit it: ``juicefs`` (its CacheSettings, or None when the cold
    tier has no JuiceFS client), ``fluid_levels`` (``(key, CacheLevel)`` of every Fluid dataset), ``team_mib`` (the
    teams' own shares of the JuiceFS cache, ``team_io``); ``home`` None when the stack has no cache volume (then no
    cache may stay on JuiceFS's root-disk default)."""
    found = []
    if home is None:
        defaults = ("/var/jfsCache", CACHE_PATH)  # JuiceFS's own and the platform's: the root disk, volume off
        if juicefs is not None and any(_under(d, root) for d in juicefs.cache_dir.split(":") for root in defaults):
            hint = "enable localNvme.cacheVolume, or name where your node preparation mounts a data disk"
            found.append(
                Problem("juicefs.cache.cacheDir", "expected a directory on a data disk", juicefs.cache_dir, hint)
            )
        return found
    elsewhere = [d for d in (juicefs.cache_dir.split(":") if juicefs is not None else []) if not _under(d, home.path)]
    if elsewhere:
        hint = f"use {home.path}/juicefs (the node cache volume); elsewhere the cache lands on the node's root disk"
        found.append(
            Problem("juicefs.cache.cacheDir", f"expected directories under {home.path}", juicefs.cache_dir, hint)
        )
    disk_levels = [(key, level) for key, level in fluid_levels if level.medium == "SSD"]  # HDD: disks of its own
    for key, level in disk_levels:
        if not _under(level.path, home.path):
            hint = f"use {home.path}/fluid (the node cache volume); elsewhere the cache lands on the node's root disk"
            found.append(Problem(f"{key}.path", f"expected a directory under {home.path}", level.path, hint))
    fluid_gib = sum(kube.quantity_bytes(level.quota) for _, level in disk_levels) / 2**30
    cache_mib, kept_free = (juicefs.cache_size_mib, juicefs.free_space_ratio) if juicefs is not None else (0, 0.0)
    juicefs_gib = (cache_mib + team_mib) / 1024 / (1 - kept_free)
    if juicefs_gib + fluid_gib > home.size_gib:
        teams = f" and the teams' shares {team_mib} MiB" if team_mib else ""
        arithmetic = (
            f"the JuiceFS cache {cache_mib} MiB{teams} with {kept_free:g} kept free needs {juicefs_gib:,.0f} GiB, "
            f"Fluid's SSD levels {fluid_gib:,.0f} GiB: {juicefs_gib + fluid_gib:,.0f} GiB"
        )
        hint = "grow localNvme.cacheVolume.sizeGib or shrink juicefs.cache.cacheSizeMib / the Fluid quotas" + (
            " / the teams' io.cacheSizeMib" if team_mib else ""
        )
        found.append(Problem("localNvme.cacheVolume.sizeGib", f"expected at least {arithmetic}", home.size_gib, hint))
    return found


def platform_cache_problems(s: Any) -> list[Problem]:
    """``cache_home_problems`` of a stack's settings (``PlatformSettings``)."""
    nvme = s.local_nvme
    home = nvme.cache_volume if nvme.enabled and nvme.cache_volume.enabled else None
    juicefs = s.juicefs.cache if s.juicefs.enabled and s.tiers.cold != "none" else None
    datasets = s.fluid.enabled_datasets()
    levels = [(f"fluid.datasets[{i}].cache[{j}]", c) for i, d in enumerate(datasets) for j, c in enumerate(d.cache)]
    shares = sum(t.io.cache_size_mib or 0 for t in s.teams.workspaces if t.datasets or t.space) if juicefs else 0
    return cache_home_problems(home, juicefs, levels, shares)
