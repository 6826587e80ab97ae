"""Offsite copies of a checkpoint claim's complete checkpoints in the object store: a CronJob that uploads, with
``juicefs sync``, every ``step-*`` directory that carries the completion marker, at the claim's root and one
directory down (``<run>/step-*``: one directory per run, as team jobs save), to the same relative path in the
bucket, the marker last, so a copy in the bucket is complete exactly when its marker is there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from ai_storage_training.checkpoint import layout

from ..backends.object_stores.bucket import sync_container
from ..common import kube
from ..common.sections import Cron, Resources, Section

MARKER = layout.MARKER
OFFSITE_PREFIX = "checkpoints/"
"""Where offsite copies land in the bucket: ``checkpoints/<namespace>/<claim>/[<run>/]step-*/``."""
OFFSITE_SUFFIX = "-offsite"
"""The offsite CronJob is named ``<claim><suffix>`` (the protection alerts select it so)."""
COPY_RESOURCES = Resources(cpu_request="100m", cpu_limit="1", memory_request="256Mi", memory_limit="1Gi")


class OffsiteSettings(Section):
    """Scheduled copies of complete checkpoints to the object store."""

    enabled: bool = True
    """Copy complete checkpoints to the bucket on a schedule."""
    schedule: Cron = "*/30 * * * *"
    """Cron schedule of the copy (five fields, cluster time zone)."""


def offsite_script(sync_flags: list[str]) -> str:
    """Shell the offsite copy runs: every ``step-*`` directory of $CHECKPOINTS, at its root or one directory down
    (``<run>/step-*``), that carries the marker is synced to $DESTINATION<same relative path>/, its marker last;
    directories without one (in flight, or cut short) are skipped. The globs never match hidden names (staging
    directories, locks, ``.refused/``, ``.retired/``)."""
    flags = " ".join(sync_flags)
    sync = f"juicefs sync {flags}".rstrip()
    step = layout.STEP_GLOB
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
            'root="${CHECKPOINTS%/}/"',
            "failed=0",
            "# At the root (one directory of checkpoints) and one level down (one directory per run).",
            f'for dir in "$root"{step}/ "$root"*/{step}/; do',
            '  [ -d "$dir" ] || continue  # a glob that matched nothing',
            '  rel="${dir#"$root"}"; name="${rel%/}"',
            f'  if [ ! -f "${{dir}}{MARKER}" ]; then',
            f'    echo "skip $name: no {MARKER} marker (in flight or incomplete)"; continue',
            "  fi",
            f'  if {sync} --exclude {MARKER} "$dir" "$DESTINATION$rel" &&',
            f'     {sync} --include {MARKER} --exclude "*" "$dir" "$DESTINATION$rel"; then',
            '    echo "copied $name to $DESTINATION$rel"',
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
    template["spec"]["securityContext"].update(kube.ON_ROOT_MISMATCH)
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


def copy_offsite(
    name: str,
    claim: str,
    namespace: str,
    s: OffsiteSettings,
    target: OffsiteTarget | DeliveredOffsite,
    parent: pulumi.Resource,
    after: list[pulumi.Resource],
) -> None:
    """The offsite copy of ``claim`` in ``namespace``: with the keys of an ``OffsiteTarget`` (in a Secret of its
    own), or with what the platform delivered (``DeliveredOffsite``)."""
    if isinstance(target, OffsiteTarget):
        _offsite(name, claim, namespace, s, target, parent, after)
        return
    k8s.batch.v1.CronJob(
        f"{name}-offsite",
        metadata=kube.workload_metadata(f"{claim}{OFFSITE_SUFFIX}", namespace, COPY_RESOURCES),
        spec=offsite_cronjob_spec(
            claim,
            s,
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
    from ..backends.object_stores.bucket import object_url, role_account

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
