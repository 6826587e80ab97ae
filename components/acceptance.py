"""StorageAcceptance: per-tier fio Jobs that tell a platform team whether each tier meets its targets.

Each Job claims a volume of the tier's StorageClass, runs sequential write 1M, sequential read 1M and
random read 256K (and, on the cold tier, a first and a second read of the same file: cold then warm
from the JuiceFS cache), prints fio's JSON, then one summary line per figure and a verdict against the
stack's thresholds. The script and job file are pure functions so the tests run them with the real fio.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
from pydantic import Field

from .common import kube, versions
from .sections import DnsLabel, Quantity, Resources, Section
from .storage_tiers import TIERS, Tier


class Thresholds(Section):
    """Minimum figures a tier must reach for its acceptance Job to pass."""

    seq_read_mib_s: int = Field(100, ge=0)
    """Sequential 1M read, MiB/s."""
    seq_write_mib_s: int = Field(50, ge=0)
    """Sequential 1M write, MiB/s."""
    rand_read_iops: int = Field(100, ge=0)
    """Random 256K read, IOPS."""
    warm_cold_ratio: float = Field(1.0, ge=0.0)
    """Cold tier only: warm-cache read speed over cold read speed."""


class AcceptanceSettings(Section):
    """Storage acceptance Jobs, one per tier."""

    enabled: bool = False
    """Run the acceptance Jobs on `pulumi up`."""
    namespace: DnsLabel = "storage-acceptance"
    """Namespace of the Jobs and their claims."""
    volume_size: Quantity = "8Gi"
    """Size of each tier's test claim."""
    file_size_mib: int = Field(1024, ge=16, le=1024 * 1024)
    """Bytes fio writes and reads per job, in MiB."""
    block_until_done: bool = False
    """Make `pulumi up` wait for each Job and fail when a tier misses its thresholds."""
    thresholds: dict[Tier, Thresholds] = {}
    """Per-tier thresholds (`hot`, `warm`, `cold`, `checkpoint`); a tier not listed uses the defaults."""


def fio_job_file(tier: Tier, file_size_mib: int) -> str:
    """The fio job file for ``tier``: seq write 1M, seq read 1M, rand read 256K (+ cold/warm on cold)."""
    jobs = [
        "[global]",
        "ioengine=psync",
        "directory=${DATA_DIR}",
        f"size={file_size_mib}m",
        "bs=1m",
        "invalidate=1",
        "",
        "[seq-write]",
        "rw=write",
        "filename=acceptance.dat",
        "end_fsync=1",
        "",
    ]
    if tier == "cold":
        jobs += ["[cold-read]", "stonewall", "rw=read", "filename=acceptance.dat", ""]
        jobs += ["[warm-read]", "stonewall", "rw=read", "filename=acceptance.dat", ""]
    jobs += ["[seq-read]", "stonewall", "rw=read", "filename=acceptance.dat", ""]
    jobs += ["[rand-read]", "stonewall", "rw=randread", "bs=256k", "filename=acceptance.dat", ""]
    return "\n".join(jobs)


def acceptance_script(tier: Tier, thresholds: Thresholds) -> str:
    """Shell that runs fio, prints its JSON and a summary, and exits 1 when a threshold is missed."""
    t = thresholds
    checks = [
        f'check seq_write_mib_s "$(bw seq-write write)" {t.seq_write_mib_s}',
        f'check seq_read_mib_s "$(bw seq-read read)" {t.seq_read_mib_s}',
        f'check rand_read_iops "$(iops rand-read read)" {t.rand_read_iops}',
    ]
    if tier == "cold":
        checks.append(
            'check warm_cold_ratio "$(awk -v w="$(bw warm-read read)" -v c="$(bw cold-read read)" '
            '\'BEGIN { printf "%.2f", (c > 0 ? w / c : 0) }\')" '
            f"{t.warm_cold_ratio}"
        )
    return "\n".join(
        [
            "set -eu",
            'fio --output-format=json --output=/tmp/fio.json "$JOB_FILE"',
            "cat /tmp/fio.json",
            "# figure JOB SECTION FIELD: the first FIELD of SECTION (read/write) of JOB in fio's JSON",
            "figure() {",
            '  awk -v job="$1" -v sec="$2" -v key="$3" \'',
            '    /"jobname" :/ { split($0, a, "\\""); name = a[4]; cur = ""; done = 0 }',
            '    /"(read|write|trim|sync)" : \\{/ { split($0, a, "\\""); cur = a[2] }',
            '    name == job && cur == sec && !done && $1 == "\\"" key "\\"" { gsub(",", "", $3); print $3; done = 1 }',
            "  ' /tmp/fio.json",
            "}",
            'bw() { awk -v k="$(figure "$1" "$2" bw)" \'BEGIN { printf "%.1f", k / 1024 }\'; }',
            'iops() { figure "$1" "$2" iops; }',
            "failed=0",
            "check() {",
            '  ok=$(awk -v v="$2" -v min="$3" \'BEGIN { print (v + 0 >= min + 0) ? "pass" : "fail" }\')',
            f'  echo "{{\\"tier\\": \\"{tier}\\", \\"figure\\": \\"$1\\", \\"value\\": $2, \\"min\\": $3, '
            '\\"result\\": \\"$ok\\"}"',
            '  [ "$ok" = pass ] || failed=1',
            "}",
            *checks,
            f'[ "$failed" = 0 ] && echo "ACCEPTANCE PASS: {tier}" || {{ echo "ACCEPTANCE FAIL: {tier}"; exit 1; }}',
            "",
        ]
    )


