"""A vended team's writable space held to its size: a JuiceFS directory quota on ``/teams/<team>`` as big as the team's
``space`` claim (JuiceFS 1.1+ clients refuse writes past it with EDQUOT; a static PersistentVolume's capacity alone
limits nothing), set by a Job in the JuiceFS namespace that runs ``juicefs quota set --create`` for every team, again
whenever a size changes (its template changes, so Pulumi replaces the Job). A team removed keeps its quota until the
directory is removed (runbook: retire a team)."""

from __future__ import annotations

import math
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from ..common import kube, versions
from ..common.sections import Resources
from ..protection.metadata_backup import CLIENT_ENV_DIR, SECRETS_DIR
from .tenants import TEAMS_DIR

JOB_RESOURCES = Resources(cpu_request="50m", cpu_limit="500m", memory_request="64Mi", memory_limit="256Mi")


def space_quotas(spaces: Mapping[str, str | None]) -> dict[str, int]:
    """Each team directory's quota in whole GiB (rounded up: never below the claim), from team name -> space."""
    return {
        f"{TEAMS_DIR}/{team}": math.ceil(kube.quantity_bytes(space) / 2**30) for team, space in spaces.items() if space
    }


def quota_script(quotas: Mapping[str, int]) -> str:
    """Set every quota (creating a missing directory), reading the metadata URL and the client's environment from
    files, never from the pod's environment."""
    lines = [
        "set -eu",
        'METAURL="$(cat "$SECRETS/metaurl")"',
        'for f in "$CLIENT_ENV"/*; do [ -f "$f" ] && export "$(basename "$f")=$(cat "$f")"; done',
    ]
    for path, gib in sorted(quotas.items()):
        lines.append(f'juicefs quota set "$METAURL" --path {shlex.quote(path)} --create --capacity {gib}')
    return "\n".join([*lines, ""])


def quota_job_spec(quotas: Mapping[str, int], volume_secret: str, client_env_secret: str) -> dict[str, Any]:
    """The Job's ``spec``: the pinned JuiceFS client with the volume Secret's metadata URL only."""
    client = kube.container(
        "quota",
        versions.JUICEFS_IMAGE,
        JOB_RESOURCES,
        command=["/bin/sh", "-c", quota_script(quotas)],
        env=[
            {"name": "HOME", "value": "/tmp"},
            {"name": "SECRETS", "value": SECRETS_DIR},
            {"name": "CLIENT_ENV", "value": CLIENT_ENV_DIR},
        ],
        volumeMounts=[
            kube.TMP_MOUNT,
            {"name": "volume", "mountPath": SECRETS_DIR, "readOnly": True},
            {"name": "client-env", "mountPath": CLIENT_ENV_DIR, "readOnly": True},
        ],
    )
    volumes = [
        kube.TMP_VOLUME,
        {"name": "volume", "secret": {"secretName": volume_secret, "items": [{"key": "metaurl", "path": "metaurl"}]}},
        {"name": "client-env", "secret": {"secretName": client_env_secret, "optional": True}},
    ]
    labels = kube.labels("team-space-quotas", "tenants")
    return {"backoffLimit": 6, "template": kube.pod_template(labels, [client], volumes, restartPolicy="OnFailure")}


def space_quota_job(
    name: str,
    namespace: str,
    quotas: Mapping[str, int],
    secrets: tuple[str, str],
    after: Sequence[pulumi.Resource],
    parent: pulumi.Resource,
) -> k8s.batch.v1.Job:
    """The Job in the JuiceFS namespace (``secrets``: the volume Secret and the client environment Secret), once
    ``after`` (the driver and the volume Secret) exist."""
    return k8s.batch.v1.Job(
        name,
        metadata=kube.workload_metadata("team-space-quotas", namespace, JOB_RESOURCES),
        spec=quota_job_spec(quotas, *secrets),
        opts=pulumi.ResourceOptions(parent=parent, depends_on=list(after)),
    )
