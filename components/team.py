"""TeamWorkspace: what a team adds to a cluster where the platform is already installed.

A namespace with storage quotas per tier and container defaults (``quotas``), a Volcano Queue, a dataset on
the cold tier (a cold-tier claim, or a Fluid Dataset with a JuiceFSRuntime over the platform's JuiceFS
volume), a checkpoint-tier claim with scheduled snapshots and offsite copies (``checkpoints``), and a training
job: a Kubeflow TrainJob or a Volcano Job (``jobs``). A Fluid dataset needs a privileged namespace: Fluid runs
the runtime's FUSE pods (privileged) in the dataset's namespace. Nothing here installs a chart: Volcano,
Fluid and the Trainer are the platform's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

import pulumi
import pulumi_kubernetes as k8s
from pydantic import Field

from . import kube, volcano
from .checkpoints import CheckpointProtection, OffsiteTarget, checkpoint_claim, protect_checkpoints
from .fluid_dataset import DatasetCache, DatasetSettings, credentials
from .fluid_dataset import dataset as fluid_dataset
from .jobs import JobSettings, train_job_spec, volcano_job_spec
from .juicefs import JuiceFSSource
from .quotas import QuotaSettings, limit_range_spec, over_quota, quota_spec
from .section import DnsLabel, Problem, Quantity, Section, SettingsError, validate
from .settings import load_profile, merge
from .storage_tiers import NAME_PREFIX, Tier


class TeamDatasetSettings(Section):
    """The team's training dataset on the cold tier, mounted read-only at `/data`."""

    name: DnsLabel = "dataset"
    """Name of the claim the pods mount (the Fluid Dataset's name with `source: fluid`)."""
    source: Literal["claim", "fluid"] = "claim"
    """`claim`: a cold-tier claim; `fluid`: a Fluid Dataset and JuiceFSRuntime over the platform's JuiceFS volume."""
    size: Quantity = "100Gi"
    """Requested size of the cold-tier claim (`source: claim`)."""
    fluid: DatasetCache = DatasetCache()
    """Directory in the JuiceFS volume, cache workers, cache levels and pre-warm (`source: fluid`)."""


class WorkspaceSettings(Section):
    """The team's namespace and how its pods and claims are guarded."""

    namespace: DnsLabel = "team"
    """Namespace of the team's claims, dataset and TrainJob."""
    pod_security: kube.PodSecurity = "restricted"
    """Pod Security Standard the namespace enforces (`privileged` is needed for a Fluid dataset)."""
    run_as_user: int = Field(kube.UID, ge=1, le=2147483647)
    """UID, GID and fsGroup the training pods run as (non-root, for the restricted standard)."""
    tier_prefix: str = Field("", pattern=NAME_PREFIX)
    """The platform's `tiers.namePrefix`: the claims use the `<prefix>cold` and `<prefix>checkpoint` classes."""
    protect: bool = False
    """Protect and retain the dataset and checkpoint claims (a `pulumi destroy` keeps the data)."""
    platform_stack: str | None = Field(None, pattern=r"^[^/\s]+/[^/\s]+/[^/\s]+$")
    """The platform's stack (`org/project/stack`), whose object store takes the offsite checkpoint copies."""


class CheckpointSettings(CheckpointProtection):
    """The checkpoint-tier claim mounted at `/checkpoints`, its snapshots and its offsite copies."""

    claim: DnsLabel = "checkpoints"
    """Name of the claim."""
    size: Quantity = "100Gi"
    """Requested size of the claim."""