@dataclass
class StorageAcceptanceArgs:
    """Inputs of StorageAcceptance."""

    settings: AcceptanceSettings
    storage_classes: Mapping[str, pulumi.Input[str]]
    """StorageClass name per tier (the tiers the stack serves)."""


RESOURCES = Resources(cpu_request="500m", cpu_limit="2", memory_request="256Mi", memory_limit="1Gi")


def job_spec(tier: Tier, storage_class: pulumi.Input[str], volume_size: str) -> dict[str, Any]:
    """The ``spec`` of a tier's fio Job: the job file and script from the tier's ConfigMap, fio's scratch on a
    generic ephemeral volume of the tier's class (created with the pod, deleted with it)."""
    fio = kube.container(
        "fio",
        versions.FIO_IMAGE,
        RESOURCES,
        command=["/bin/sh", "/config/run.sh"],
        env=[{"name": "DATA_DIR", "value": "/data"}, {"name": "JOB_FILE", "value": "/config/job.fio"}],
        volumeMounts=[
            {"name": "data", "mountPath": "/data"},
            {"name": "config", "mountPath": "/config", "readOnly": True},
            kube.TMP_MOUNT,
        ],
    )
    claim = {
        "accessModes": ["ReadWriteOnce"],
        "storageClassName": storage_class,
        "resources": {"requests": {"storage": volume_size}},
    }
    volumes = [
        {"name": "data", "ephemeral": {"volumeClaimTemplate": {"spec": claim}}},
        {"name": "config", "configMap": {"name": f"acceptance-{tier}"}},
        kube.TMP_VOLUME,
    ]
    labels = kube.labels("storage-acceptance", tier)
    template = kube.pod_template(labels, [fio], volumes, restartPolicy="Never")
    return {"backoffLimit": 0, "activeDeadlineSeconds": 3600, "template": template}


class StorageAcceptance(pulumi.ComponentResource):
    """A job file and an fio Job (with an ephemeral volume of the tier's class) per tier."""

    jobs: dict[str, pulumi.Output[str]]
    """Job name per tier (read the verdict with `kubectl logs job/<name>`)."""

    def __init__(self, name: str, args: StorageAcceptanceArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("ai-storage:acceptance:StorageAcceptance", name, None, opts)
        s = args.settings
        ns = kube.namespace(f"{name}-ns", s.namespace, "restricted", self)
        skip_await = {} if s.block_until_done else {"pulumi.com/skipAwait": "true"}
        # fio serves nothing: admit no ingress to the acceptance pods.
        kube.ingress_policy(
            f"{name}-no-ingress", ns.metadata.name, {"app.kubernetes.io/name": "storage-acceptance"}, [], self
        )
        self.jobs = {}
        for tier in TIERS:
            if tier not in args.storage_classes:
                continue
            config = k8s.core.v1.ConfigMap(
                f"{name}-{tier}-fio",
                metadata={"name": f"acceptance-{tier}", "namespace": ns.metadata.name},
                data={
                    "job.fio": fio_job_file(tier, s.file_size_mib),
                    "run.sh": acceptance_script(tier, s.thresholds.get(tier, Thresholds())),
                },
                opts=pulumi.ResourceOptions(parent=self),
            )
            job = k8s.batch.v1.Job(
                f"{name}-{tier}",
                metadata=kube.workload_metadata(f"acceptance-{tier}", ns.metadata.name, RESOURCES, None, skip_await),
                spec=job_spec(tier, args.storage_classes[tier], s.volume_size),
                opts=pulumi.ResourceOptions(parent=self, depends_on=[config]),
            )
            self.jobs[tier] = job.metadata.name
        self.register_outputs({"jobs": self.jobs})
