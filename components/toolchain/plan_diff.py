"""Storage-aware diff of two renders: what ``pulumi up`` would do to each stack, and what it means for data.

``python -m components diff BASE HEAD``: BASE and HEAD are render directories (``python -m components render``
output: one stack's folder, or a folder of them) or git refs, rendered on the fly with the ref's own program.
Per stack, every resource is created, updated (which fields), replaced (which field forces it, by which rule)
or deleted, with what that means for data. Resources match by Pulumi identity (type, name and the types of
its parents: the URN); inputs are compared as rendered, which is what ``pulumi preview`` compares when the
cluster has not drifted.

The replace rules are pulumi-kubernetes's (``FORCE_NEW``, with its Secret and ConfigMap switches), and the
fields the API server refuses to change are Kubernetes's (``REJECTED``); docs/review.md lists both.
A replaced or deleted resource that is protected or holds data blocks (exit 1) unless the head stack's
``cluster.acknowledgeReplacements`` names it.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

PULUMI_K8S = "https://github.com/pulumi/pulumi-kubernetes/blob/94977969d64112b04e19945818a7d5d5f38f631d/provider/pkg"
FORCE_NEW_SOURCE = f"{PULUMI_K8S}/provider/diff.go"
RELEASE_SOURCE = f"{PULUMI_K8S}/provider/helm_release.go"
PROVIDER_SOURCE = f"{PULUMI_K8S}/provider/provider.go"
K8S_VALIDATION = "https://github.com/kubernetes/kubernetes/blob/v1.33.0/pkg/apis"
STORAGE_VALIDATION = f"{K8S_VALIDATION}/storage/validation/validation.go"
CORE_VALIDATION = f"{K8S_VALIDATION}/core/validation/validation.go"
RANDOM_SOURCE = "https://github.com/hashicorp/terraform-provider-random/tree/v3.7.2/internal/provider"
RUNBOOK_ENGINE = "docs/runbook.md#move-the-metadata-to-another-engine"
RUNBOOK_CHART = "docs/runbook.md#upgrade-a-chart"
RELEASE = "kubernetes:helm.sh/v3:Release"
PROVIDER = "pulumi:providers:kubernetes"

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

FORCE_NEW_OTHER: dict[str, tuple[tuple[str, ...], str]] = {
    RELEASE: ((".name", ".namespace"), RELEASE_SOURCE),
    PROVIDER: ((".kubeconfig", ".context", ".cluster", ".renderYamlToDirectory"), PROVIDER_SOURCE),
    "aws:s3/bucket:Bucket": (
        (".bucket", ".bucketPrefix"),
        "https://www.pulumi.com/registry/packages/aws/api-docs/s3/bucket/",
    ),
}
"""Replace rules of the other resources the platform renders: a Helm release on its name and namespace
(``forceNewFields`` in ``helm_release.go``), the Kubernetes provider when its cluster may change (``DiffConfig``:
then every object it manages is replaced), an S3 bucket on its name. Every input of a ``random:`` resource
forces a new value (the random provider's schema marks each one RequiresReplace)."""

DATA_KINDS = {"PersistentVolumeClaim", "PersistentVolume", "CephCluster", "CephFilesystem", "CephBlockPool"}
DATA_KINDS |= {"CephObjectStore"}
DATA_TYPES = {"aws:s3/bucket:Bucket", "aws:elasticache/replicationGroup:ReplicationGroup"}

CHART_NOTES = {
    "juicefs-csi-driver": "https://github.com/juicedata/juicefs-csi-driver/releases",
    "rook-ceph": "https://rook.io/docs/rook/latest-release/Upgrade/rook-upgrade/",
    "rook-ceph-cluster": "https://rook.io/docs/rook/latest-release/Upgrade/rook-upgrade/",
    "ceph-csi-drivers": "https://github.com/ceph/ceph-csi-operator/releases",
    "topolvm": "https://github.com/topolvm/topolvm/blob/main/CHANGELOG.md",
    "cert-manager": "https://cert-manager.io/docs/releases/",
    "fluid": "https://github.com/fluid-cloudnative/fluid/releases",
    "volcano": "https://github.com/volcano-sh/volcano/releases",
    "kubeflow-trainer": "https://github.com/kubeflow/trainer/releases",
}
"""Where each chart's upgrade notes are (the runbook's chart upgrade section covers the rest)."""


@dataclass
class Change:
    """One resource's fate in a stack."""

    id: str
    type: str
    name: str
    action: str
    """create, update, replace, delete or rejected (an update the API server refuses)."""
    fields: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    """Why it is replaced or rejected: the field, the rule and its source."""
    notes: list[str] = field(default_factory=list)
    """What it means for data."""
    protected: bool = False
    holds_data: bool = False
    acknowledged: bool = False

    @property
    def blocking(self) -> bool:
        """A replace or delete of a protected or data-holding resource nobody acknowledged."""
        return self.action in ("replace", "delete") and (self.protected or self.holds_data) and not self.acknowledged


@dataclass
class StackDiff:
    """The diff of one stack."""

    stack: str
    changes: list[Change] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """Stack-wide findings: chart bumps, the metadata engine, stale acknowledgements."""

    @property
    def blocking(self) -> list[Change]:
        return [c for c in self.changes if c.blocking]


@dataclass
class Render:
    """One stack's render as data."""

    plan: dict[str, Any]
    outputs: dict[str, Any] | None
    """None for a render written before outputs.json existed (0.1.0)."""

    @property
    def resources(self) -> list[dict[str, Any]]:
        return list(self.plan["resources"])


def load_render(folder: Path) -> Render:
    """A stack's render folder (plan.json, and outputs.json when the renderer wrote one)."""
    outputs = folder / "outputs.json"
    return Render(
        json.loads((folder / "plan.json").read_text()),
        json.loads(outputs.read_text()) if outputs.is_file() else None,
    )


def stack_folders(folder: Path) -> dict[str, Path]:
    """The stacks of a render folder: itself when it holds plan.json, else its sub-folders that do."""
    if (folder / "plan.json").is_file():
        return {json.loads((folder / "plan.json").read_text())["stack"]: folder}
    return {p.name: p for p in sorted(folder.iterdir()) if (p / "plan.json").is_file()}


def render_ref(repo: Path, ref: str, out: Path, stacks: list[str] | None = None) -> dict[str, Path]:
    """Render every stack (or ``stacks``) of git ``ref`` with that ref's own program, in a temporary worktree,
    with this interpreter (a warning names the ref's pins this checkout's requirements.txt does not have)."""
    commit = _git(repo, "rev-parse", "--verify", f"{ref}^{{commit}}").strip()
    with tempfile.TemporaryDirectory(prefix="render-") as tmp:
        tree = Path(tmp) / "tree"
        _git(repo, "worktree", "add", "--detach", str(tree), commit)
        try:
            other = _pins(tree / "requirements.txt") - _pins(repo / "requirements.txt")
            if other:
                print(f"warning: {ref} pins {', '.join(sorted(other))}, not installed here", file=sys.stderr)
            names = stacks or sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in tree.glob("Pulumi.*.yaml"))
            for stack in names:
                cmd = [sys.executable, "-m", "components", "render", "--stack", stack, "--out", str(out / stack)]
                proc = subprocess.run(cmd, cwd=tree, capture_output=True, text=True, check=False)
                if proc.returncode != 0:
                    raise RenderError(f"rendering {stack} at {ref} failed:\n{proc.stderr.strip()}")
        finally:
            _git(repo, "worktree", "remove", "--force", str(tree))
    return {s: out / s for s in names}


