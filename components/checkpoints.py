"""Checkpoint protection: scheduled CSI snapshots of a checkpoint claim, and offsite copies of complete
checkpoints in the object store.

A training job writes a checkpoint as ``step-NNNNNNNN/`` and marks it complete with a ``COMPLETE`` file last:
the layout of the training library's CheckpointManager (``ai_storage_training.layout``, its one definition).
Snapshots are crash-consistent copies of the whole claim, kept ``keep`` at a time; a restore from one uses only the
checkpoints that carry the marker. The offsite copy uploads only complete checkpoints, with ``juicefs sync``,
each checkpoint's marker last, so a copy in the bucket is complete exactly when its marker is there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
from pydantic import Field

from ai_storage_training import layout

from .backends.object_stores.bucket import sync_container
from .common import kube, versions
from .sections import Cron, Resources, Section

MARKER = layout.MARKER
"""The file a checkpoint writer creates last, inside ``step-*/``."""
OFFSITE_PREFIX = "checkpoints/"
"""Where offsite copies land in the bucket: ``checkpoints/<namespace>/<claim>/step-*/``."""
SNAPSHOT_API = "snapshot.storage.k8s.io/v1"
SNAPSHOT_LABEL = "ai-storage-platform/snapshot-of"
SNAPSHOTS_SUFFIX = "-snapshots"
OFFSITE_SUFFIX = "-offsite"
"""The snapshot and offsite CronJobs are named ``<claim><suffix>`` (the protection alerts select them so)."""
RESOURCES = Resources(cpu_request="50m", cpu_limit="500m", memory_request="64Mi", memory_limit="256Mi")
COPY_RESOURCES = Resources(cpu_request="100m", cpu_limit="1", memory_request="256Mi", memory_limit="1Gi")


class SnapshotSettings(Section):
    """Scheduled CSI snapshots of a checkpoint claim."""

    enabled: bool = True
    """Snapshot the claim on a schedule (needs the CSI snapshot CRDs and controller, and a Ceph tier)."""
    schedule: Cron = "0 */4 * * *"
    """Cron schedule of the snapshots (five fields, cluster time zone)."""
    keep: int = Field(6, ge=1, le=100)
    """Snapshots kept per claim; the oldest beyond this are deleted after each new one."""


class OffsiteSettings(Section):
    """Scheduled copies of complete checkpoints to the object store."""

    enabled: bool = True
    """Copy complete checkpoints to the bucket on a schedule."""
    schedule: Cron = "*/30 * * * *"
    """Cron schedule of the copy (five fields, cluster time zone)."""


class CheckpointProtection(Section):
    """Snapshots and offsite copies of a checkpoint claim."""

    snapshots: SnapshotSettings = SnapshotSettings()
    """Scheduled CSI snapshots of the claim."""
    offsite: OffsiteSettings = OffsiteSettings()
    """Scheduled copies of complete checkpoints to the object store."""


def snapshot_program() -> str:
    """The snapshot job (Python, standard library only): create a VolumeSnapshot of $CLAIM through the API
    server, then delete the oldest of the claim's snapshots beyond $KEEP. Snapshot names carry a UTC timestamp,
    so name order is age order."""
    return f'''"""Snapshot $CLAIM, keep the newest $KEEP snapshots of it."""
import json, os, ssl, time, urllib.request

API = os.environ.get("KUBERNETES_API", "https://kubernetes.default.svc")
SA = os.environ.get("SERVICE_ACCOUNT_DIR", "/var/run/secrets/kubernetes.io/serviceaccount")
claim, keep = os.environ["CLAIM"], int(os.environ["KEEP"])
namespace = open(f"{{SA}}/namespace").read().strip()
token = open(f"{{SA}}/token").read().strip()
tls = ssl.create_default_context(cafile=f"{{SA}}/ca.crt") if API.startswith("https") else None
base = f"{{API}}/apis/{SNAPSHOT_API}/namespaces/{{namespace}}/volumesnapshots"


def call(method, url, body=None):
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Authorization", f"Bearer {{token}}")
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, context=tls, timeout=30) as response:
        return json.load(response)


name = f"{{claim}}-{{time.strftime('%Y%m%d%H%M%S', time.gmtime())}}"
call("POST", base, {{
    "apiVersion": "{SNAPSHOT_API}",
    "kind": "VolumeSnapshot",
    "metadata": {{"name": name, "labels": {{"{SNAPSHOT_LABEL}": claim}}}},
    "spec": {{"source": {{"persistentVolumeClaimName": claim}}}},
}})
print(f"created VolumeSnapshot {{name}}")
found = call("GET", f"{{base}}?labelSelector={SNAPSHOT_LABEL}%3D{{claim}}")
names = sorted(item["metadata"]["name"] for item in found["items"])
for old in names[:-keep]:
    call("DELETE", f"{{base}}/{{old}}")
    print(f"deleted VolumeSnapshot {{old}}")
'''


def snapshot_rules() -> list[dict[str, Any]]:
    """What the snapshot job may do: create, list and delete VolumeSnapshots in its namespace, nothing else."""
    return [
        {
            "apiGroups": ["snapshot.storage.k8s.io"],
            "resources": ["volumesnapshots"],
            "verbs": ["create", "list", "delete"],
        }
    ]


def snapshot_cronjob_spec(claim: str, s: SnapshotSettings, account: str) -> dict[str, Any]:
    """The ``spec`` of the CronJob that snapshots ``claim`` (as service account ``account``)."""
    job = kube.container(
        "snapshot",
        versions.PYTHON_IMAGE,
        RESOURCES,
        command=["python3", "-c", snapshot_program()],
        env=[{"name": "CLAIM", "value": claim}, {"name": "KEEP", "value": str(s.keep)}],
    )
    template = kube.pod_template(
        kube.labels("checkpoint-snapshots", claim), [job], [], restartPolicy="OnFailure", serviceAccountName=account
    )
    template["spec"]["automountServiceAccountToken"] = True  # the job talks to the API server
    return kube.cronjob_spec(s.schedule, template)


def offsite_script(sync_flags: list[str]) -> str:
    """Shell the offsite copy runs: every ``step-*`` directory of $CHECKPOINTS that carries the marker is synced
    to $DESTINATION/<name>/, its marker last; directories without one (in flight, or cut short) are skipped."""
    flags = " ".join(sync_flags)
    sync = f"juicefs sync {flags}".rstrip()
    return "\n".join(
        [
            "set -u",
            "# Keys come from a Secret mounted as files, never from the environment of the pod spec; without",
            "# one (IAM roles for service accounts) the client uses the pod's role.",
            'if [ -f "$SECRETS/access-key" ]; then',
            '  AWS_ACCESS_KEY_ID="$(cat "$SECRETS/access-key")"',
            '  AWS_SECRET_ACCESS_KEY="$(cat "$SECRETS/secret-key")"',
            "  export AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY",
            "fi",
            "failed=0",
            f'for dir in "$CHECKPOINTS"/{layout.STEP_GLOB}/; do',
            '  name="$(basename "$dir")"',
            f'  if [ ! -f "${{dir}}{MARKER}" ]; then',
            f'    echo "skip $name: no {MARKER} marker (in flight or incomplete)"; continue',
            "  fi",
            f'  if {sync} --exclude {MARKER} "$dir" "$DESTINATION$name/" &&',
            f'     {sync} --include {MARKER} --exclude "*" "$dir" "$DESTINATION$name/"; then',
            '    echo "copied $name to $DESTINATION$name/"',
            "  else",
            '    echo "copy of $name failed"; failed=1',
            "  fi",
            "done",
            'exit "$failed"',
            "",
        ]
    )


def offsite_cronjob_spec(
    claim: str,
    s: OffsiteSettings,
    credentials: str,
    target: pulumi.Output[tuple[str, list[str]]],
    account: str | None = None,
    delivered: DeliveredOffsite | None = None,
) -> dict[str, Any]:
    """The ``spec`` of the CronJob that copies ``claim``'s complete checkpoints to ``target`` (the destination
    and its sync flags), reading the keys from the Secret ``credentials``, as the ServiceAccount ``account`` (if
    any); with ``delivered``, as its service account, with the keys' Secret optional and the variables
    $(OFFSITE_URL) and $SYNC_FLAGS from its ConfigMap."""
    env: list[dict[str, Any]] = [
        {"name": "CHECKPOINTS", "value": "/checkpoints/"},
        {"name": "SECRETS", "value": "/run/secrets/object-store"},
    ]
    if delivered is not None:
        env += [
            {"name": name, "valueFrom": {"configMapKeyRef": {"name": delivered.target, "key": key}}}
            for name, key in (("OFFSITE_URL", "url"), ("SYNC_FLAGS", "sync-flags"))
        ]
    copy = sync_container(
        "copy",
        COPY_RESOURCES,
        offsite_script,
        target,
        env=env,
        mounts=[
            {"name": "checkpoints", "mountPath": "/checkpoints", "readOnly": True},
            {"name": "credentials", "mountPath": "/run/secrets/object-store", "readOnly": True},
        ],
    )
    secret: dict[str, Any] = {"secretName": credentials}
    spec: dict[str, Any] = {"restartPolicy": "OnFailure"}
    if delivered is not None:
        secret["optional"] = True
        account = delivered.account
    if account is not None:
        spec["serviceAccountName"] = account
    volumes = [
        {"name": "checkpoints", "persistentVolumeClaim": {"claimName": claim, "readOnly": True}},
        {"name": "credentials", "secret": secret},
        kube.TMP_VOLUME,
    ]
    template = kube.pod_template(kube.labels("checkpoint-offsite", claim), [copy], volumes, **spec)
    return kube.cronjob_spec(s.schedule, template)


@dataclass(frozen=True)
class OffsiteTarget:
    """The bucket offsite copies go to, and the credentials that write it (scoped to `checkpoints/<namespace>/`:
    keys, or with IAM roles for service accounts the role of the copy's ServiceAccount)."""

    storage: pulumi.Input[str]
    """JuiceFS storage type (`minio`, `s3`)."""
    bucket_url: pulumi.Input[str]
    access_key: pulumi.Input[str]
    secret_key: pulumi.Input[str]
    role_arn: pulumi.Input[str] | None = None
    """The IAM role of the ServiceAccount :func:`offsite_account` (keys empty then)."""


def offsite_account(claim: str) -> str:
    """The ServiceAccount the offsite copy of ``claim`` runs as (the one its scoped access names)."""
    return f"{claim}{OFFSITE_SUFFIX}"


@dataclass(frozen=True)
class DeliveredOffsite:
    """Offsite access the platform delivered into a team's namespace (``tenants``): copies run as the
    ServiceAccount ``account``, go under the prefix the ConfigMap ``target`` names (`url`, `sync-flags`) and use
    the keys of the Secret ``credentials`` (none under IAM roles for service accounts: the account's role)."""

    account: str
    target: str
    credentials: str


def protect_checkpoints(
    name: str,
    claim: str,
    namespace: str,
    s: CheckpointProtection,
    target: OffsiteTarget | DeliveredOffsite | None,
    parent: pulumi.Resource,
    after: list[pulumi.Resource],
) -> None:
    """The snapshot schedule (with a service account allowed exactly that) and the offsite copy of ``claim`` in
    ``namespace``, as ``s`` enables them: with the keys of an ``OffsiteTarget`` (in a Secret of its own), or with
    what the platform delivered (``DeliveredOffsite``); ``after`` holds the claim and its namespace."""
    child = pulumi.ResourceOptions(parent=parent, depends_on=after)
    if s.snapshots.enabled:
        account = f"{claim}{SNAPSHOTS_SUFFIX}"
        meta = {"name": account, "namespace": namespace, "labels": kube.labels("checkpoint-snapshots", claim)}
        sa = k8s.core.v1.ServiceAccount(f"{name}-snapshot-account", metadata=meta, opts=child)
        role = k8s.rbac.v1.Role(f"{name}-snapshot-role", metadata=meta, rules=snapshot_rules(), opts=child)
        binding = k8s.rbac.v1.RoleBinding(
            f"{name}-snapshot-binding",
            metadata=meta,
            role_ref={"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": account},
            subjects=[{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
            opts=child,
        )
        k8s.batch.v1.CronJob(
            f"{name}-snapshots",
            metadata=kube.workload_metadata(account, namespace, RESOURCES, skips=["CKV_K8S_38"]),
            spec=snapshot_cronjob_spec(claim, s.snapshots, account),
            opts=pulumi.ResourceOptions(parent=parent, depends_on=[*after, sa, role, binding]),
        )
    if not s.offsite.enabled or target is None:
        return
    if isinstance(target, OffsiteTarget):
        _offsite(name, claim, namespace, s.offsite, target, parent, after)
        return
    k8s.batch.v1.CronJob(
        f"{name}-offsite",
        metadata=kube.workload_metadata(f"{claim}{OFFSITE_SUFFIX}", namespace, COPY_RESOURCES),
        spec=offsite_cronjob_spec(
            claim,
            s.offsite,
            target.credentials,
            pulumi.Output.from_input((f"$(OFFSITE_URL){claim}/", ["$SYNC_FLAGS"])),
            delivered=target,
        ),
        opts=pulumi.ResourceOptions(parent=parent, depends_on=after),
    )


def _offsite(
    name: str,
    claim: str,
    namespace: str,
    s: OffsiteSettings,
    target: OffsiteTarget,
    parent: pulumi.Resource,
    after: list[pulumi.Resource],
) -> None:
    """The keys as a Secret in ``namespace`` (no keys with IAM roles: a ServiceAccount with the role instead)
    and the CronJob copying to ``checkpoints/<namespace>/<claim>/``."""
    from .backends.object_stores.bucket import object_url, role_account

    secret_name = f"{claim}-offsite-credentials"
    keys = {"access-key": target.access_key, "secret-key": target.secret_key} if target.role_arn is None else {}
    secret = k8s.core.v1.Secret(
        f"{name}-offsite-credentials",
        metadata={"name": secret_name, "namespace": namespace, "labels": kube.labels("checkpoint-offsite", claim)},
        type="Opaque",
        string_data={key: pulumi.Output.secret(value) for key, value in keys.items()},
        opts=pulumi.ResourceOptions(parent=parent, depends_on=after),
    )
    prefix = f"{OFFSITE_PREFIX}{namespace}/{claim}/"
    destination = pulumi.Output.all(target.storage, target.bucket_url).apply(lambda a: object_url(a[0], a[1], prefix))
    uses: list[pulumi.Resource] = [secret]
    account = None
    if target.role_arn is not None:
        account = offsite_account(claim)
        uses.append(role_account(f"{name}-offsite-account", account, namespace, target.role_arn, parent, after))
    spec = offsite_cronjob_spec(claim, s, secret_name, destination, account)
    k8s.batch.v1.CronJob(
        f"{name}-offsite",
        metadata=kube.workload_metadata(f"{claim}{OFFSITE_SUFFIX}", namespace, COPY_RESOURCES),
        spec=spec,
        opts=pulumi.ResourceOptions(parent=parent, depends_on=[*after, *uses]),
    )


def checkpoint_claim(
    resource_name: str,
    name: str,
    namespace: pulumi.Input[str],
    storage_class: pulumi.Input[str],
    size: str,
    opts: pulumi.ResourceOptions,
) -> k8s.core.v1.PersistentVolumeClaim:
    """A ReadWriteMany claim on the checkpoint tier, for sharded saves from every training node."""
    return k8s.core.v1.PersistentVolumeClaim(
        resource_name,
        metadata={"name": name, "namespace": namespace, "labels": kube.labels("training", "checkpoints")},
        spec={
            "accessModes": ["ReadWriteMany"],
            "storageClassName": storage_class,
            "resources": {"requests": {"storage": size}},
        },
        opts=opts,
    )
