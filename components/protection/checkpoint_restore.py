"""A scheduled restore test of a team's checkpoint claim: a CronJob that runs the team's own job image with
``python -m ai_storage_training restore-test <dir>`` on the claim mounted read-only. The training library restores
the newest durable checkpoint there and validates every shard against its marker's checksums; exit 0 when it
validates, 1 when validation refused it, 2 on bad arguments, 3 on an error while running (docs/training.md).

A refused checkpoint fails the Job at once (retrying cannot make it valid); an error while running is retried.
kube-state-metrics records the CronJob's last success, which the alert ``CheckpointRestoreTestOverdue`` watches,
and its failed runs (``CheckpointRestoreTestFailed``). The test runs as the team's user under the restricted Pod
Security Standard, with a ServiceAccount of its own that mounts no token, within the namespace's quotas.
"""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from ..common import kube
from ..common.sections import Cron, PinnedImage, Resources, Section
from .checkpoints import CHECKPOINT_PATH, CHECKPOINT_VOLUME

RESTORE_TEST_SUFFIX = "-restore-test"
"""The CronJob and its ServiceAccount are named ``<claim><suffix>`` (the restore test alerts select them so)."""
COMMAND = ["python", "-m", "ai_storage_training", "restore-test"]
REFUSED_EXIT_CODES = [1, 2]
"""Exit statuses that fail the Job without a retry: validation refused the checkpoint, or bad arguments."""


class RestoreTestSettings(Section):
    """A scheduled restore test of the checkpoint claim."""

    enabled: bool = False
    """Run the restore test on a schedule (off by default: the image must hold the training library with its
    `restore-test` command)."""
    schedule: Cron = "0 3 * * *"
    """Cron schedule of the test (five fields, cluster time zone)."""
    image: PinnedImage | None = None
    """Image the test runs, pinned by a version tag (not `latest`) or a digest; unset uses `job.image`."""
    resources: Resources = Resources(cpu_request="500m", cpu_limit="2", memory_request="1Gi", memory_limit="4Gi")
    """Requests and limits of the test (it reads every shard of the newest checkpoint once)."""


def restore_test_cronjob_spec(
    claim: str, directory: str, image: str, s: RestoreTestSettings, uid: int
) -> dict[str, Any]:
    """The ``spec`` of the CronJob testing the newest checkpoint in ``directory`` (under the read-only mount of
    ``claim``) with ``image``, as ``uid``."""
    account = f"{claim}{RESTORE_TEST_SUFFIX}"
    test = kube.container(
        "restore-test",
        image,
        s.resources,
        command=[*COMMAND, directory],
        volumeMounts=[{"name": CHECKPOINT_VOLUME, "mountPath": CHECKPOINT_PATH, "readOnly": True}, kube.TMP_MOUNT],
        securityContext=kube.restricted_container(uid),
    )
    volumes = [
        {"name": CHECKPOINT_VOLUME, "persistentVolumeClaim": {"claimName": claim, "readOnly": True}},
        kube.TMP_VOLUME,
    ]
    labels = kube.labels("checkpoint-restore-test", claim)
    template = kube.pod_template(labels, [test], volumes, restartPolicy="Never", serviceAccountName=account)
    template["spec"]["securityContext"] = {**kube.restricted_pod(uid), **kube.ON_ROOT_MISMATCH}
    spec = kube.cronjob_spec(s.schedule, template)
    spec["jobTemplate"]["spec"]["podFailurePolicy"] = {
        "rules": [
            {
                "action": "FailJob",
                "onExitCodes": {"containerName": "restore-test", "operator": "In", "values": REFUSED_EXIT_CODES},
            }
        ]
    }
    return spec


def schedule_restore_test(
    name: str,
    claim: str,
    namespace: str,
    directory: str,
    image: str,
    s: RestoreTestSettings,
    uid: int,
    parent: pulumi.Resource,
    after: list[pulumi.Resource],
) -> None:
    """The restore test CronJob of ``claim`` in ``namespace`` and its ServiceAccount."""
    account = f"{claim}{RESTORE_TEST_SUFFIX}"
    meta = {"name": account, "namespace": namespace, "labels": kube.labels("checkpoint-restore-test", claim)}
    child = pulumi.ResourceOptions(parent=parent, depends_on=after)
    sa = k8s.core.v1.ServiceAccount(
        f"{name}-restore-test-account", metadata=meta, automount_service_account_token=False, opts=child
    )
    k8s.batch.v1.CronJob(
        f"{name}-restore-test",
        metadata=kube.workload_metadata(account, namespace, s.resources),
        spec=restore_test_cronjob_spec(claim, directory, image, s, uid),
        opts=pulumi.ResourceOptions(parent=parent, depends_on=[*after, sa]),
    )