def _pins(path: Path) -> set[str]:
    lines = path.read_text().splitlines() if path.is_file() else []
    return {line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")}


class RenderError(Exception):
    """A git ref could not be rendered (its stack settings, or its program, failed)."""


def _git(repo: Path, *args: str) -> str:
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RenderError(f"git {' '.join(args)}: {proc.stderr.strip()}")
    return proc.stdout


def _keys(render: Render) -> dict[tuple[str, ...], dict[str, Any]]:
    """Resources by Pulumi identity: their type, the types of their parents, and their name (as in the URN)."""
    by_name = {r["name"]: r for r in render.resources}

    def chain(r: dict[str, Any]) -> tuple[str, ...]:
        parent = by_name.get(r.get("parent") or "")
        return (*chain(parent), parent["type"]) if parent else ()

    return {(*chain(r), r["type"], r["name"]): r for r in render.resources}


def resource_id(r: dict[str, Any]) -> str:
    """How the diff (and ``cluster.acknowledgeReplacements``) names a resource."""
    inputs = r["inputs"]
    meta = inputs.get("metadata") if isinstance(inputs.get("metadata"), dict) else None
    if r["type"].startswith("kubernetes:") and meta and "kind" in inputs and "name" in meta:
        return "/".join(p for p in (inputs["kind"], meta.get("namespace"), meta["name"]) if p)
    return f"{r['type']}/{r['name']}"


_MISSING = object()


def _leaves(old: Any, new: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any, Any]]:
    """(path, old, new) of every difference, as deep as both sides have the same shape."""
    if isinstance(old, dict) and isinstance(new, dict):
        for k in sorted(set(old) | set(new)):
            yield from _leaves(old.get(k, _MISSING), new.get(k, _MISSING), (*path, k))
    elif isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for i, (a, b) in enumerate(zip(old, new, strict=True)):
            yield from _leaves(a, b, (*path, i))
    elif old != new:
        yield path, old, new


