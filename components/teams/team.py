"""TeamWorkspace: what a team adds, from its own Pulumi project, inside the namespace the platform vended to it.

The platform stack (``tenants``, settings ``teams.workspaces``) creates the team's namespace with its quotas,
its Volcano Queue, its read-only dataset claims and writable space, and what offsite copies need; this
component creates the team's own claims (a cold-tier dataset, or nothing when it mounts a shared dataset the
platform vended), a checkpoint-tier claim with scheduled snapshots, offsite copies (``checkpoints``) and restore
tests (``checkpoint_restore``), and a training job: a Kubeflow TrainJob or a Volcano Job (``jobs``), optionally
with a node-local checkpoint landing volume on the hot tier. The job saves under ``/checkpoints/<job name>``. It
holds no key of the platform and reads no output of the platform's stack: the offsite copies use the
ServiceAccount, ConfigMap and Secret the platform delivered into the namespace, by their documented names
(``tenants``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import pulumi
import pulumi_kubernetes as k8s

from ..common import kube
from ..common.sections import DnsLabel, Problem, Quantity, Section, validate
from ..protection.checkpoint_restore import RestoreTestSettings, schedule_restore_test
from ..protection.checkpoints import (
    CHECKPOINT_PATH,
    CheckpointProtection,
    DeliveredOffsite,
    LandingSettings,
    checkpoint_claim,
    landing,
    protect_checkpoints,
)
from ..tiers.storage_tiers import Tier
from ..training.job_kinds import API, TRAINJOB_HINT, job_spec, scrape_policy, train_job_spec, trainjob_webhook_errors
from ..training.job_volumes import pod_requests, volume_problems
from ..training.jobs import JobSettings, PodContext, pod_paths
from ..training.node_pools import pool_problem
from ..training.staging import StagingSettings, stage_into
from ..training.trainer import DataTier
from ..training.volcano import amount_text
from . import tenants
from .quotas import QuotaSettings, over_quota
from .workspace import WorkspaceSettings

DELIVERED = DeliveredOffsite(tenants.OFFSITE_ACCOUNT, tenants.OFFSITE_TARGET, tenants.OFFSITE_CREDENTIALS)
"""What the platform delivers into a team's namespace for its offsite copies."""


class TeamDatasetSettings(Section):
    """The team's training dataset, mounted read-only at `/data`."""

    name: DnsLabel = "dataset"
    """Name of the claim the pods mount (with `source: shared`, a dataset the platform vended to the namespace)."""
    source: Literal["claim", "shared"] = "claim"
    """`claim`: the team's own cold-tier claim; `shared`: a read-only claim the platform vended (`teams.workspaces`
    `datasets` or `fluidDatasets`)."""
    size: Quantity = "100Gi"
    """Requested size of the cold-tier claim (`source: claim`)."""
    tier: DataTier = "cold"
    """Tier the dataset lives on: the team's own claim's StorageClass `<tierPrefix><tier>` (`source: claim`), or the
    vended claim's tier (`source: shared`; the platform's are cold). The pods' `ai-storage-platform/data-tier` label,
    by which the read alerts and panels group (with staging: hot)."""


class CheckpointSettings(CheckpointProtection):
    """The checkpoint-tier claim mounted at `/checkpoints`, its snapshots and its offsite copies."""

    claim: DnsLabel = "checkpoints"
    """Name of the claim."""
    size: Quantity = "100Gi"
    """Requested size of the claim."""
    landing: LandingSettings = LandingSettings()
    """A node-local volume of the hot tier in each training pod that checkpoints land on first."""
    restore_test: RestoreTestSettings = RestoreTestSettings()
    """A scheduled restore test of the newest checkpoint of the job (`/checkpoints/<job name>`)."""


