"""StorageAcceptance: per-tier fio Jobs that tell a platform team whether each tier meets its targets.

Each Job claims a volume of the tier's StorageClass and runs the design's three stories (``stories``) as the design
runs them: time-based (``runtimeSeconds``, 60 s: fio goes on for that long whatever the size), ``sizeMib`` per job
as fio means it (10 GiB: the four sequential writers write 4 x 10 GiB), in a pod of the design's bench size
(``resources``: 4 CPU, 8 GiB): a sequential write (1 MiB blocks, 4 jobs: the checkpoint burst of four ranks), a
sequential read (1 MiB, 4 jobs) and a random read (256 KiB, 8 jobs, iodepth 32) of the written files, each with
direct I/O where the filesystem takes it (the script probes it first and says when it does not, e.g. a FUSE mount
without direct I/O; then buffered, the page cache dropped per file); on the cold tier also one pass of a first and a
second read of the written files (cold, then warm from the JuiceFS cache). Each tier is judged against its own floor
from the design's pyramid (``DESIGN_FLOORS``: local NVMe 3-14 GB/s, distributed FS 1-10 GB/s, object store 0.1-5
GB/s, their lower ends), which ``thresholds`` may change per figure. It prints fio's JSON, one summary line per
figure and a verdict against the stack's thresholds, and exits 1 when one is missed: the Job fails, the
``StorageAcceptanceFailed`` alert fires, and with ``blockUntilDone`` the update fails too. The job file and script
are pure functions: the tests run them with the real fio.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
from pydantic import Field

from ..common import kube, versions
from ..common.sections import DnsLabel, Problem, Quantity, Resources, Section
from .storage_tiers import TIERS, Tier

MIB = 1024 * 1024


class Thresholds(Section):
    """Minimum figures a tier must reach for its acceptance Job to pass (aggregates over a story's jobs); a figure
    not set is the tier's design floor (``DESIGN_FLOORS``)."""

    seq_read_mib_s: int | None = Field(None, ge=0)
    """Sequential 1M read, MiB/s (unset: the tier's floor)."""
    seq_write_mib_s: int | None = Field(None, ge=0)
    """Sequential 1M write, MiB/s (unset: the tier's floor)."""
    rand_read_iops: int | None = Field(None, ge=0)
    """Random 256K read, IOPS (unset: 100)."""
    warm_cold_ratio: float | None = Field(None, ge=0.0)
    """Cold tier only: warm-cache read speed over cold read speed (unset: the design's JuiceFS exercise, 3x)."""


def _gb_s(gb_per_second: float) -> int:
    """The design's GB/s (10^9 bytes) in the MiB/s fio reports."""
    return int(gb_per_second * 1e9 / MIB)


def _floor(gb_per_second: float) -> Thresholds:
    mib_s = _gb_s(gb_per_second)
    return Thresholds(seq_read_mib_s=mib_s, seq_write_mib_s=mib_s, rand_read_iops=100, warm_cold_ratio=3.0)


DESIGN_FLOORS: dict[Tier, Thresholds] = {
    "hot": _floor(3),  # local NVMe: 3-14 GB/s
    "warm": _floor(1),  # distributed FS: 1-10 GB/s
    "cold": _floor(0.1),  # object store: 0.1-5 GB/s
    "checkpoint": _floor(1),  # a distributed FS of its own
    "block": _floor(1),  # Ceph RBD: the warm tier's disks
}
"""Each tier's floor: the lower end of its range in the design's pyramid (reads; writes the same, the design's
checkpoint table puts each kind's writes in the same range or above). The design gives no random-read floor: 100
IOPS of 256 KiB (25 MiB/s) is the platform's own, and the cold tier's warm/cold ratio is the design's 3x."""


def effective_thresholds(tier: Tier, given: Thresholds | None) -> Thresholds:
    """The tier's design floor with the figures ``given`` sets (a stack's ``acceptance.thresholds.<tier>``)."""
    floor = DESIGN_FLOORS[tier]
    if given is None:
        return floor
    return floor.model_copy(update={k: v for k, v in given.model_dump().items() if v is not None})


class Story(Section):
    """One fio story: how much, how parallel, how deep, direct or not, for how long (the sequential stories)."""

    size_mib: int = Field(10240, ge=16, le=1024 * 1024)
    """MiB each job writes or reads, as fio's `size` means it (one file per writer: the design's 10 GiB each)."""
    jobs: int = Field(4, ge=1, le=64)
    """Parallel fio jobs (`numjobs`)."""
    iodepth: int = Field(1, ge=1, le=256)
    """I/Os in flight per job (libaio)."""
    direct: bool = True
    """Direct I/O (`O_DIRECT`) where the filesystem takes it; else buffered with the page cache dropped."""
    runtime_seconds: int = Field(60, ge=1, le=3600)
    """How long the story runs (`time_based`: fio goes over its files again until then; the design's 60 s)."""


class RandomReadStory(Story):
    """The random-read story: more readers, deeper queues."""

    size_mib: int = Field(10240, ge=16, le=1024 * 1024)
    """MiB each job reads at random offsets of the written files before going over them again (time-based)."""
    jobs: int = Field(8, ge=1, le=64)
    """Parallel fio jobs (`numjobs`)."""
    iodepth: int = Field(32, ge=1, le=256)
    """I/Os in flight per job (libaio)."""


class StoriesSettings(Section):
    """The design's in-pod benchmark: three stories per tier."""

    seq_write: Story = Story()
    """Sequential write, 1 MiB blocks: the checkpoint burst of four ranks (the files every read story reads)."""
    seq_read: Story = Story()
    """Sequential read, 1 MiB blocks, of the written files (`jobs` at most `seqWrite.jobs`)."""
    rand_read: RandomReadStory = RandomReadStory()
    """Random read, 256 KiB blocks, of the written files (`sizeMib`: what each job reads)."""


class AcceptanceSettings(Section):
    """Storage acceptance Jobs, one per tier."""

    enabled: bool = False
    """Run the acceptance Jobs on `pulumi up`."""
    namespace: DnsLabel = "storage-acceptance"
    """Namespace of the Jobs and their claims."""
    volume_size: Quantity = "48Gi"
    """Size of each tier's test claim: it must hold the written files with 10 % to spare (checked)."""
    resources: Resources = Resources(cpu_request="4", cpu_limit="4", memory_request="8Gi", memory_limit="8Gi")
    """Requests and limits of the fio pod (the design's bench pod: 4 CPU, 8 GiB)."""
    stories: StoriesSettings = StoriesSettings()
    """Size, jobs, iodepth, direct I/O and runtime of each story."""
    block_until_done: bool = False
    """Make `pulumi up` wait for each Job and fail when a tier misses its thresholds."""
    thresholds: dict[Tier, Thresholds] = {}
    """Per-tier thresholds (`hot`, `warm`, `cold`, `checkpoint`, `block`); a figure not set is the tier's floor
    from the design's pyramid (docs/tiers.md, "Acceptance")."""

    def floors(self, tier: Tier) -> Thresholds:
        """What ``tier``'s Job must reach: its design floor with the figures ``thresholds`` sets for it."""
        return effective_thresholds(tier, self.thresholds.get(tier))

    def problems(self) -> list[Problem]:
        """The stories' files fit the claim with room to spare; the reads read what the write wrote."""
        st, found = self.stories, []
        needed = st.seq_write.jobs * st.seq_write.size_mib * MIB
        if needed * 1.1 > kube.quantity_bytes(self.volume_size):
            expected = f"expected room for the stories' files ({needed / 2**30:.1f} GiB and 10 %)"
            hint = "fio would fill the claim: raise volumeSize or lower the stories' sizeMib or jobs"
            found.append(Problem("volumeSize", expected, self.volume_size, hint))
        if st.seq_read.jobs > st.seq_write.jobs:
            expected = f"expected at most stories.seqWrite.jobs ({st.seq_write.jobs})"
            found.append(Problem("stories.seqRead.jobs", expected, st.seq_read.jobs, "each reads a written file"))
        return found


def _section(name: str, rw: str, bs: str, story: Story, files: str, timed: bool = True) -> list[str]:
    """One story: ``files`` is fio's ``filename_format`` (a file per job) or a ``filename=`` list (shared);
    ``timed``: time-based (the design's), else one pass over its size."""
    return [
        f"[{name}]",
        "stonewall",
        f"rw={rw}",
        f"bs={bs}",
        f"numjobs={story.jobs}",
        f"iodepth={story.iodepth}",
        f"{'io_size' if files.startswith('filename=') else 'size'}={story.size_mib}m",
        *([f"runtime={story.runtime_seconds}", "time_based=1"] if timed else []),
        f"direct=${{DIRECT_{'ON' if story.direct else 'OFF'}}}",
        files if files.startswith("filename=") else f"filename_format={files}",
        *(["end_fsync=1"] if rw == "write" else []),
        "",
    ]


def fio_job_file(tier: Tier, stories: StoriesSettings) -> str:
    """The fio job file for ``tier``: the three stories (and the cold and warm reads on the cold tier), each
    reported as one group (``group_reporting``: the aggregate over its jobs)."""
    st = stories
    jobs = ["[global]", "ioengine=libaio", "directory=${DATA_DIR}", "group_reporting=1", "invalidate=1", ""]
    written = "seq.$jobnum"  # the writers' files, one per job: every read story reads them
    jobs += _section("seq-write", "write", "1m", st.seq_write, written)
    if tier == "cold":
        read_all = st.seq_read.model_copy(update={"jobs": st.seq_write.jobs, "size_mib": st.seq_write.size_mib})
        jobs += _section("cold-read", "read", "1m", read_all, written, timed=False)  # one pass: a second is warm
        jobs += _section("warm-read", "read", "1m", read_all, written, timed=False)
    jobs += _section("seq-read", "read", "1m", st.seq_read, written)
    every = ":".join(f"seq.{i}" for i in range(st.seq_write.jobs))
    jobs += _section("rand-read", "randread", "256k", st.rand_read, f"filename={every}")
    return "\n".join(jobs)


def acceptance_script(tier: Tier, thresholds: Thresholds | None = None) -> str:
    """Shell that probes direct I/O, runs fio, prints its JSON and a summary, and exits 1 when a threshold (the
    tier's floor where ``thresholds`` sets none) is missed."""
    t = effective_thresholds(tier, thresholds)
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
    probe = (
        'if fio --name=direct-probe --directory="$DATA_DIR" --filename=.direct-probe --size=1m --bs=1m '
        "--rw=write --direct=1 --ioengine=psync >/dev/null 2>&1; then DIRECT_ON=1; else DIRECT_ON=0; fi"
    )
    return "\n".join(
        [
            "set -eu",
            probe,
            'rm -f "$DATA_DIR/.direct-probe"',
            "DIRECT_OFF=0",
            "export DIRECT_ON DIRECT_OFF",
            f'echo "{{\\"tier\\": \\"{tier}\\", \\"direct_io\\": $DIRECT_ON}}"'
            " # 0: the filesystem refused O_DIRECT, the stories ran buffered",
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
    placement: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Per tier, the pod spec's ``nodeSelector`` and ``tolerations`` of the nodes that hold it
    (``PlatformSettings.tier_placement``): the hot tier exists only on its NVMe nodes, often tainted GPU nodes."""


def job_spec(
    tier: Tier,
    storage_class: pulumi.Input[str],
    volume_size: str,
    resources: Resources,
    placement: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``spec`` of a tier's fio Job: the job file and script from the tier's ConfigMap, fio's scratch on a
    generic ephemeral volume of the tier's class (created with the pod, deleted with it), on the nodes that hold
    the tier (``placement``)."""
    fio = kube.container(
        "fio",
        versions.FIO_IMAGE,
        resources,
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
    template = kube.pod_template(labels, [fio], volumes, restartPolicy="Never", **(placement or {}))
    return {"backoffLimit": 0, "activeDeadlineSeconds": 7200, "template": template}


class StorageAcceptance(pulumi.ComponentResource):
    """A job file and an fio Job (with an ephemeral volume of the tier's class) per tier."""

    jobs: dict[str, pulumi.Output[str]]
    """Job name per tier (read the verdict with `kubectl logs job/<name>`)."""
    verdicts: dict[str, pulumi.Output[str]]
    """Per tier: `passed` or `failed` once `pulumi up` waited for the Job (`blockUntilDone`), else where to read it
    (stack output `acceptance`)."""

    def __init__(self, name: str, args: StorageAcceptanceArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("ai-storage:acceptance:StorageAcceptance", name, None, opts)
        s = args.settings
        ns = kube.namespace(f"{name}-ns", s.namespace, "restricted", self)
        skip_await = {} if s.block_until_done else {"pulumi.com/skipAwait": "true"}
        # fio serves nothing: admit no ingress to the acceptance pods.
        kube.ingress_policy(
            f"{name}-no-ingress", ns.metadata.name, {"app.kubernetes.io/name": "storage-acceptance"}, [], self
        )
        self.jobs, self.verdicts = {}, {}
        for tier in TIERS:
            if tier not in args.storage_classes:
                continue
            config = k8s.core.v1.ConfigMap(
                f"{name}-{tier}-fio",
                metadata={"name": f"acceptance-{tier}", "namespace": ns.metadata.name},
                data={
                    "job.fio": fio_job_file(tier, s.stories),
                    "run.sh": acceptance_script(tier, s.floors(tier)),
                },
                opts=pulumi.ResourceOptions(parent=self),
            )
            job = k8s.batch.v1.Job(
                f"{name}-{tier}",
                metadata=kube.workload_metadata(f"acceptance-{tier}", ns.metadata.name, s.resources, None, skip_await),
                spec=job_spec(tier, args.storage_classes[tier], s.volume_size, s.resources, args.placement.get(tier)),
                opts=pulumi.ResourceOptions(parent=self, depends_on=[config]),
            )
            self.jobs[tier] = job.metadata.name
            self.verdicts[tier] = (
                verdict(job, s)
                if s.block_until_done
                else pulumi.Output.from_input(
                    f"not awaited: kubectl -n {s.namespace} logs job/acceptance-{tier} | tail -n 1"
                )
            )
        self.register_outputs({"jobs": self.jobs, "verdicts": self.verdicts})


def verdict(job: k8s.batch.v1.Job, s: AcceptanceSettings) -> pulumi.Output[str]:
    """What the awaited Job's status says (a Job that fails also fails the update)."""

    def read(status: Any) -> str:
        if status and getattr(status, "succeeded", None):
            return "passed"
        return "failed" if status and getattr(status, "failed", None) else "unknown"

    return job.status.apply(read)