def _value(value: Any) -> str:
    return "unset" if value is _MISSING else json.dumps(value)


def _text(path: tuple[Any, ...]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)


def _rule_parts(rule: str) -> list[str]:
    return [p for p in re.split(r"\.|(?=\[\*\])", rule) if p]


def _matches(rule: str, path: tuple[Any, ...], old: Any, new: Any) -> bool:
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
        return value is not _MISSING
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
    found = [(f, src) for f, src in REJECTED.get(kind, {}).items() for p, a, b in leaves if _matches(f, p, a, b)]
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


def _objects(render: Render) -> Iterator[dict[str, Any]]:
    for r in render.resources:
        if r["type"].startswith("kubernetes:") and isinstance(r["inputs"].get("metadata"), dict):
            yield r["inputs"]


def secret_consumers(secret: dict[str, Any], render: Render) -> list[str]:
    """Who reads a Secret by name: pod templates (volumes, env, envFrom), StorageClasses (CSI secret
    parameters) and Fluid datasets (encryptOptions)."""
    name, namespace = secret["metadata"].get("name"), secret["metadata"].get("namespace")
    found = []
    for obj in _objects(render):
        meta = obj["metadata"]
        if obj.get("kind") == "StorageClass":
            params = obj.get("parameters") or {}
            refs = [k for k, v in params.items() if k.endswith("secret-name") and v == name]
            if any(params.get(k.replace("-name", "-namespace")) == namespace for k in refs):
                found.append(f"StorageClass/{meta['name']}")
        elif meta.get("namespace") == namespace and obj is not secret and _names_secret(obj, name):
            found.append(f"{obj.get('kind')}/{namespace}/{meta.get('name')}")
    return sorted(set(found))


def _names_secret(value: Any, name: str) -> bool:
    if isinstance(value, dict):
        if value.get("secretName") == name:
            return True
        for key in ("secretKeyRef", "secretRef", "secret"):
            if isinstance(value.get(key), dict) and value[key].get("name") == name:
                return True
        return any(_names_secret(v, name) for v in value.values())
    return isinstance(value, list) and any(_names_secret(v, name) for v in value)