class TeamSettings(Section):
    """A team's workspace, by section: namespace, quotas, queue, dataset, checkpoint claim and job."""

    environment: str | None = None
    """Platform environment profile (`dev`, `staging`, `prod`) whose team defaults (`teams.quota`) apply."""
    workspace: WorkspaceSettings = WorkspaceSettings()
    """Namespace, Pod Security, pod user, StorageClass prefix and protection."""
    queue: volcano.QueueSettings = volcano.QueueSettings(name="team")
    """The team's Volcano Queue (cluster-scoped: its name must be unique on the cluster)."""
    dataset: TeamDatasetSettings = TeamDatasetSettings()
    """Dataset on the cold tier."""
    checkpoint: CheckpointSettings = CheckpointSettings()
    """Claim on the checkpoint tier, its snapshots and offsite copies."""
    job: JobSettings = JobSettings()
    """The training job (TrainJob or Volcano Job)."""
    quota: QuotaSettings = QuotaSettings()
    """Storage quotas per tier and container defaults of the namespace."""

    def problems(self) -> list[Problem]:
        """A Fluid dataset outside a privileged namespace, claim names used twice, claims over the quota."""
        found = self._own_claims_over_quota()
        if self.dataset.source == "fluid" and self.workspace.pod_security != "privileged":
            found.append(
                Problem(
                    "workspace.podSecurity",
                    "expected privileged with dataset.source: fluid",
                    self.workspace.pod_security,
                    "Fluid runs the dataset's FUSE pods (privileged) in this namespace; use source: claim to "
                    "keep the namespace restricted",
                )
            )
        if self.checkpoint.claim == self.dataset.name:
            found.append(
                Problem(
                    "checkpoint.claim",
                    "expected a claim name other than dataset.name",
                    self.checkpoint.claim,
                    "the dataset and the checkpoints are two claims in one namespace",
                )
            )
        return found

    def _own_claims_over_quota(self) -> list[Problem]:
        claims: dict[Tier, list[tuple[str, str]]] = {"checkpoint": [("checkpoint.size", self.checkpoint.size)]}
        if self.dataset.source == "claim":
            claims["cold"] = [("dataset.size", self.dataset.size)]
        return over_quota(self.quota, claims)


def platform_offsite(stack: str) -> OffsiteTarget:
    """The platform's bucket, from the outputs of its stack (a StackReference; a missing output fails the update
    with its name)."""
    platform = pulumi.StackReference(stack)
    return OffsiteTarget(
        platform.require_output("objectStoreStorage"),
        platform.require_output("objectStoreBucketUrl"),
        platform.require_output("objectStoreAccessKey"),
        platform.require_output("objectStoreSecretKey"),
    )


def load_team_settings(config: Mapping[str, Any]) -> TeamSettings:
    """Code defaults < the environment profile's team defaults (when `environment` is set) < the project's
    config (one object per section); raise SettingsError on any bad value."""
    environment = config.get("environment")
    try:
        defaults = load_profile(environment).get("teams", {}) if isinstance(environment, str) else {}
    except SettingsError as exc:  # an unknown profile, reported under this key
        raise SettingsError([replace(p, key="environment") for p in exc.problems]) from None
    return validate(TeamSettings, merge(defaults, config))


@dataclass
class TeamWorkspaceArgs:
    """Inputs of a TeamWorkspace."""

    settings: TeamSettings
    juicefs: JuiceFSSource | None = None
    """The platform's JuiceFS volume and its credentials (`dataset.source: fluid` only)."""
    offsite: OffsiteTarget | None = None
    """The platform's bucket for offsite checkpoint copies (none: no offsite copy)."""


