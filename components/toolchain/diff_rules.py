"""The rules the diff applies, each from its upstream source: which input changes make pulumi-kubernetes replace a
resource (``FORCE_NEW``, with its Secret and ConfigMap switches, and ``FORCE_NEW_OTHER``), which changes the API
server refuses (``REJECTED``), and which resources hold data; with the field paths the rules are matched on."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from .diff_model import Render

PULUMI_K8S = "https://github.com/pulumi/pulumi-kubernetes/blob/94977969d64112b04e19945818a7d5d5f38f631d/provider/pkg"
FORCE_NEW_SOURCE = f"{PULUMI_K8S}/provider/diff.go"
RELEASE_SOURCE = f"{PULUMI_K8S}/provider/helm_release.go"
PROVIDER_SOURCE = f"{PULUMI_K8S}/provider/provider.go"
K8S_VALIDATION = "https://github.com/kubernetes/kubernetes/blob/v1.33.0/pkg/apis"
STORAGE_VALIDATION = f"{K8S_VALIDATION}/storage/validation/validation.go"
CORE_VALIDATION = f"{K8S_VALIDATION}/core/validation/validation.go"
RANDOM_SOURCE = "https://github.com/hashicorp/terraform-provider-random/tree/v3.7.2/internal/provider"
RELEASE = "kubernetes:helm.sh/v3:Release"
PROVIDER = "pulumi:providers:kubernetes"
AWS_ELASTICACHE = "https://github.com/hashicorp/terraform-provider-aws/blob/main/internal/service/elasticache"

_SELECTOR = (".spec.selector",)  # diff.go also lists the selector's sub-fields: a prefix of them here
_STATEFULSET = (
    ".spec.podManagementPolicy",
    ".spec.revisionHistoryLimit",
    *_SELECTOR,
    ".spec.serviceName",
    ".spec.volumeClaimTemplates",
)
_JOB = (".spec.completions", ".spec.parallelism", *_SELECTOR, ".spec.template")
_BINDING = (".roleRef",)
# The field names as diff.go lists them, split from text.
_CONTAINER = (  # noqa: SIM905
    "args command env image imagePullPolicy lifecycle livenessProbe ports readinessProbe resources "
    "securityContext stdin stdinOnce terminationMessagePath terminationMessagePolicy tty volumeDevices "
    "volumeMounts workingDir"
).split()
_POD = tuple(
    f".spec.{f}"
    for f in (  # noqa: SIM905
        "affinity automountServiceAccountToken dnsConfig dnsPolicy enableServiceLinks hostAliases hostIPC "
        "hostNetwork hostPID hostname imagePullSecrets nodeName nodeSelector overhead preemptionPolicy "
        "priority priorityClassName readinessGates restartPolicy runtimeClassName schedulerName "
        "securityContext serviceAccount serviceAccountName shareProcessNamespace subdomain "
        "terminationGracePeriodSeconds volumes"
    ).split()
) + tuple(f".spec.{c}[*].{f}" for c in ("containers", "initContainers") for f in _CONTAINER)
_PV_SOURCES = (  # noqa: SIM905
    "awsElasticBlockStore azureDisk azureFile cephfs cinder csi fc flexVolume flocker gcePersistentDisk "
    "glusterfs hostPath iscsi local nfs photonPersistentDisk portworxVolume quobyte rbd scaleIO storageos "
    "vsphereVolume"
).split()

FORCE_NEW: dict[tuple[str, str, str], tuple[str, ...]] = {
    **{("apps", v, "StatefulSet"): _STATEFULSET for v in ("v1beta1", "v1beta2", "v1")},
    **{("apps", v, k): _SELECTOR for v in ("v1beta2", "v1") for k in ("DaemonSet", "Deployment")},
    ("", "v1", "PersistentVolume"): tuple(f".spec.{s}" for s in _PV_SOURCES),
    ("", "v1", "PersistentVolumeClaim"): (
        ".spec.accessModes",
        ".spec.selector",
        ".spec.storageClassName",
        ".spec.volumeName",
    ),
    ("", "v1", "Pod"): _POD,
    ("", "v1", "ResourceQuota"): (".spec.scopes",),
    ("", "v1", "Secret"): (".type",),
    ("", "v1", "Service"): (".spec.clusterIP",),
    ("policy", "v1beta1", "PodDisruptionBudget"): (".spec",),
    **{
        ("rbac.authorization.k8s.io", v, k): _BINDING
        for v in ("v1alpha1", "v1beta1", "v1")
        for k in ("ClusterRoleBinding", "RoleBinding")
    },
    ("storage.k8s.io", "v1", "StorageClass"): (".parameters", ".provisioner"),
    **{("batch", v, "Job"): _JOB for v in ("v1beta1", "v1", "v2alpha1")},
}
"""pulumi-kubernetes's replace rules by (group, version, kind), from ``forceNew`` in FORCE_NEW_SOURCE; every
object is also replaced on ``.metadata.name`` and ``.metadata.namespace``. A Secret replaces on any data change
unless the provider sets ``enableSecretMutable`` (and the Secret is not ``immutable``); a ConfigMap likewise with
``enableConfigMapMutable``. A ``*Patch`` resource replaces on its name and namespace only."""

REJECTED: dict[str, dict[str, str]] = {
    "StorageClass": {
        ".reclaimPolicy": STORAGE_VALIDATION,
        ".volumeBindingMode": STORAGE_VALIDATION,
    },
    "PersistentVolumeClaim": {
        ".spec.volumeMode": CORE_VALIDATION,
        ".spec.dataSource": CORE_VALIDATION,
        ".spec.dataSourceRef": CORE_VALIDATION,
    },
}
"""Fields pulumi-kubernetes updates in place but the API server refuses to change (``field is immutable``):
``pulumi up`` fails on them (``ValidateStorageClassUpdate``, ``ValidatePersistentVolumeClaimUpdate``; a claim's
storage request may grow, never shrink)."""

NEW_VOLUMES_ONLY = {"StorageClass": (".mountOptions", ".parameters", ".allowedTopologies")}
"""StorageClass fields copied into a volume when it is provisioned: existing volumes keep what they got."""
NEXT_MOUNT_ONLY = {"PersistentVolume": (".spec.mountOptions",)}
"""PersistentVolume fields the API server lets change (not part of its immutable volume source) that a node reads
only when it mounts the volume: mounts made before keep the old ones."""

FORCE_NEW_OTHER: dict[str, tuple[tuple[str, ...], str]] = {
    RELEASE: ((".name", ".namespace"), RELEASE_SOURCE),
    PROVIDER: ((".kubeconfig", ".context", ".cluster", ".renderYamlToDirectory"), PROVIDER_SOURCE),
    "aws:s3/bucket:Bucket": (
        (".bucket", ".bucketPrefix"),
        "https://www.pulumi.com/registry/packages/aws/api-docs/s3/bucket/",
    ),
    "aws:elasticache/replicationGroup:ReplicationGroup": (
        (".kmsKeyId", ".port", ".subnetGroupName", ".transitEncryptionEnabled"),
        f"{AWS_ELASTICACHE}/replication_group.go",
    ),
    "aws:elasticache/parameterGroup:ParameterGroup": (
        (".family", ".name", ".description"),
        "https://github.com/hashicorp/terraform-provider-aws/blob/main/internal/service/elasticache/parameter_group.go",
    ),
}
"""Replace rules of the other resources the platform renders: a Helm release on its name and namespace
(``forceNewFields`` in ``helm_release.go``), the Kubernetes provider when its cluster may change (``DiffConfig``:
then every object it manages is replaced), an S3 bucket on its name, an ElastiCache parameter group on its family
(a change of engine or major version), name and description, an ElastiCache replication group on its KMS key,
port, subnet group and transit encryption (``ForceNew`` in its schema). Every input of a ``random:`` resource
forces a new value (the random provider's schema marks each one RequiresReplace)."""

DATA_KINDS = {"PersistentVolumeClaim", "PersistentVolume", "CephCluster", "CephFilesystem", "CephBlockPool"}
DATA_KINDS |= {"CephObjectStore"}
DATA_TYPES = {"aws:s3/bucket:Bucket", "aws:elasticache/replicationGroup:ReplicationGroup"}


MISSING = object()


def changed_leaves(old: Any, new: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any, Any]]:
    """(path, old, new) of every difference, as deep as both sides have the same shape."""
    if isinstance(old, dict) and isinstance(new, dict):
        for k in sorted(set(old) | set(new)):
            yield from changed_leaves(old.get(k, MISSING), new.get(k, MISSING), (*path, k))
    elif isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for i, (a, b) in enumerate(zip(old, new, strict=True)):
            yield from changed_leaves(a, b, (*path, i))
    elif old != new:
        yield path, old, new


