"""Training: Kubeflow Trainer v2 and the v1 training-operator (either or both), gang-scheduled by Volcano.

Trainer v2 is the OCI chart as a Helm release with its JobSet dependency. Its built-in runtimes come from a
post-install hook Job that downloads kubectl at run time, so every built-in runtime is off (the hook exists only
while one is on) and the ClusterTrainingRuntimes are created here. Each runtime asks Volcano for gang scheduling
(``podGroupPolicy.volcano``), runs its pods with ``schedulerName: volcano`` and names its Queue
(``scheduling.volcano.sh/queue-name``) on the JobSet template (the Trainer's Volcano plugin reads it there) and on
the pod template. Pods mount a dataset claim read-only at ``/data`` and the checkpoint claim at ``/checkpoints``.

The v1 training-operator (PyTorchJob, TFJob) is ``training_operator_v1``.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any, Literal

import pulumi
import pulumi_kubernetes as k8s
from pydantic import Field

from ..common import kube, versions
from ..common.sections import ControllerSettings, DnsLabel, PinnedImage, Problem, Quantity, Section
from ..protection import checkpoints
from ..protection.checkpoints import (
    CHECKPOINT_PATH,
    CHECKPOINT_VOLUME,
    CheckpointProtection,
    OffsiteTarget,
    protect_checkpoints,
)
from ..tiers.node_storage import GPU_TOLERATION, Toleration
from . import training_operator_v1
from .staging import DATA_PATH, DATA_VOLUME, StagingSettings, stage_into
from .training_operator_v1 import V1_NAMESPACE
from .volcano import QUEUE_ANNOTATION, SCHEDULER_NAME

NODE = "node"
"""Name of the trainer's replicated job and of its container (Trainer v2's `node`)."""
METRICS_LABELS = {"ai-storage-platform/metrics": "training"}
"""Labels of the pods that run the training library (the platform's PodMonitor `training-jobs` selects them)."""
DATA_TIER_LABEL = "ai-storage-platform/data-tier"
"""The tier a training pod reads (onto its metrics by the PodMonitor: the read alerts group by it)."""
DataTier = Literal["hot", "warm", "cold"]
METRICS_PORT_NAME = "train-metrics"
METRICS_PORT = 9095
"""Port the training library serves its metrics on (`metrics.serve()`, from `$AI_STORAGE_METRICS_PORT`)."""
METRICS_DIR, METRICS_DIR_VOLUME, METRICS_DIR_SIZE = "/var/run/ai-storage-metrics", "metrics-dir", "64Mi"
"""prometheus_client's multiprocess directory in each training container (an emptyDir; about 16 KiB per process)."""
Operator = Literal["trainer-v2", "training-operator-v1"]
_BUILTIN_RUNTIMES = tuple(f"{name}Distributed" for name in ("torch", "deepspeed", "mlx", "jax", "xgboost"))
_TORCHTUNE_RUNTIMES = ("llama3_2_1B", "llama3_2_3B", "qwen2_5_1_5B")


class RuntimeSettings(Section):
    """One ClusterTrainingRuntime: a PyTorch distributed blueprint teams pick by name in a TrainJob."""

    name: DnsLabel
    """ClusterTrainingRuntime name."""
    queue: DnsLabel
    """Volcano queue the runtime's jobs are scheduled in (one of `volcano.queues`)."""
    num_nodes: int = Field(1, ge=1, le=4096)
    """Training nodes (pods) per job; the gang is scheduled all at once or not at all."""
    image: PinnedImage = versions.TORCH_RUNTIME_IMAGE
    """Trainer image, pinned by tag or digest; TrainJobs usually override it."""
    dataset_claim: DnsLabel
    """PVC mounted read-only at `/data` (a Fluid dataset's claim carries the dataset's name)."""
    external_claim: bool = False
    """`datasetClaim` is made outside the platform (by you, in `workloadNamespace`), not by a Fluid dataset."""
    data_tier: DataTier = "cold"
    """Tier of `datasetClaim` (Fluid's: cold): the pods' data-tier label, the read alerts' group (staged: hot)."""
    checkpoint_landing: checkpoints.LandingSettings = checkpoints.LandingSettings()
    """A node-local landing volume of the hot tier in each pod, for checkpoints promoted to `/checkpoints`."""
    staging: StagingSettings = StagingSettings()
    """Stage a dataset version onto a node-local hot-tier volume before the pods train (an init container running
    `image`, which must hold the training library; `source` is under the claim the TrainJob mounts at `/data`)."""
    gpu_tolerations: list[Toleration] = [GPU_TOLERATION]
    """Tolerations of the runtime's pods for the GPU nodes' taints (a TrainJob asks for GPUs through
    `resourcesPerNode`, which the runtime cannot see); empty: none."""

    def problems(self) -> list[Problem]:
        """The init container runs the runtime's image: it must be one with the training library."""
        if self.staging.enabled and self.image == versions.TORCH_RUNTIME_IMAGE:
            hint = "the stage-dataset init container runs `python -m ai_storage_training stage` in this image"
            expected = "expected an image with the training library (ai_storage_training) with staging.enabled"
            return [Problem("image", expected, self.image, hint)]
        return []


class TrainingSettings(Section):
    """The training operator and its runtimes."""

    enabled: bool = False
    """Install a training operator (needs `volcano.enabled`)."""
    operators: list[Operator] = ["trainer-v2"]
    """Operators to install, side by side: Kubeflow Trainer v2 (TrainJob, in `namespace`) and the v1 training-operator
    (PyTorchJob, TFJob..., in `kubeflow`); the stack output `jobKinds` says which team job kinds run."""
    namespace: DnsLabel = "kubeflow-system"
    """Namespace of the Trainer v2 controller (v1 always installs into `kubeflow`)."""
    workload_namespace: DnsLabel = "training"
    """Namespace TrainJobs run in; the checkpoint claim is created there."""
    checkpoint_claim: DnsLabel = "checkpoints"
    """PVC on the checkpoint tier mounted at `/checkpoints`."""
    checkpoint_size: Quantity = "100Gi"
    """Requested size of the checkpoint claim."""
    runtimes: list[RuntimeSettings] = []
    """ClusterTrainingRuntimes to create (Trainer v2 only)."""
    controllers: ControllerSettings = ControllerSettings()
    """Replicas and resources of the Trainer v2 controller manager and the JobSet controller."""

    def problems(self) -> list[Problem]:
        """At least one operator, each once; runtimes are Trainer v2 objects."""
        if not self.enabled:
            return []
        if not self.operators or len(set(self.operators)) < len(self.operators):
            hint = "list trainer-v2, training-operator-v1 or both, each once"
            return [Problem("operators", "expected one or two distinct operators", self.operators, hint)]
        if "trainer-v2" not in self.operators and self.runtimes:
            hint = "runtimes are Trainer v2 ClusterTrainingRuntimes: add trainer-v2 to operators"
            return [Problem("runtimes", "expected no runtimes without trainer-v2", len(self.runtimes), hint)]
        return []

    def operator_namespaces(self) -> dict[str, str]:
        """The namespaces the operators install into, by settings key."""
        owned = {"training": self.namespace} if "trainer-v2" in self.operators else {}
        return owned | ({"training.operators": V1_NAMESPACE} if "training-operator-v1" in self.operators else {})

    @property
    def job_kinds(self) -> list[str]:
        """The team job kinds this platform runs (``jobs.Kind``; Volcano Jobs need only Volcano)."""
        kinds = {"trainer-v2": ["trainjob"], "training-operator-v1": ["pytorchjob", "tfjob"]}
        return [kind for operator in self.operators for kind in kinds[operator]] if self.enabled else []


MANAGER_BUDGET = {kube.BUDGET_LABEL: "trainer-manager"}


def chart_values(c: ControllerSettings | None = None) -> dict[str, Any]:
    """Helm values of the kubeflow-trainer release: JobSet on, every built-in runtime (and so the runtime
    installer hook) off; with several replicas, a manager pod label for its PodDisruptionBudget and
    anti-affinity on it (the manager and JobSet controllers elect a leader)."""
    c = c or ControllerSettings()
    runtimes: dict[str, Any] = {"defaultEnabled": False}
    runtimes.update({r: {"enabled": False} for r in _BUILTIN_RUNTIMES})
    runtimes["torchtuneDistributed"] = {r: {"enabled": False} for r in _TORCHTUNE_RUNTIMES}
    manager: dict[str, Any] = {}
    jobset: dict[str, Any] = {"install": True}
    if c.replicas > 1:
        manager.update(replicas=c.replicas, labels=MANAGER_BUDGET, affinity=kube.spread(MANAGER_BUDGET))
        jobset["controller"] = {"replicas": c.replicas}
    if c.resources:
        manager["resources"] = c.resources.spec()
    values: dict[str, Any] = {
        "jobset": jobset,
        "image": {"tag": versions.TRAINER_IMAGE_TAG},
        "runtimes": runtimes,
        "dataCache": {"runtimes": {"torchDistributedWithCache": {"enabled": False}}},
    }
    if manager:
        values["manager"] = manager
    return values


def claim_volumes(dataset_claim: str, checkpoint_claim: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The trainer container's mounts and the pod's volumes: the dataset claim read-only at ``/data``, the
    checkpoint claim at ``/checkpoints``."""
    mounts: list[dict[str, Any]] = [
        {"name": DATA_VOLUME, "mountPath": DATA_PATH, "readOnly": True},
        {"name": CHECKPOINT_VOLUME, "mountPath": CHECKPOINT_PATH},
    ]
    volumes: list[dict[str, Any]] = [
        {"name": DATA_VOLUME, "persistentVolumeClaim": {"claimName": dataset_claim, "readOnly": True}},
        {"name": CHECKPOINT_VOLUME, "persistentVolumeClaim": {"claimName": checkpoint_claim}},
    ]
    return mounts, volumes


def trainer_port_and_env() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A training container's metrics port (named for the PodMonitor) and its environment: the variable the library
    reads the port from, and a fresh torchrun rendezvous store per attempt (``TORCH_DISABLE_SHARE_RDZV_TCP_STORE``:
    with the store shared, a restart under ``--max-restarts`` reads the previous attempt's addresses and fails,
    pytorch/pytorch#135712; the training library refuses such a launch)."""
    ports = [{"name": METRICS_PORT_NAME, "containerPort": METRICS_PORT, "protocol": "TCP"}]
    env = [{"name": "AI_STORAGE_METRICS_PORT", "value": str(METRICS_PORT)}]
    return ports, [*env, {"name": "TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "value": "1"}]


def metrics_dir() -> dict[str, list[dict[str, Any]]]:
    """A training container's ``PROMETHEUS_MULTIPROC_DIR``, so DataLoader workers' counters reach the scrape: an
    emptyDir (empty at pod start, mode 0777: writable by the non-root user), its mount and the variable (the
    shape of ``checkpoints.landing``)."""
    return {
        "volumeMounts": [{"name": METRICS_DIR_VOLUME, "mountPath": METRICS_DIR}],
        "env": [{"name": "PROMETHEUS_MULTIPROC_DIR", "value": METRICS_DIR}],
        "volumes": [{"name": METRICS_DIR_VOLUME, "emptyDir": {"sizeLimit": METRICS_DIR_SIZE}}],
    }


def runtime_spec(
    runtime: RuntimeSettings, checkpoint_claim: str, pod_labels: dict[str, str] | None = None, tier_prefix: str = ""
) -> dict[str, Any]:
    """The ``spec`` of a ClusterTrainingRuntime wired to Volcano, with the /data and /checkpoints mounts, its
    pods labelled and its container's port declared for the training metrics' PodMonitor (and, with
    ``staging.enabled``, the dataset staged onto a ``<tier_prefix>hot`` volume first: ``staging``; with
    ``checkpointLanding.enabled``, a checkpoint landing volume of that class: ``checkpoints.landing``)."""
    queue = {QUEUE_ANNOTATION: runtime.queue}
    tier = {DATA_TIER_LABEL: "hot" if runtime.staging.enabled else runtime.data_tier}  # staged: read on hot
    mounts, volumes = claim_volumes(runtime.dataset_claim, checkpoint_claim)
    ports, env = trainer_port_and_env()
    for extra in (metrics_dir(), checkpoints.landing(runtime.checkpoint_landing, f"{tier_prefix}hot", CHECKPOINT_PATH)):
        mounts, volumes, env = mounts + extra["volumeMounts"], volumes + extra["volumes"], env + extra["env"]
    container = {"name": NODE, "image": runtime.image, "ports": ports, "env": env, "volumeMounts": mounts}
    pod: dict[str, Any] = {
        "metadata": {"annotations": queue, "labels": {**METRICS_LABELS, **tier, **(pod_labels or {})}},
        "spec": {
            "schedulerName": SCHEDULER_NAME,
            "securityContext": dict(kube.ON_ROOT_MISMATCH),
            "containers": [container],
            "volumes": volumes,
        },
    }
    if runtime.gpu_tolerations:
        pod["spec"]["tolerations"] = [t.spec() for t in runtime.gpu_tolerations]
    if runtime.staging.enabled:
        stage_into(pod["spec"], runtime.staging, runtime.image, kube.UID, tier_prefix)
    return {
        "mlPolicy": {"numNodes": runtime.num_nodes, "torch": {}},
        "podGroupPolicy": {"volcano": {}},
        "template": {
            "metadata": {"annotations": queue},
            "spec": {
                "replicatedJobs": [
                    {
                        "name": NODE,
                        "template": {
                            "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                            "spec": {"template": pod},
                        },
                    }
                ]
            },
        },
    }


@dataclass
class TrainingArgs:
    """Inputs of Training."""

    settings: TrainingSettings
    volcano: pulumi.Resource
    """The Volcano release (installs the PodGroup CRD); the operator is installed after it."""
    checkpoint_class: pulumi.Input[str]
    """StorageClass of the checkpoint tier."""
    workload_namespace: k8s.core.v1.Namespace | None = None
    """The workload namespace when another component owns it (Fluid, for datasets in it)."""
    required_datasets: Collection[str] = field(default_factory=tuple)
    """Fluid datasets in the workload namespace whose cache nodes pods must run on (data affinity)."""
    protect: bool = False
    """Protect and retain the checkpoint claim."""
    protection: CheckpointProtection | None = None
    """Snapshots and offsite copies of the checkpoint claim (none: neither)."""
    offsite: OffsiteTarget | None = None
    """The bucket offsite copies go to."""
    tier_prefix: str = ""
    """The tiers' StorageClass name prefix (runtimes that stage use the `<prefix>hot` class)."""


class Training(pulumi.ComponentResource):
    """The training operator, the checkpoint claim and the Volcano-scheduled runtimes."""

    runtimes: list[pulumi.Output[str]]
    """Names of the ClusterTrainingRuntimes."""
    checkpoint_claim: pulumi.Output[str]
    """Name of the checkpoint PVC in the workload namespace."""

    def __init__(self, name: str, args: TrainingArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("ai-storage:training:Training", name, None, opts)
        s = args.settings
        # baseline, not restricted: common training images (pytorch/pytorch among them) run as root.
        workloads = args.workload_namespace or kube.namespace(
            f"{name}-workloads-ns", s.workload_namespace, "baseline", self
        )
        claim = checkpoints.checkpoint_claim(
            f"{name}-checkpoints",
            s.checkpoint_claim,
            workloads.metadata.name,
            args.checkpoint_class,
            s.checkpoint_size,
            kube.stateful(self, args.protect),
        )
        self.checkpoint_claim = claim.metadata.name
        if args.protection is not None:
            protect_checkpoints(
                f"{name}-checkpoints",
                s.checkpoint_claim,
                s.workload_namespace,
                args.protection,
                args.offsite,
                self,
                [workloads, claim],
            )
        self.runtimes = []
        if "trainer-v2" in s.operators:
            operator = self._trainer_v2(name, s, args.volcano)
            self.runtimes = [self._runtime(name, runtime, args, [operator, args.volcano]) for runtime in s.runtimes]
        if "training-operator-v1" in s.operators:
            training_operator_v1.install(f"{name}-training-operator-v1", self, args.volcano)
        self.register_outputs({"runtimes": self.runtimes, "checkpoint_claim": self.checkpoint_claim})

    def _runtime(
        self, name: str, runtime: RuntimeSettings, args: TrainingArgs, after: list[pulumi.Resource]
    ) -> pulumi.Output[str]:
        """A ClusterTrainingRuntime; its pods must run beside their dataset's cache where Fluid requires it."""
        required = runtime.dataset_claim in args.required_datasets
        labels = {f"fluid.io/dataset.{runtime.dataset_claim}.sched": "required"} if required else None
        cr = k8s.apiextensions.CustomResource(
            f"{name}-runtime-{runtime.name}",
            api_version="trainer.kubeflow.org/v1alpha1",
            kind="ClusterTrainingRuntime",
            metadata={"name": runtime.name, "labels": kube.labels("kubeflow-trainer", "runtime")},
            spec=runtime_spec(runtime, args.settings.checkpoint_claim, labels, args.tier_prefix),
            opts=pulumi.ResourceOptions(parent=self, depends_on=after),
        )
        return cr.metadata["name"]

    def _trainer_v2(self, name: str, s: TrainingSettings, volcano: pulumi.Resource) -> k8s.helm.v3.Release:
        # restricted: the manager and the JobSet controller run non-root, no capabilities, RuntimeDefault seccomp.
        ns = kube.namespace(f"{name}-ns", s.namespace, "restricted", self)
        pin = versions.KUBEFLOW_TRAINER
        release = kube.release(
            f"{name}-trainer",
            pin,
            ns.metadata.name,
            chart_values(s.controllers),
            self,
            depends_on=[volcano],
            wait=True,
        )
        if s.controllers.replicas > 1:
            kube.budget(f"{name}-manager-budget", "trainer-manager", s.namespace, MANAGER_BUDGET, self, [ns, release])
        return release