class TeamWorkspace(pulumi.ComponentResource):
    """A team's namespace with quotas, Volcano Queue, cold-tier dataset, protected checkpoint claim and job."""

    namespace: pulumi.Output[str]
    """Name of the team's namespace."""
    queue: pulumi.Output[str]
    """Name of the team's Queue."""
    dataset_claim: pulumi.Output[str]
    """Name of the claim mounted at `/data` (Fluid creates it, named after the Dataset, with `source: fluid`)."""
    checkpoint_claim: pulumi.Output[str]
    """Name of the claim mounted at `/checkpoints`."""
    train_job: pulumi.Output[str] | None
    """Name of the TrainJob or Volcano Job (None when `job.enabled` is false)."""

    def __init__(self, name: str, args: TeamWorkspaceArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("ai-storage:team:TeamWorkspace", name, None, opts)
        s = args.settings
        w = s.workspace
        ns = kube.namespace(f"{name}-ns", w.namespace, w.pod_security, self)
        self.namespace = ns.metadata.name
        self._quotas(name, s, ns)
        queue = volcano.queue(f"{name}-queue", s.queue, pulumi.ResourceOptions(parent=self))
        self.queue = queue.metadata["name"]
        dataset, self.dataset_claim = self._dataset(name, s, ns, args.juicefs)
        checkpoints = checkpoint_claim(
            f"{name}-checkpoints",
            s.checkpoint.claim,
            ns.metadata.name,
            f"{w.tier_prefix}checkpoint",
            s.checkpoint.size,
            kube.stateful(self, w.protect),
        )
        self.checkpoint_claim = checkpoints.metadata.name
        protect_checkpoints(
            f"{name}-checkpoints", s.checkpoint.claim, w.namespace, s.checkpoint, args.offsite, self, [ns, checkpoints]
        )
        self.train_job = self._job(name, s, ns, [queue, dataset, checkpoints]) if s.job.enabled else None
        self.register_outputs(
            {
                "namespace": self.namespace,
                "queue": self.queue,
                "dataset_claim": self.dataset_claim,
                "checkpoint_claim": self.checkpoint_claim,
                "train_job": self.train_job,
            }
        )

    def _quotas(self, name: str, s: TeamSettings, ns: k8s.core.v1.Namespace) -> None:
        """The namespace's storage quotas per tier and its container defaults."""
        labels = kube.labels("team", "quota")
        child = pulumi.ResourceOptions(parent=self)
        meta = {"name": "storage", "namespace": ns.metadata.name, "labels": labels}
        k8s.core.v1.ResourceQuota(
            f"{name}-quota", metadata=meta, spec=quota_spec(s.quota, s.workspace.tier_prefix), opts=child
        )
        meta = {"name": "defaults", "namespace": ns.metadata.name, "labels": labels}
        k8s.core.v1.LimitRange(f"{name}-limits", metadata=meta, spec=limit_range_spec(s.quota), opts=child)

    def _job(
        self, name: str, s: TeamSettings, ns: k8s.core.v1.Namespace, after: list[pulumi.Resource]
    ) -> pulumi.Output[str]:
        """The training job: a TrainJob on a platform runtime, or a Volcano Job."""
        uid, claims = s.workspace.run_as_user, (s.dataset.name, s.checkpoint.claim)
        if s.job.kind == "volcano":
            api, kind, spec = "batch.volcano.sh/v1alpha1", "Job", volcano_job_spec(s.job, s.queue.name, uid, *claims)
        else:
            api, kind, spec = (
                "trainer.kubeflow.org/v1alpha1",
                "TrainJob",
                train_job_spec(s.job, s.queue.name, uid, *claims),
            )
        job = k8s.apiextensions.CustomResource(
            f"{name}-trainjob" if kind == "TrainJob" else f"{name}-volcano-job",
            api_version=api,
            kind=kind,
            metadata={"name": s.job.name, "namespace": ns.metadata.name, "labels": kube.labels("team", kind.lower())},
            spec=spec,
            opts=pulumi.ResourceOptions(parent=self, depends_on=after),
        )
        return job.metadata["name"]

    def _dataset(
        self, name: str, s: TeamSettings, ns: k8s.core.v1.Namespace, juicefs: JuiceFSSource | None
    ) -> tuple[pulumi.Resource, pulumi.Output[str]]:
        """The dataset pods mount at /data, and its claim's name: a Fluid Dataset over the JuiceFS volume, or a
        claim on the cold tier."""
        d, w = s.dataset, s.workspace
        child = pulumi.ResourceOptions(parent=self)
        if d.source == "fluid":
            if juicefs is None:
                raise TypeError("TeamWorkspaceArgs.juicefs is required with dataset.source: fluid")
            secret = credentials(f"{name}-credentials", "juicefs", ns.metadata.name, juicefs, child)
            settings = DatasetSettings(name=d.name, namespace=w.namespace, runtime="juicefs", **dict(d.fluid))
            dataset = fluid_dataset(name, d.name, settings, ns.metadata.name, secret.metadata.name, juicefs, child)
            return dataset, dataset.metadata["name"]
        claim = k8s.core.v1.PersistentVolumeClaim(
            f"{name}-dataset",
            metadata={"name": d.name, "namespace": ns.metadata.name, "labels": kube.labels("team", "dataset")},
            spec={
                "accessModes": ["ReadWriteMany"],
                "storageClassName": f"{w.tier_prefix}cold",
                "resources": {"requests": {"storage": d.size}},
            },
            opts=kube.stateful(self, w.protect),
        )
        return claim, claim.metadata.name