def value_text(value: Any) -> str:
    return "unset" if value is MISSING else json.dumps(value)


def field_text(path: tuple[Any, ...]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)


def _rule_parts(rule: str) -> list[str]:
    return [p for p in re.split(r"\.|(?=\[\*\])", rule) if p]


def matches(rule: str, path: tuple[Any, ...], old: Any, new: Any) -> bool:
    """Whether a change at ``path`` touches the field ``rule`` names (JSONPath with ``[*]``): at or under it, or a
    whole added/removed subtree holding it (as pulumi-kubernetes matches its patch)."""
    parts = _rule_parts(rule)
    for i, part in enumerate(parts):
        if i == len(path):
            rest = parts[i:]
            return any(_has(side, rest) for side in (old, new))
        step = path[i]
        if not (part == "[*]" and isinstance(step, int)) and part != step:
            return False
    return True


def _has(value: Any, parts: list[str]) -> bool:
    if not parts:
        return value is not MISSING
    head, rest = parts[0], parts[1:]
    if head == "[*]":
        return isinstance(value, list) and any(_has(v, rest) for v in value)
    return isinstance(value, dict) and head in value and _has(value[head], rest)


def _flag(render: Render, key: str) -> bool:
    provider = next((r for r in render.resources if r["type"] == PROVIDER), None)
    return str((provider or {}).get("inputs", {}).get(key, "false")).lower() == "true"