def data_notes(
    change: Change, old: dict[str, Any] | None, new: dict[str, Any] | None, base: Render, head: Render
) -> None:
    """What the change means for data, for the reviewer."""
    r = new or old
    assert r is not None
    inputs = r["inputs"]
    kind = inputs.get("kind") if r["type"].startswith("kubernetes:") else None
    gone = change.action in ("replace", "delete")
    notes = change.notes
    if change.protected and gone:
        notes.append(
            "protected: `pulumi up` refuses to replace or delete it until `protect` is lifted; with retainOnDelete "
            "the old object stays in the cluster, unmanaged"
        )
    elif change.protected and change.action in ("update", "rejected"):
        notes.append("protected: `protect` stops replaces and deletes only; this changes it in place")
    if kind == "StatefulSet" and gone:
        policy = ((inputs.get("spec") or {}).get("persistentVolumeClaimRetentionPolicy") or {}).get("whenDeleted")
        claims = "deletes its claims and their data" if policy == "Delete" else "keeps its claims (whenDeleted: Retain)"
        notes.append(f"every pod stops at once; the StatefulSet {claims}, the new one mounts them again by name")
    elif kind == "PersistentVolumeClaim" and gone:
        cls = (inputs.get("spec") or {}).get("storageClassName")
        policy = next(
            (
                o.get("reclaimPolicy", "Delete")
                for o in _objects(base)
                if o.get("kind") == "StorageClass" and o["metadata"].get("name") == cls
            ),
            "unknown",
        )
        notes.append(
            f"the claim's volume is released (StorageClass {cls}: reclaimPolicy {policy}); a new claim "
            "binds a new, empty volume"
        )
    elif kind == "Namespace" and gone:
        notes.append("deleting a Namespace deletes every object in it, claims included")
    elif change.holds_data and gone:
        notes.append("holds data: deleting it deletes the data")
    if kind == "Secret" and change.action in ("replace", "update") and new is not None:
        users = secret_consumers(new["inputs"], head)
        if change.action == "replace" and users:
            notes.append(
                "deleted, then created under the same name: while it is gone, pods that start and volumes that "
                f"mount cannot read it; read by {', '.join(users)}"
            )
        elif users:
            notes.append(
                f"updated in place; read by {', '.join(users)}: mounted keys change within the kubelet's sync, "
                "environment variables at the next restart, a CSI volume's settings at its next mount"
            )
    if kind in NEW_VOLUMES_ONLY and old is not None and new is not None:
        touched = [
            f"`{_text(p)}` {_value(a)} -> {_value(b)}"
            for p, a, b in _leaves(old["inputs"], new["inputs"])
            if _text(p).startswith(NEW_VOLUMES_ONLY[kind])
        ]
        if touched:
            notes.append(
                f"{', '.join(touched)}: reaches only volumes provisioned from now on; existing volumes keep what "
                "they were created with until they are re-created (or their PV is edited and remounted)"
            )
    if change.action == "replace" and kind == "Service":
        notes.append("deleted, then created under the same name: meanwhile the name resolves to nothing")
    elif change.action == "replace" and kind == "Job":
        notes.append("deleted, then created under the same name: the Job runs again")


