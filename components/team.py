"""TeamWorkspace: what a team adds to a cluster where the platform is already installed.

A namespace, a Volcano Queue, a dataset on the cold tier (a cold-tier claim, or a Fluid Dataset with a
JuiceFSRuntime over the platform's JuiceFS volume), a checkpoint-tier claim, and optionally a Kubeflow
Trainer v2 TrainJob. The TrainJob names a ClusterTrainingRuntime the platform installed and patches its
``node`` pods through ``spec.runtimePatches``: the team's queue, the dataset read-only at ``/data``, the
checkpoint claim at ``/checkpoints``, and a non-root security context so the namespace can enforce the
restricted Pod Security Standard. A Fluid dataset needs a privileged namespace: Fluid runs the runtime's FUSE
pods (privileged) in the dataset's namespace. Nothing here installs a chart: Volcano, Fluid and the Trainer
are the platform's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import pulumi
import pulumi_kubernetes as k8s
from pydantic import Field

from . import kube, training, volcano
from .fluid_dataset import DatasetCache, DatasetSettings, credentials
from .fluid_dataset import dataset as fluid_dataset
from .juicefs import JuiceFSSource
from .section import DnsLabel, Problem, Quantity, Section, validate
from .storage_tiers import NAME_PREFIX

PATCH_MANAGER = "ai-storage-platform/team-workspace"
"""Owner of the TrainJob's runtime patch (a domain-prefixed path, as the Trainer requires)."""


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


