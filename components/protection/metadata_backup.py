"""The JuiceFS metadata backup: a CronJob that runs ``juicefs dump`` (the object store's secret key redacted)
and uploads the dump next to the data, under ``meta-backups/``, where the bucket expires old dumps."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
from pydantic import Field

from ..backends.object_stores.bucket import object_url, sync_container
from ..common import kube
from ..common.sections import Cron, Resources, Section


class BackupSettings(Section):
    """Scheduled `juicefs dump` of the metadata to the object store."""

    enabled: bool = True
    """Run the metadata backup CronJob."""
    schedule: Cron = "17 */6 * * *"
    """Cron schedule of the backup (five fields, cluster time zone)."""
    retention_days: int = Field(14, ge=1, le=3650)
    """Days a backup is kept; the bucket expires older ones under `meta-backups/`."""


BACKUP_PREFIX = "meta-backups/"
BACKUP_CRONJOB = "juicefs-metadata-backup"
"""Name of the backup CronJob (the protection alerts select it so)."""
BACKUP_ACCOUNT = "juicefs-metadata-backup"
"""ServiceAccount of the backup with IAM roles for service accounts (it carries the backup's role)."""


def backup_destination(storage: str, bucket_url: str) -> tuple[str, list[str]]:
    """Where ``juicefs sync`` uploads the dumps (a JuiceFS object URL) and the flags it needs."""
    return object_url(storage, bucket_url, BACKUP_PREFIX)


def backup_script(sync_flags: list[str]) -> str:
    """Shell the backup CronJob runs: dump the metadata (secret key redacted), upload it to $DESTINATION."""
    flags = " ".join(sync_flags)
    return "\n".join(
        [
            "set -eu",
            "# Credentials come from Secrets mounted as files, never from the environment: the metadata URL from",
            "# the volume Secret, the keys (which reach only the backup prefix) from the backup's own Secret;",
            "# without keys (IAM roles for service accounts) the client uses the pod's role.",
            'METAURL="$(cat "$SECRETS/metaurl")"',
            'if [ -s "$KEYS/access-key" ]; then',
            '  AWS_ACCESS_KEY_ID="$(cat "$KEYS/access-key")"',
            '  AWS_SECRET_ACCESS_KEY="$(cat "$KEYS/secret-key")"',
            "  export AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY",
            "fi",
            "# The client's environment (SENTINEL_PASSWORD with Sentinels), one file per variable.",
            'for f in "$CLIENT_ENV"/*; do [ -f "$f" ] && export "$(basename "$f")=$(cat "$f")"; done',
            'stamp="$(date -u +%Y%m%dT%H%M%SZ)"',
            "mkdir -p /backup/out",
            'juicefs dump --threads 4 "$METAURL" "/backup/out/$VOLUME-$stamp.json.gz"',
            f'juicefs sync {flags} /backup/out/ "$DESTINATION"'.replace("  ", " "),
            'echo "metadata backup $VOLUME-$stamp.json.gz uploaded to $DESTINATION"',
            "",
        ]
    )


BACKUP_RESOURCES = Resources(cpu_request="100m", cpu_limit="1", memory_request="256Mi", memory_limit="2Gi")
SECRETS_DIR = "/run/secrets/juicefs"
"""Where the backup reads the volume Secret (files, never environment variables)."""
KEYS_DIR = "/run/secrets/backup-keys"
"""Where the backup reads its own keys."""
CLIENT_ENV_DIR = "/run/secrets/juicefs-env"


@dataclass(frozen=True)
class BackupSecrets:
    """The Secrets the backup reads as files: the volume Secret (for the metadata URL), the client's environment
    (optional) and the backup's keys (absent with IAM roles for service accounts)."""

    volume: str
    client_env: str
    keys: str


def backup_cronjob_spec(
    backup: BackupSettings,
    volume_name: str,
    target: pulumi.Output[tuple[str, list[str]]],
    secrets: BackupSecrets,
    account: str | None = None,
) -> dict[str, Any]:
    """The backup CronJob's ``spec``: one run at a time, ``juicefs dump`` then ``juicefs sync`` to ``target``
    (the destination and its sync flags), as ServiceAccount ``account`` when given (IAM roles)."""
    dump = sync_container(
        "dump",
        BACKUP_RESOURCES,
        backup_script,
        target,
        env=[
            {"name": "VOLUME", "value": volume_name},
            {"name": "SECRETS", "value": SECRETS_DIR},
            {"name": "KEYS", "value": KEYS_DIR},
            {"name": "CLIENT_ENV", "value": CLIENT_ENV_DIR},
        ],
        mounts=[
            {"name": "backup", "mountPath": "/backup"},
            {"name": "volume", "mountPath": SECRETS_DIR, "readOnly": True},
            {"name": "keys", "mountPath": KEYS_DIR, "readOnly": True},
            {"name": "client-env", "mountPath": CLIENT_ENV_DIR, "readOnly": True},
        ],
    )
    volumes = [
        {"name": "backup", "emptyDir": {}},
        kube.TMP_VOLUME,
        # Only the metadata URL of the volume Secret: its keys reach the JuiceFS data, not the backups.
        {"name": "volume", "secret": {"secretName": secrets.volume, "items": [{"key": "metaurl", "path": "metaurl"}]}},
        {"name": "keys", "secret": {"secretName": secrets.keys, "optional": True}},
        {"name": "client-env", "secret": {"secretName": secrets.client_env, "optional": True}},
    ]
    labels = kube.labels("juicefs-metadata-backup", "metadata-backup")
    spec: dict[str, Any] = {"restartPolicy": "OnFailure"}
    if account is not None:
        spec["serviceAccountName"] = account
    template = kube.pod_template(labels, [dump], volumes, **spec)
    return kube.cronjob_spec(backup.schedule, template, kept_successes=3)


def metadata_backup(
    name: str,
    backup: BackupSettings,
    namespace: str,
    volume_name: str,
    target: pulumi.Output[tuple[str, list[str]]],
    secrets: BackupSecrets,
    after: list[pulumi.Resource],
    parent: pulumi.Resource,
    account: str | None = None,
) -> k8s.batch.v1.CronJob:
    """The backup CronJob in ``namespace`` (as ServiceAccount ``account`` when given), created once ``after``
    (the Secrets or ServiceAccount it uses) exist."""
    return k8s.batch.v1.CronJob(
        name,
        metadata=kube.workload_metadata(BACKUP_CRONJOB, namespace, BACKUP_RESOURCES),
        spec=backup_cronjob_spec(backup, volume_name, target, secrets, account),
        opts=pulumi.ResourceOptions(parent=parent, depends_on=after),
    )