def diff_stack(stack: str, base: Render, head: Render, acknowledged: list[str]) -> StackDiff:
    """What ``pulumi up`` does to the stack rendered as ``base`` when its program becomes ``head``."""
    out = StackDiff(stack)
    old_keys, new_keys = _keys(base), _keys(head)
    for key in [*old_keys, *(k for k in new_keys if k not in old_keys)]:
        old, new = old_keys.get(key), new_keys.get(key)
        r = new or old
        assert r is not None
        if r["type"].startswith("ai-storage:"):
            continue  # components own nothing themselves
        change = Change(resource_id(old or r), r["type"], r["name"], "create" if old is None else "delete")
        if old is not None and new is not None:
            leaves = list(_leaves(old["inputs"], new["inputs"]))
            options = [f"({o})" for o in ("protect", "retainOnDelete") if o in old and o in new and old[o] != new[o]]
            if not leaves and not options:
                continue
            change.action, change.fields = "update", [_text(p) for p, _, _ in leaves] + options
            for rule, source in replace_rules(new, head):
                hits = [_text(p) for p, a, b in leaves if not rule or _matches(rule, p, a, b)]
                if hits:
                    change.action = "replace"
                    where = "" if hits == [rule] else f" ({', '.join(hits)})"
                    change.reasons.append(f"`{rule or 'any input'}` changed{where}: {source}")
            if change.action == "update":
                for rule, source in rejected_fields(new, leaves):
                    change.action = "rejected"
                    change.reasons.append(f"`{rule}`: the API server refuses the change ({source})")
        change.protected = any(bool(x and (x.get("protect") or x.get("retainOnDelete"))) for x in (old, new))
        change.holds_data = holds_data(old or r, base if old else head)
        change.acknowledged = change.id in acknowledged
        data_notes(change, old, new, base, head)
        out.changes.append(change)
    out.notes += chart_notes(base, head) + engine_notes(base, head)
    needed = {c.id for c in out.changes if c.action in ("replace", "delete") and (c.protected or c.holds_data)}
    out.notes += [
        f"`{a}` is acknowledged but not replaced or deleted here: remove it" for a in acknowledged if a not in needed
    ]
    return out


def chart_notes(base: Render, head: Render) -> list[str]:
    """A line per Helm release whose chart version changes, with its upgrade notes."""
    old = {r["name"]: r["inputs"] for r in base.resources if r["type"] == RELEASE}
    notes = []
    for r in head.resources:
        before = old.get(r["name"])
        if r["type"] == RELEASE and before and before.get("version") != r["inputs"].get("version"):
            chart = str(r["inputs"].get("chart", "")).rsplit("/", 1)[-1]
            url = CHART_NOTES.get(chart, "the chart's release notes")
            notes.append(
                f"chart {chart} {before.get('version')} -> {r['inputs'].get('version')}: read its upgrade notes "
                f"({url}) and {RUNBOOK_CHART} (CRDs, hooks)"
            )
    return notes


def engine(render: Render) -> str | None:
    """The metadata engine a render deploys: its ``metadataEngine`` output, or for a render from before
    outputs.json (0.1.0, when one Redis was the only engine) ``standalone`` if it has a MetadataEngine."""
    if render.outputs is not None:
        from ..metadata_engine import previous_engine

        return previous_engine(render.outputs)
    has = any(r["type"] == "ai-storage:metadata_engine:MetadataEngine" for r in render.resources)
    return "standalone" if has else None


def engine_notes(base: Render, head: Render) -> list[str]:
    before, after = engine(base), engine(head)
    if before is None or after is None or before == after:
        return []
    risk = " (with `metadata.acceptNodeLossRisk: true`)" if before == "standalone" else ""
    return [
        f"metadata engine {before} -> {after}: every cold-tier file's metadata stays in the {before} engine. A "
        f"protected stack's `pulumi up` refuses this until either the metadata is moved ({RUNBOOK_ENGINE}) and "
        f"`metadata.migratedFrom: {before}` is set, or `metadata.engine: {before}` is pinned{risk}"
    ]


def acknowledgements(project: Path, stack: str) -> list[str]:
    """``cluster.acknowledgeReplacements`` of ``project``'s stack (none without a stack file there)."""
    from ..settings import PROJECT, decode, load_settings
    from .render import stack_file_config

    path = project / f"Pulumi.{stack}.yaml"
    if not path.is_file():
        return []
    config, _ = stack_file_config(path)
    ours = {k.removeprefix(f"{PROJECT}:"): decode(v) for k, v in config.items() if k.startswith(f"{PROJECT}:")}
    return list(load_settings(stack, ours).cluster.acknowledge_replacements)


