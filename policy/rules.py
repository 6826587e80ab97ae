"""The platform's rules as pulumi-policy (CrossGuard) policies, one per rule.

Every rule reads only what ``pulumi preview`` shows a policy: the Kubernetes object a resource registers (its
``kind`` and fields, whatever the Pulumi type token) and, for the Ceph rule, the stack name in the URN. Secret
values are not relied on (they are redacted or unknown at preview).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator, Mapping
from typing import Any

from pulumi_policy import (
    EnforcementLevel,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)

TIER = "ai-storage-platform/tier"
ACCESS_MODE = "ai-storage-platform/access-mode"
SHARED_TIERS = ("warm", "cold", "checkpoint")
DURABLE_TIERS = ("cold", "checkpoint")
LOCAL_PROVISIONERS = ("topolvm.io", "kubernetes.io/no-provisioner")
RWO_ONLY_PROVISIONERS = re.compile(r"^(topolvm\.io|kubernetes\.io/no-provisioner|.*rbd\.csi\.ceph\.com)$")
RESERVED_QUEUES = ("default", "root")
REDIS_DURABILITY = {"--appendonly": "yes", "--maxmemory-policy": "noeviction"}
DATA_PATH, CHECKPOINT_PATH = "/data", "/checkpoints"

_DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")
FLOATING = re.compile(r"(?i)^(latest|stable|main|master|edge|nightly)$")
"""Tags (and chart versions) that move."""


# ---------------------------------------------------------------- helpers


def kind(props: Mapping[str, Any]) -> tuple[str, str]:
    """(API group, kind) of a Kubernetes object's props; ("", "") for anything else."""
    group = str(props.get("apiVersion") or "").rpartition("/")[0]
    return group, str(props.get("kind") or "")


def annotations(props: Mapping[str, Any]) -> Mapping[str, str]:
    return (props.get("metadata") or {}).get("annotations") or {}


def stack_of(urn: str) -> str:
    """The stack name in a URN (``urn:pulumi:<stack>::<project>::<type>::<name>``)."""
    return urn.split("::", 1)[0].removeprefix("urn:pulumi:")


def image_problem(image: str) -> str | None:
    """Why ``image`` is not pinned to a fixed tag or a digest, or None."""
    if _DIGEST.search(image):
        return None
    last = image.rsplit("/", 1)[-1]
    if ":" not in last:
        return f"{image!r} has no tag"
    tag = last.rsplit(":", 1)[1]
    return f"{image!r} uses the floating tag {tag!r}" if FLOATING.match(tag) else None


def pin_problems(value: Any) -> list[str]:
    """``path: why`` for every ``image`` string and ``tag`` in ``value`` (an object or chart values) that floats."""
    problems = []
    for path, key, sub in walk(value):
        if key == "image" and isinstance(sub, str):
            why = image_problem(sub)
        elif key == "tag" and isinstance(sub, str) and FLOATING.match(sub):
            why = f"tag {sub!r} floats"
        else:
            continue
        if why:
            problems.append(f"{path}: {why}")
    return problems


def walk(value: Any, path: str = "") -> Iterator[tuple[str, str, Any]]:
    """Every (path, key, value) of a nested mapping/list."""
    if isinstance(value, Mapping):
        for key, sub in value.items():
            yield f"{path}.{key}", str(key), sub
            yield from walk(sub, f"{path}.{key}")
    elif isinstance(value, list):
        for i, sub in enumerate(value):
            yield from walk(sub, f"{path}[{i}]")