def replace_rules(r: dict[str, Any], head: Render) -> list[tuple[str, str]]:
    """(field, source) pairs that force a replace of resource ``r`` (its head inputs) under the head's provider."""
    inputs, typ = r["inputs"], r["type"]
    if typ.startswith("random:"):
        return [("", RANDOM_SOURCE)]
    if typ in FORCE_NEW_OTHER:
        fields, source = FORCE_NEW_OTHER[typ]
        return [(f, source) for f in fields]
    if not typ.startswith("kubernetes:") or "kind" not in inputs:
        return []
    rules = [(".metadata.name", FORCE_NEW_SOURCE), (".metadata.namespace", FORCE_NEW_SOURCE)]
    if typ.endswith("Patch"):
        return rules
    group, _, version = str(inputs.get("apiVersion", "")).rpartition("/")
    kind, immutable = inputs["kind"], inputs.get("immutable") is True
    fields = FORCE_NEW.get((group, version, kind), ())
    if kind == "Secret" and group == "" and (immutable or not _flag(head, "enableSecretMutable")):
        fields = (".type", ".stringData", ".data")
    elif kind == "ConfigMap" and group == "" and (immutable or not _flag(head, "enableConfigMapMutable")):
        fields = (".binaryData", ".data")
    return rules + [(f, FORCE_NEW_SOURCE) for f in fields]


