"""Scheduled CSI snapshots of a checkpoint claim: a CronJob that creates a VolumeSnapshot through the API server
and deletes the oldest beyond ``keep``, as a ServiceAccount allowed exactly that.

Snapshots are crash-consistent copies of the whole claim; a restore from one uses only the checkpoints that carry
the completion marker.
"""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s
from pydantic import Field

from ..common import kube, versions
from ..common.sections import Cron, Resources, Section

SNAPSHOT_API = "snapshot.storage.k8s.io/v1"
SNAPSHOT_LABEL = "ai-storage-platform/snapshot-of"
SNAPSHOTS_SUFFIX = "-snapshots"
"""The snapshot CronJob is named ``<claim><suffix>`` (the protection alerts select it so)."""
RESOURCES = Resources(cpu_request="50m", cpu_limit="500m", memory_request="64Mi", memory_limit="256Mi")


class SnapshotSettings(Section):
    """Scheduled CSI snapshots of a checkpoint claim."""

    enabled: bool = True
    """Snapshot the claim on a schedule (needs the CSI snapshot CRDs and controller, and a Ceph tier)."""
    schedule: Cron = "0 */4 * * *"
    """Cron schedule of the snapshots (five fields, cluster time zone)."""
    keep: int = Field(6, ge=1, le=100)
    """Snapshots kept per claim; the oldest beyond this are deleted after each new one."""


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


def schedule_snapshots(
    name: str, claim: str, namespace: str, s: SnapshotSettings, parent: pulumi.Resource, after: list[pulumi.Resource]
) -> None:
    """The snapshot CronJob of ``claim`` in ``namespace`` and its ServiceAccount, Role and RoleBinding."""
    child = pulumi.ResourceOptions(parent=parent, depends_on=after)
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
        spec=snapshot_cronjob_spec(claim, s, account),
        opts=pulumi.ResourceOptions(parent=parent, depends_on=[*after, sa, role, binding]),
    )