def pod_specs(props: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    """Every pod spec (a mapping with ``containers``) anywhere in an object, templates included."""
    if isinstance(props.get("containers"), list):
        yield props
    for _, _, sub in walk(props):
        if isinstance(sub, Mapping) and isinstance(sub.get("containers"), list):
            yield sub


# ---------------------------------------------------------------- resource rules


def _local_volumes(args: ResourceValidationArgs, report: ReportViolation) -> None:
    props = args.props
    if kind(props) == ("storage.k8s.io", "StorageClass") and props.get("provisioner") in LOCAL_PROVISIONERS:
        mode = props.get("volumeBindingMode") or "Immediate"
        if mode != "WaitForFirstConsumer":
            report(f"local-volume StorageClass binds {mode}: set volumeBindingMode WaitForFirstConsumer", None)


def _shared_tiers(args: ResourceValidationArgs, report: ReportViolation) -> None:
    props = args.props
    if kind(props) != ("storage.k8s.io", "StorageClass"):
        return
    tier, mode = annotations(props).get(TIER), annotations(props).get(ACCESS_MODE)
    if tier not in SHARED_TIERS and mode != "ReadWriteMany":
        return
    if mode != "ReadWriteMany":
        report(f"the {tier} tier is shared: annotate {ACCESS_MODE}=ReadWriteMany on an RWX backend, not {mode!r}", None)
    if RWO_ONLY_PROVISIONERS.match(str(props.get("provisioner"))):
        report(f"{props.get('provisioner')} volumes are ReadWriteOnce: a shared (RWX) tier needs another backend", None)


def _durable_tiers(args: ResourceValidationArgs, report: ReportViolation) -> None:
    props = args.props
    tier = annotations(props).get(TIER)
    if kind(props) == ("storage.k8s.io", "StorageClass") and tier in DURABLE_TIERS:
        policy = props.get("reclaimPolicy") or "Delete"
        if policy != "Retain":
            report(f"the {tier} tier is durable: reclaimPolicy {policy} deletes data with its claim; use Retain", None)


def _pool_sizes(props: Mapping[str, Any]) -> Iterator[tuple[str, Any]]:
    """(path, replicated.size) of every pool in a CephBlockPool, CephFilesystem or CephObjectStore spec."""
    spec = props.get("spec") or {}
    pools = {"spec": spec} if kind(props)[1] == "CephBlockPool" else {}
    pools |= {f"spec.{k}": spec[k] for k in ("metadataPool", "dataPool") if k in spec}
    pools |= {f"spec.dataPools[{i}]": p for i, p in enumerate(spec.get("dataPools") or [])}
    for path, pool in pools.items():
        if "erasureCoded" not in pool:
            yield path, (pool.get("replicated") or {}).get("size")


def _prod_ceph_replicas(args: ResourceValidationArgs, report: ReportViolation) -> None:
    props = args.props
    group, what = kind(props)
    if group != "ceph.rook.io" or what not in ("CephBlockPool", "CephFilesystem", "CephObjectStore"):
        return
    if not stack_of(args.urn).startswith("prod"):
        return
    for path, size in _pool_sizes(props):
        if not isinstance(size, int) or size < 3:
            report(f"{path}.replicated.size is {size!r}: prod stacks keep at least 3 copies of every pool", None)


def _redis_durable(args: ResourceValidationArgs, report: ReportViolation) -> None:
    for pod in pod_specs(args.props):
        for container in pod["containers"]:
            image = str(container.get("image") or "").split("@")[0].rsplit("/", 1)[-1].split(":")[0]
            words = [str(w) for w in (container.get("command") or []) + (container.get("args") or [])]
            # Every container of the redis image is a data node unless it runs a Sentinel (which stores no data).
            sentinel = any(w.endswith("redis-sentinel") or w in ("sentinel", "--sentinel") for w in words)
            if image != "redis" or sentinel:
                continue
            flags = dict(itertools.pairwise(words))
            for flag, value in REDIS_DURABILITY.items():
                if flags.get(flag) != value:
                    report(
                        f"redis-server in {container.get('name')!r} must run with {flag} {value} on its "
                        "command line (JuiceFS loses metadata if Redis evicts keys or skips the AOF)",
                        None,
                    )


def _no_latest(args: ResourceValidationArgs, report: ReportViolation) -> None:
    for problem in pin_problems(args.props):
        report(f"{problem.lstrip('.')}; pin an exact version in components/common/versions.py", None)


def _volcano_queues(args: ResourceValidationArgs, report: ReportViolation) -> None:
    props = args.props
    name = (props.get("metadata") or {}).get("name")
    if kind(props) == ("scheduling.volcano.sh", "Queue") and name in RESERVED_QUEUES:
        report(f"Volcano creates and owns the {name!r} queue: managing it here fights the scheduler", None)


# ---------------------------------------------------------------- stack rule


def claim_classes(resources: list[Any]) -> dict[str, set[str]]:
    """StorageClass names of the stack's PersistentVolumeClaims, by claim name."""
    found: dict[str, set[str]] = {}
    for r in resources:
        if kind(r.props) == ("", "PersistentVolumeClaim"):
            name = (r.props.get("metadata") or {}).get("name")
            found.setdefault(name, set()).add((r.props.get("spec") or {}).get("storageClassName"))
    return found


def apart_problems(pod: Mapping[str, Any], classes: Mapping[str, set[str]]) -> list[str]:
    """Why the volumes a pod mounts at /data and /checkpoints could share a StorageClass, if they could."""
    volumes = {v.get("name"): v for v in pod.get("volumes") or []}
    mounted: dict[str, set[str]] = {}
    for container in pod["containers"]:
        for mount in container.get("volumeMounts") or []:
            if mount.get("mountPath") in (DATA_PATH, CHECKPOINT_PATH):
                mounted.setdefault(mount["mountPath"], set()).add(mount.get("name"))
    if len(mounted) < 2:
        return []
    claims, storage = {}, {}
    for path, names in mounted.items():
        for name in names:
            volume = volumes.get(name) or {}
            claim = (volume.get("persistentVolumeClaim") or {}).get("claimName")
            template = ((volume.get("ephemeral") or {}).get("volumeClaimTemplate") or {}).get("spec") or {}
            claims.setdefault(path, set()).add(claim)
            known = classes.get(claim, set()) if claim else {template.get("storageClassName")}
            storage.setdefault(path, set()).update(known - {None})
    same_claim = (claims[DATA_PATH] & claims[CHECKPOINT_PATH]) - {None}
    same_class = storage[DATA_PATH] & storage[CHECKPOINT_PATH]
    problems = [f"/data and /checkpoints mount the same claim {c!r}" for c in sorted(same_claim)]
    problems += [f"/data and /checkpoints both use StorageClass {c!r}" for c in sorted(same_class)]
    return problems


def _data_apart_from_checkpoints(args: StackValidationArgs, report: ReportViolation) -> None:
    classes = claim_classes(list(args.resources))
    for r in args.resources:
        for pod in pod_specs(r.props):
            for problem in apart_problems(pod, classes):
                report(f"{problem}: training reads and checkpoint bursts must not share a tier", r.urn)


# ---------------------------------------------------------------- the policies

MANDATORY = EnforcementLevel.MANDATORY

POLICIES: list[ResourceValidationPolicy | StackValidationPolicy] = [
    ResourceValidationPolicy(
        "local-volumes-wait-for-first-consumer",
        "Local-volume StorageClasses (TopoLVM) bind WaitForFirstConsumer, so pods land where their volume is.",
        _local_volumes,
        MANDATORY,
    ),
    ResourceValidationPolicy(
        "shared-tiers-are-rwx",
        "The warm, cold and checkpoint tiers (and any class annotated ReadWriteMany) are RWX-capable.",
        _shared_tiers,
        MANDATORY,
    ),
    ResourceValidationPolicy(
        "durable-tiers-retain",
        "The cold and checkpoint tiers keep data when a claim is deleted (reclaimPolicy Retain).",
        _durable_tiers,
        MANDATORY,
    ),
    ResourceValidationPolicy(
        "prod-ceph-pools-keep-three-copies",
        "On stacks named prod*, every Ceph block pool, filesystem and object store pool has replicated.size >= 3.",
        _prod_ceph_replicas,
        MANDATORY,
    ),
    ResourceValidationPolicy(
        "redis-noeviction-and-aof",
        "Redis data nodes run with --appendonly yes and --maxmemory-policy noeviction on their command line.",
        _redis_durable,
        MANDATORY,
    ),
    ResourceValidationPolicy(
        "no-floating-image-tags",
        "Every image is pinned to an exact tag or digest (no latest).",
        _no_latest,
        MANDATORY,
    ),
    ResourceValidationPolicy(
        "volcano-reserved-queues",
        "The default and root Volcano Queues are Volcano's own and are never managed here.",
        _volcano_queues,
        MANDATORY,
    ),
    StackValidationPolicy(
        "data-and-checkpoints-apart",
        "Pods never mount training data (/data) and checkpoints (/checkpoints) from the same claim or StorageClass.",
        _data_apart_from_checkpoints,
        MANDATORY,
    ),
]
"""Every rule of the pack (``__main__.py`` serves them)."""