class TeamSettings(Section):
    """A team's workspace, by section: namespace, queue, dataset, checkpoint claim and job."""

    workspace: WorkspaceSettings = WorkspaceSettings()
    """The vended namespace, pod user, StorageClass prefix and protection."""
    queue: DnsLabel | None = None
    """Volcano Queue the job runs in (the platform names a team's Queue after the team); unset: the namespace."""
    dataset: TeamDatasetSettings = TeamDatasetSettings()
    """Dataset mounted at `/data`."""
    checkpoint: CheckpointSettings = CheckpointSettings()
    """Claim on the checkpoint tier, its snapshots and offsite copies."""
    job: JobSettings = JobSettings()
    """The training job (TrainJob or Volcano Job)."""
    staging: StagingSettings = StagingSettings()
    """Stage a dataset version onto a node-local hot-tier volume before training (`job.kind: volcano`)."""

    @property
    def queue_name(self) -> str:
        """The Queue the job runs in."""
        return self.queue or self.workspace.namespace

    @property
    def checkpoint_dir(self) -> str:
        """Where the job keeps its durable checkpoints (on the checkpoint claim)."""
        return f"{CHECKPOINT_PATH}/{self.job.name}"

    def pods(self, local: dict[str, list[dict[str, Any]]] | None = None) -> PodContext:
        """Where the job's pods run and what they mount (``local``: the landing volume, ``checkpoints.landing``);
        with staging they read the copy on the hot tier."""
        w, tier = self.workspace, "hot" if self.staging.enabled else self.dataset.tier
        pool = w.node_pools.get(self.job.node_pool or "")
        claims = (self.dataset.name, self.checkpoint.claim, local or {}, tier, w.tier_prefix, pool)
        return PodContext(self.queue_name, w.run_as_user, *claims)

    def problems(self) -> list[Problem]:
        """The dataset and the checkpoints are two claims; a restore test needs an image; staging's rules
        (``_staging_problems``)."""
        found = []
        if self.checkpoint.claim == self.dataset.name:
            found.append(
                Problem(
                    "checkpoint.claim",
                    "expected a claim name other than dataset.name",
                    self.checkpoint.claim,
                    "the dataset and the checkpoints are two claims in one namespace",
                )
            )
        if self.dataset.source == "claim" and self.dataset.tier == "hot":
            hint = (
                "hot-tier volumes are node-local (ReadWriteOnce): keep the dataset on warm or cold and stage a version"
            )
            found.append(
                Problem("dataset.tier", "expected warm or cold with source: claim", "hot", hint + " (staging)")
            )
        test = self.checkpoint.restore_test
        if test.enabled and test.image is None and self.job.image is None:
            expected = "expected an image (or job.image) with restoreTest.enabled"
            found.append(Problem("checkpoint.restoreTest.image", expected, None, "the test runs the job's image"))
        return found + self._staging_problems() + self._kind_problems()

    def _kind_problems(self) -> list[Problem]:
        """The job's kind runs on the platform; image volumes need a cluster that keeps them; the gang fits its
        queue; a TrainJob's patch passes the Trainer's webhook."""
        found = []
        job, w = self.job, self.workspace
        if job.enabled and job.kind not in w.job_kinds:
            hint = (
                "copy the platform stack's output jobKinds into workspace.jobKinds; pytorchjob and tfjob need "
                "training-operator-v1 in the platform's training.operators, trainjob needs trainer-v2, volcano needs "
                "volcano.enabled"
            )
            expected = f"expected one of {', '.join(w.job_kinds)} (workspace.jobKinds, the platform's output jobKinds)"
            found.append(Problem("job.kind", expected, job.kind, hint))
        minor = int(w.kubernetes_version.split(".")[1])
        if any(v.image for v in job.volumes) and (minor < 33 or (minor < 35 and not w.image_volumes)):
            hint = (
                "Pod Security restricted admits image volumes from Kubernetes 1.33 (kubernetes#130394); on 1.33 and "
                "1.34 the ImageVolume feature gate is off by default and an API server without it drops the volume "
                "and its mount without a word: turn the gate on (kube-apiserver and kubelet) and set "
                "workspace.imageVolumes: true, or use Kubernetes 1.35+"
            )
            expected = "expected Kubernetes 1.35+, or 1.33+ with workspace.imageVolumes: true (the ImageVolume gate)"
            given = f"{w.kubernetes_version}, imageVolumes {w.image_volumes}"
            found.append(Problem("job.volumes", expected, given, hint))
        rendered = job.enabled and job.kind == "trainjob" and not any(v.problems() for v in job.volumes)
        webhook = trainjob_problems(self) if rendered else []
        taken = pod_paths(self.checkpoint.landing.enabled, self.staging.enabled)
        found += volume_problems(job.volumes, taken, w.vended_claims, tenants.SPACE_CLAIM)
        runtime = w.runtime_problem(job.runtime) if job.enabled and job.kind == "trainjob" else None
        found += [p for p in (pool_problem(job.node_pool, w.node_pools), runtime) if p]
        return found + self._gang_problems() + webhook + self._quota_problems()

    def _quota_problems(self) -> list[Problem]:
        """The stack's claims, and each pod's scratch, landing and staged volumes, within what the namespace's
        quota leaves it (``workspace.storageQuota``): the API server refuses the claim, or the pod, over it."""
        if not self.workspace.storage_quota:
            return []
        d, c, st, pods = self.dataset, self.checkpoint, self.staging, self.job.pods()
        claims: dict[Tier, list[tuple[str, str]]] = {}
        own: list[tuple[str, Tier, list[str]]] = [("checkpoint.size", "checkpoint", [c.size])]
        own += [("dataset.size", d.tier, [d.size])] if d.source == "claim" else []
        own += [("checkpoint.landing.size", "hot", [c.landing.size] * pods)] if c.landing.enabled else []
        if st.enabled:
            own.append(("staging.size", "hot", [st.size] * (1 if st.claim else self.job.pods("data"))))
        for key, tier, sizes in own + pod_requests(self.job.volumes, pods):
            claims.setdefault(tier, []).extend((key, size) for size in sizes)
        return over_quota(QuotaSettings(tiers=self.workspace.storage_quota), claims)

    def _gang_problems(self) -> list[Problem]:
        """Volcano enqueues a gang only when its pods' requests fit the queue's capability; otherwise the job stays
        Pending for ever, with no error anywhere."""
        cap = self.workspace.queue_capability
        if cap is None or not self.job.enabled:
            return []
        gang, limit = self.job.gang(), cap.amounts()
        over = [name for name, amount in gang.items() if name in limit and amount > limit[name]]
        if not over:
            return []
        asked = ", ".join(f"{name} {amount_text(name, gang[name])}" for name in over)
        allowed = ", ".join(f"{name} {amount_text(name, limit[name])}" for name in over)
        hint = (
            "Volcano never enqueues a gang larger than its queue: lower the pods' resources, the replicas or "
            "minAvailable, or raise the queue's capability on the platform (teams.workspaces[].queue.capability)"
        )
        expected = f"expected a gang within queue {self.queue_name}'s capability ({allowed})"
        return [Problem("job", expected, f"the gang's {self.job.min_available or 'pods'} ask {asked}", hint)]

    def _staging_problems(self) -> list[Problem]:
        """Staging needs a job whose pods can get an init container, and a hot claim of its own."""
        found = []
        st = self.staging
        if st.enabled and self.job.kind != "volcano":
            hint = (
                "a TrainJob's runtime patches can set only the env, mounts and securityContext of the runtime's own "
                "init containers (Trainer v2.3), not add one; use job.kind: volcano, or a platform runtime that "
                "stages (training.runtimes[].staging)"
            )
            found.append(Problem("staging.enabled", "expected job.kind: volcano", True, hint))
        if st.claim is not None and st.claim in (self.dataset.name, self.checkpoint.claim):
            expected = "expected a claim other than dataset.name and checkpoint.claim"
            found.append(
                Problem("staging.claim", expected, st.claim, "the staged copy needs a hot-tier claim of its own")
            )
        return found