_ORDER = {"replace": 0, "delete": 1, "rejected": 2, "update": 3, "create": 4}


def markdown(diffs: list[StackDiff], base: str, head: str) -> str:
    """The pull-request comment."""
    lines = [f"# Storage-aware diff: `{base}` -> `{head}`", ""]
    for d in diffs:
        counts = {a: sum(c.action == a for c in d.changes) for a in _ORDER}
        lines += [f"## {d.stack}", "", ", ".join(f"{n} {a}" for a, n in counts.items() if n) or "no change", ""]
        if d.blocking:
            lines.append(
                f"**Blocking** (exit 1): replaced or deleted while protected or holding data; acknowledge each in "
                f"`cluster.acknowledgeReplacements` of Pulumi.{d.stack}.yaml once the data is safe:"
            )
            lines += [f"- `{c.id}`" for c in d.blocking]
            lines.append("")
        lines += [f"- {n}" for n in d.notes]
        if d.notes:
            lines.append("")
        for c in sorted(d.changes, key=lambda c: (_ORDER[c.action], c.id)):
            if c.action == "create":
                continue
            flag = " (acknowledged)" if c.acknowledged else ""
            shown = ", ".join(f"`{f}`" for f in c.fields[:8]) + (
                f" and {len(c.fields) - 8} more" if len(c.fields) > 8 else ""
            )
            lines.append(f"- **{c.action}** `{c.id}`{flag}" + (f": {shown}" if shown else ""))
            reasons = [re.sub(r"(https://[^\s)]+)", r"[source](\1)", r) for r in c.reasons]
            lines += [f"  - why: {r}" for r in reasons] + [f"  - data: {n}" for n in c.notes]
        created = sorted(c.id for c in d.changes if c.action == "create")
        if created:
            lines += ["", f"<details><summary>{len(created)} created</summary>", ""]
            lines += [f"- `{i}`" for i in created] + ["", "</details>"]
        lines.append("")
    return "\n".join(lines)


def as_json(diffs: list[StackDiff]) -> str:
    """The diff for tools."""
    stacks = [
        {
            "stack": d.stack,
            "blocking": [c.id for c in d.blocking],
            "notes": d.notes,
            "changes": [{**asdict(c), "blocking": c.blocking} for c in d.changes],
        }
        for d in diffs
    ]
    return json.dumps({"stacks": stacks, "exitCode": exit_code(diffs)}, indent=2)


def exit_code(diffs: list[StackDiff]) -> int:
    """1 when any stack replaces or deletes a protected or data-holding resource nobody acknowledged, else 0."""
    return 1 if any(d.blocking for d in diffs) else 0


def folders(spec: str, repo: Path, out: Path, stacks: list[str] | None) -> dict[str, Path]:
    """A render folder as given, or a git ref rendered into ``out``."""
    path = Path(spec)
    found = stack_folders(path) if path.is_dir() else render_ref(repo, spec, out, stacks)
    return {s: p for s, p in found.items() if not stacks or s in stacks}


def compare(base: str, head: str, project: Path, stacks: list[str] | None = None) -> list[StackDiff]:
    """Diff every stack both sides render; acknowledgements come from ``project``'s stack files."""
    with tempfile.TemporaryDirectory(prefix="diff-") as tmp:
        old = folders(base, project, Path(tmp) / "base", stacks)
        new = folders(head, project, Path(tmp) / "head", stacks)
        names = sorted(set(old) & set(new))
        if not names:
            raise RenderError(f"no stack rendered on both sides (base: {sorted(old)}, head: {sorted(new)})")
        return [diff_stack(s, load_render(old[s]), load_render(new[s]), acknowledgements(project, s)) for s in names]