class TrainJobSettings(Section):
    """A Kubeflow Trainer v2 TrainJob on a ClusterTrainingRuntime the platform installed."""

    enabled: bool = True
    """Create the TrainJob."""
    name: str = Field("train", pattern=r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
    """TrainJob name (an RFC 1035 label: starts with a letter)."""
    runtime: DnsLabel = "torch-distributed"
    """ClusterTrainingRuntime to run on (one of the platform's `training.runtimes`)."""
    image: str | None = Field(None, pattern=training.PINNED_IMAGE)
    """Trainer image, pinned by tag or digest; unset uses the runtime's."""
    command: list[str] = []
    """Entrypoint of the trainer container; empty uses the runtime's."""
    args: list[str] = []
    """Arguments of the trainer container."""
    num_nodes: int | None = Field(None, ge=1, le=4096)
    """Training nodes (pods); unset uses the runtime's."""
    resources_per_node: volcano.QueueResources | None = None
    """CPU, memory and GPUs each node is limited to (and requests)."""


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


class CheckpointSettings(Section):
    """The checkpoint-tier claim mounted at `/checkpoints`."""

    claim: DnsLabel = "checkpoints"
    """Name of the claim."""
    size: Quantity = "100Gi"
    """Requested size of the claim."""


class TeamSettings(Section):
    """A team's workspace, by section: namespace, queue, dataset, checkpoint claim and TrainJob."""

    workspace: WorkspaceSettings = WorkspaceSettings()
    """Namespace, Pod Security, pod user, StorageClass prefix and protection."""
    queue: volcano.QueueSettings = volcano.QueueSettings(name="team")
    """The team's Volcano Queue (cluster-scoped: its name must be unique on the cluster)."""
    dataset: TeamDatasetSettings = TeamDatasetSettings()
    """Dataset on the cold tier."""
    checkpoint: CheckpointSettings = CheckpointSettings()
    """Claim on the checkpoint tier."""
    job: TrainJobSettings = TrainJobSettings()
    """The TrainJob."""

    def problems(self) -> list[Problem]:
        """A Fluid dataset outside a privileged namespace, and claim names used twice."""
        found = []
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


def load_team_settings(config: Mapping[str, Any]) -> TeamSettings:
    """Code defaults < the project's config (one object per section); raise SettingsError on any bad value."""
    return validate(TeamSettings, config)


def train_job_spec(s: TeamSettings) -> dict[str, Any]:
    """The ``spec`` of the TrainJob: the runtime by name, the trainer overrides, and a patch of the runtime's
    ``node`` pods with the team's queue, the /data and /checkpoints claims and a non-root security context."""
    job = s.job
    queue = {volcano.QUEUE_ANNOTATION: s.queue.name}
    uid = s.workspace.run_as_user
    mounts, volumes = training.claim_volumes(s.dataset.name, s.checkpoint.claim)
    # Training code writes caches and temporary files: the root filesystem stays writable.
    container_security = {**kube.restricted_container(uid), "readOnlyRootFilesystem": False}
    pod = {
        "metadata": {"annotations": queue},
        "spec": {
            "securityContext": kube.restricted_pod(uid),
            "containers": [{"name": training.NODE, "volumeMounts": mounts, "securityContext": container_security}],
            "volumes": volumes,
        },
    }
    patch = {
        "manager": PATCH_MANAGER,
        "trainingRuntimeSpec": {
            "template": {
                # The Trainer's Volcano plugin reads the PodGroup's queue from the JobSet template's annotations.
                "metadata": {"annotations": queue},
                "spec": {"replicatedJobs": [{"name": training.NODE, "template": {"spec": {"template": pod}}}]},
            }
        },
    }
    trainer: dict[str, Any] = {}
    if job.image:
        trainer["image"] = job.image
    if job.command:
        trainer["command"] = job.command
    if job.args:
        trainer["args"] = job.args
    if job.num_nodes is not None:
        trainer["numNodes"] = job.num_nodes
    if job.resources_per_node:
        trainer["resourcesPerNode"] = {"limits": job.resources_per_node.spec()}
    spec: dict[str, Any] = {"runtimeRef": {"name": job.runtime}, "runtimePatches": [patch]}
    if trainer:
        spec["trainer"] = trainer
    return spec


@dataclass
class TeamWorkspaceArgs:
    """Inputs of a TeamWorkspace."""

    settings: TeamSettings
    juicefs: JuiceFSSource | None = None
    """The platform's JuiceFS volume and its credentials (`dataset.source: fluid` only)."""


class TeamWorkspace(pulumi.ComponentResource):
    """A team's namespace, Volcano Queue, cold-tier dataset, checkpoint claim and TrainJob."""

    namespace: pulumi.Output[str]
    """Name of the team's namespace."""
    queue: pulumi.Output[str]
    """Name of the team's Queue."""
    dataset_claim: pulumi.Output[str]
    """Name of the claim mounted at `/data` (Fluid creates it, named after the Dataset, with `source: fluid`)."""
    checkpoint_claim: pulumi.Output[str]
    """Name of the claim mounted at `/checkpoints`."""
    train_job: pulumi.Output[str] | None
    """Name of the TrainJob (None when `job.enabled` is false)."""

    def __init__(self, name: str, args: TeamWorkspaceArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("ai-storage:team:TeamWorkspace", name, None, opts)
        s = args.settings
        w = s.workspace
        ns = kube.namespace(f"{name}-ns", w.namespace, w.pod_security, self)
        self.namespace = ns.metadata.name
        queue = volcano.queue(f"{name}-queue", s.queue, pulumi.ResourceOptions(parent=self))
        self.queue = queue.metadata["name"]
        dataset, self.dataset_claim = self._dataset(name, s, ns, args.juicefs)
        checkpoints = training.checkpoint_claim(
            f"{name}-checkpoints",
            s.checkpoint.claim,
            ns.metadata.name,
            f"{w.tier_prefix}checkpoint",
            s.checkpoint.size,
            kube.stateful(self, w.protect),
        )
        self.checkpoint_claim = checkpoints.metadata.name
        self.train_job = None
        if s.job.enabled:
            job = k8s.apiextensions.CustomResource(
                f"{name}-trainjob",
                api_version="trainer.kubeflow.org/v1alpha1",
                kind="TrainJob",
                metadata={"name": s.job.name, "namespace": ns.metadata.name, "labels": kube.labels("team", "trainjob")},
                spec=train_job_spec(s),
                opts=pulumi.ResourceOptions(parent=self, depends_on=[queue, dataset, checkpoints]),
            )
            self.train_job = job.metadata["name"]
        self.register_outputs(
            {
                "namespace": self.namespace,
                "queue": self.queue,
                "dataset_claim": self.dataset_claim,
                "checkpoint_claim": self.checkpoint_claim,
                "train_job": self.train_job,
            }
        )

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