def rejected_fields(r: dict[str, Any], leaves: list[tuple[tuple[Any, ...], Any, Any]]) -> list[tuple[str, str]]:
    """(field, source) of the changes the API server refuses for ``r``'s kind (a claim's storage may not shrink)."""
    kind = r["inputs"].get("kind", "") if r["type"].startswith("kubernetes:") else ""
    found = [(f, src) for f, src in REJECTED.get(kind, {}).items() for p, a, b in leaves if matches(f, p, a, b)]
    if kind == "PersistentVolumeClaim":
        for p, a, b in leaves:
            if p == ("spec", "resources", "requests", "storage") and _quantity(b) < _quantity(a):
                found.append((".spec.resources.requests.storage (smaller)", CORE_VALIDATION))
    return sorted(set(found))


_UNITS = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}
_UNITS |= {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}


def _quantity(value: Any) -> float:
    match = re.fullmatch(r"([0-9.]+)([A-Za-z]*)", str(value))
    return float(match.group(1)) * _UNITS.get(match.group(2), 1) if match else 0.0


def holds_data(r: dict[str, Any], render: Render) -> bool:
    """A resource whose loss loses data: a claim or volume, a StatefulSet with claim templates, a Ceph cluster or
    pool, a bucket, a managed Redis, or a Namespace holding any of those."""
    inputs = r["inputs"]
    kind = inputs.get("kind") if r["type"].startswith("kubernetes:") else None
    if r["type"] in DATA_TYPES or kind in DATA_KINDS:
        return True
    if kind == "StatefulSet":
        return bool((inputs.get("spec") or {}).get("volumeClaimTemplates"))
    if kind == "Namespace":
        name = (inputs.get("metadata") or {}).get("name")
        return any(
            (o["inputs"].get("metadata") or {}).get("namespace") == name and holds_data(o, render)
            for o in render.resources
            if o["inputs"].get("kind") != "Namespace"
        )
    return False


CEPH_PLACEMENT_FIELDS = {
    kind: tuple(f"{pool}.{field}" for pool in pools for field in ("deviceClass", "failureDomain"))
    for kind, pools in {
        "CephBlockPool": (".spec",),
        "CephFilesystem": (".spec.metadataPool", ".spec.dataPools[*]"),
        "CephObjectStore": (".spec.metadataPool", ".spec.dataPool"),
    }.items()
}
"""The fields of a Ceph pool's CRUSH rule: which OSDs (device class) hold its objects and across what they are
spread (failure domain). Changing either makes Rook set a new rule, and Ceph moves the pool's objects to meet it."""


def _version(text: Any) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"[0-9]+", str(text)))


def conditional_replaces(typ: str, leaves: list[tuple[tuple[Any, ...], Any, Any]]) -> list[str]:
    """Why an update is a replace after all, where the provider decides by the old and the new value: an
    ElastiCache replication group's engine (in place only from redis to valkey) or a lower engine version."""
    if typ != "aws:elasticache/replicationGroup:ReplicationGroup":
        return []
    found = []
    for path, old, new in leaves:
        if path == ("engine",) and (old, new) != ("redis", "valkey"):
            found.append(
                f"`.engine` {old} -> {new}: only redis -> valkey changes in place ({AWS_ELASTICACHE}/engine_version.go)"
            )
        if path == ("engineVersion",) and _version(new) < _version(old):
            found.append(
                f"`.engineVersion` {old} -> {new}: a downgrade re-creates it ({AWS_ELASTICACHE}/engine_version.go)"
            )
    return found


def data_moves(r: dict[str, Any], leaves: list[tuple[tuple[Any, ...], Any, Any]]) -> list[str]:
    """The CRUSH rule changes of a Ceph pool in ``leaves`` (device class, failure domain), as ``field old -> new``:
    Ceph moves the pool's objects."""
    kind = r["inputs"].get("kind") if r["type"].startswith("kubernetes:") else None
    fields = CEPH_PLACEMENT_FIELDS.get(kind or "", ())
    return [
        f"`{field_text(p)}` {value_text(a)} -> {value_text(b)}"
        for p, a, b in leaves
        if any(matches(f, p, a, b) for f in fields)
    ]