def trainjob_problems(s: TeamSettings) -> list[Problem]:
    """What Kubeflow Trainer v2.3.0's validating webhook refuses in the TrainJob this workspace renders
    (``trainjob_webhook_errors``), as problems of the job's settings."""
    errors = trainjob_webhook_errors(train_job_spec(s.job, s.pods()))
    expected = "expected a TrainJob the Trainer's webhook admits"
    return [Problem("job", expected, error, TRAINJOB_HINT) for error in errors]


def load_team_settings(config: Mapping[str, Any]) -> TeamSettings:
    """The project's config (one object per section) over the code defaults; raise SettingsError on any bad
    value."""
    return validate(TeamSettings, config)


@dataclass
class TeamWorkspaceArgs:
    """Inputs of a TeamWorkspace."""

    settings: TeamSettings


class TeamWorkspace(pulumi.ComponentResource):
    """A team's dataset, protected checkpoint claim and job, in the namespace the platform vended to it."""

    namespace: pulumi.Output[str]
    """Name of the team's namespace."""
    queue: pulumi.Output[str]
    """Name of the Queue the job runs in."""
    dataset_claim: pulumi.Output[str]
    """Name of the claim mounted at `/data`."""
    checkpoint_claim: pulumi.Output[str]
    """Name of the claim mounted at `/checkpoints`."""
    train_job: pulumi.Output[str] | None
    """Name of the TrainJob or Volcano Job (None when `job.enabled` is false)."""

    def __init__(self, name: str, args: TeamWorkspaceArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("ai-storage:team:TeamWorkspace", name, None, opts)
        s = args.settings
        w = s.workspace
        self.namespace = pulumi.Output.from_input(w.namespace)
        self.queue = pulumi.Output.from_input(s.queue_name)
        dataset = self._dataset(name, s)
        self.dataset_claim = dataset.metadata.name if dataset else pulumi.Output.from_input(s.dataset.name)
        checkpoints = checkpoint_claim(
            f"{name}-checkpoints",
            s.checkpoint.claim,
            w.namespace,
            f"{w.tier_prefix}checkpoint",
            s.checkpoint.size,
            kube.stateful(self, w.protect),
        )
        self.checkpoint_claim = checkpoints.metadata.name
        protect_checkpoints(
            f"{name}-checkpoints", s.checkpoint.claim, w.namespace, s.checkpoint, DELIVERED, self, [checkpoints]
        )
        test = s.checkpoint.restore_test
        if test.enabled:
            image = test.image or s.job.image
            assert image is not None  # TeamSettings.problems
            where = (s.checkpoint.claim, w.namespace, s.checkpoint_dir)
            schedule_restore_test(f"{name}-checkpoints", *where, image, test, w.run_as_user, self, [checkpoints])
        after = [checkpoints, *([dataset] if dataset else [])]
        self.train_job = self._job(name, s, after) if s.job.enabled else None
        self.register_outputs(
            {
                "namespace": self.namespace,
                "queue": self.queue,
                "dataset_claim": self.dataset_claim,
                "checkpoint_claim": self.checkpoint_claim,
                "train_job": self.train_job,
            }
        )

    def _job(self, name: str, s: TeamSettings, after: list[pulumi.Resource]) -> pulumi.Output[str]:
        """The training job in its kind (``job_kinds``)."""
        local = landing(s.checkpoint.landing, f"{s.workspace.tier_prefix}hot", s.checkpoint_dir)
        spec = job_spec(s.job, s.pods(local))
        if s.job.kind == "volcano":
            _stage_dataset(spec, s)
        api, kind = API[s.job.kind]
        logical = {"trainjob": "trainjob", "volcano": "volcano-job"}.get(s.job.kind, s.job.kind)
        job = k8s.apiextensions.CustomResource(
            f"{name}-{logical}",
            api_version=api,
            kind=kind,
            metadata={
                "name": s.job.name,
                "namespace": s.workspace.namespace,
                "labels": kube.labels("team", kind.lower()),
            },
            spec=spec,
            opts=pulumi.ResourceOptions(parent=self, depends_on=after),
        )
        if (policy := scrape_policy(s.job, s.workspace.namespace)) is not None:  # Prometheus past the svc plugin
            k8s.networking.v1.NetworkPolicy(f"{name}-metrics", **policy, opts=pulumi.ResourceOptions(parent=self))
        return job.metadata["name"]

    def _dataset(self, name: str, s: TeamSettings) -> k8s.core.v1.PersistentVolumeClaim | None:
        """The team's own cold-tier claim (`source: claim`); a shared dataset's claim is the platform's."""
        d, w = s.dataset, s.workspace
        if d.source == "shared":
            return None
        return k8s.core.v1.PersistentVolumeClaim(
            f"{name}-dataset",
            metadata={"name": d.name, "namespace": w.namespace, "labels": kube.labels("team", "dataset")},
            spec={
                "accessModes": ["ReadWriteMany"],
                "storageClassName": f"{w.tier_prefix}{d.tier}",
                "resources": {"requests": {"storage": d.size}},
            },
            opts=kube.stateful(self, w.protect),
        )


def _stage_dataset(volcano_spec: dict[str, Any], s: TeamSettings) -> None:
    """With `staging.enabled`, the Volcano Job's pods that mount the dataset stage its version first (module
    ``staging``)."""
    if not (s.staging.enabled and s.job.image):
        return
    readers = {group.name for group in s.job.groups() if "data" in group.mounts}
    for task in volcano_spec["tasks"]:
        if task["name"] in readers:
            pod = task["template"]["spec"]
            stage_into(pod, s.staging, s.job.image, s.workspace.run_as_user, s.workspace.tier_prefix)
