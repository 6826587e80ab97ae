"""A team's training job: a Kubeflow Trainer v2 TrainJob, or a Volcano ``batch.volcano.sh`` Job.

Both run in the team's queue, mount the dataset read-only at ``/data`` and the checkpoint claim at
``/checkpoints``, and run non-root so the namespace can enforce the restricted Pod Security Standard. A
TrainJob names a ClusterTrainingRuntime the platform installed and patches its ``node`` pods through
``spec.runtimePatches``; a Volcano Job is gang-scheduled as a whole (``minAvailable``) and restarted as a whole
when a pod is evicted or fails (its ``policies``), with the ``svc`` and ``ssh`` plugins that distributed
launchers (torchrun, MPI) need to find their peers. A Volcano Job labels its pods and declares the metrics port
for the training metrics' PodMonitor; a TrainJob's pods get both from the platform's runtime (a runtime patch
cannot add ports, and the Trainer refuses patch changes to a running TrainJob).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from . import training, volcano
from .common import kube
from .sections import DnsLabel, PinnedImage, Problem, Section

PATCH_MANAGER = "ai-storage-platform/team-workspace"
"""Owner of the TrainJob's runtime patch (a domain-prefixed path, as the Trainer requires)."""
VOLCANO_TASK = "worker"
RESTART_ON = ("PodEvicted", "PodFailed")
"""Events after which a Volcano Job restarts as a whole (a gang with a lost member cannot go on)."""


class JobSettings(Section):
    """The team's training job: a TrainJob on a platform runtime, or a Volcano Job."""

    enabled: bool = True
    """Create the job."""
    kind: Literal["trainjob", "volcano"] = "trainjob"
    """`trainjob`: a Kubeflow Trainer v2 TrainJob on a platform runtime; `volcano`: a Volcano batch Job."""
    name: str = Field("train", pattern=r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
    """Job name (an RFC 1035 label: starts with a letter)."""
    runtime: DnsLabel = "torch-distributed"
    """ClusterTrainingRuntime to run on (one of the platform's `training.runtimes`; `trainjob` only)."""
    image: PinnedImage | None = None
    """Trainer image, pinned by a version tag (not `latest`) or a digest; unset: the runtime's (`volcano` needs one)."""
    command: list[str] = []
    """Entrypoint of the trainer container; empty uses the image's (or the runtime's)."""
    args: list[str] = []
    """Arguments of the trainer container."""
    num_nodes: int | None = Field(None, ge=1, le=4096)
    """Training nodes (pods); unset uses the runtime's (`volcano`: 1)."""
    resources_per_node: volcano.QueueResources | None = None
    """CPU, memory and GPUs each node is limited to (and requests)."""
    min_available: int | None = Field(None, ge=1, le=4096)
    """Pods Volcano must place together before any starts (`volcano`; unset: every node)."""
    max_retry: int = Field(3, ge=0, le=100)
    """Whole-job restarts Volcano makes before the job fails (`volcano`)."""
    plugins: list[Literal["ssh", "svc", "env"]] = ["ssh", "svc"]
    """Volcano job plugins: `svc` gives pods stable peer names, `ssh` passwordless SSH between them (`volcano`)."""

    def problems(self) -> list[Problem]:
        """A Volcano Job has no runtime to take the image from, and cannot need more pods than it has."""
        found = []
        if self.enabled and self.kind == "volcano" and self.image is None:
            found.append(Problem("image", "expected an image with kind: volcano", None, "no runtime supplies one"))
        nodes = self.num_nodes or 1
        if self.kind == "volcano" and self.min_available is not None and self.min_available > nodes:
            expected = f"expected at most numNodes ({nodes})"
            found.append(Problem("minAvailable", expected, self.min_available, "the gang could never be placed"))
        return found


def _trainer_overrides(job: JobSettings) -> dict[str, Any]:
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
    return trainer


def team_pod(
    queue: str,
    uid: int,
    dataset_claim: str,
    checkpoint_claim: str,
    container: dict[str, Any],
    landing: dict[str, list[dict[str, Any]]] | None = None,
) -> dict:
    """A training pod of the team: its queue, non-root as ``uid``, the /data and /checkpoints claims mounted in
    ``container`` (whose root filesystem stays writable: training code writes caches and temporary files), the
    metrics' multiprocess directory (``training.metrics_dir``) and the checkpoint ``landing`` volume, mount and
    variables (``checkpoints.landing``) when given."""
    mounts, volumes = training.claim_volumes(dataset_claim, checkpoint_claim)
    security = {**kube.restricted_container(uid), "readOnlyRootFilesystem": False}
    container = {**container, "volumeMounts": mounts, "securityContext": security}
    for extra in (training.metrics_dir(), landing or {}):
        if extra.get("volumes"):
            container["env"] = [*container.get("env", []), *extra["env"]]
            container["volumeMounts"] = [*container["volumeMounts"], *extra["volumeMounts"]]
            volumes = [*volumes, *extra["volumes"]]
    return {
        "metadata": {"annotations": {volcano.QUEUE_ANNOTATION: queue}},
        "spec": {
            "securityContext": {**kube.restricted_pod(uid), **kube.ON_ROOT_MISMATCH},
            "containers": [container],
            "volumes": volumes,
        },
    }


def train_job_spec(
    job: JobSettings,
    queue: str,
    uid: int,
    dataset_claim: str,
    checkpoint_claim: str,
    landing: dict[str, list[dict[str, Any]]] | None = None,
) -> dict:
    """The ``spec`` of the TrainJob: the runtime by name, the trainer overrides, and a patch of the runtime's
    ``node`` pods with the team's queue, claims, checkpoint ``landing`` and non-root security context."""
    pod = team_pod(queue, uid, dataset_claim, checkpoint_claim, {"name": training.NODE}, landing)
    patch = {
        "manager": PATCH_MANAGER,
        "trainingRuntimeSpec": {
            "template": {
                # The Trainer's Volcano plugin reads the PodGroup's queue from the JobSet template's annotations.
                "metadata": {"annotations": {volcano.QUEUE_ANNOTATION: queue}},
                "spec": {"replicatedJobs": [{"name": training.NODE, "template": {"spec": {"template": pod}}}]},
            }
        },
    }
    spec: dict[str, Any] = {"runtimeRef": {"name": job.runtime}, "runtimePatches": [patch]}
    trainer = _trainer_overrides(job)
    if trainer:
        spec["trainer"] = trainer
    return spec


def volcano_job_spec(
    job: JobSettings,
    queue: str,
    uid: int,
    dataset_claim: str,
    checkpoint_claim: str,
    landing: dict[str, list[dict[str, Any]]] | None = None,
) -> dict:
    """The ``spec`` of the Volcano Job: one task of ``numNodes`` pods, gang-scheduled in the team's queue,
    restarted as a whole on an evicted or failed pod; the claims and ``landing`` as for ``team_pod``."""
    nodes = job.num_nodes or 1
    ports, env = training.metrics_port()
    container: dict[str, Any] = {"name": VOLCANO_TASK, "image": job.image, "ports": ports, "env": env}
    if job.command:
        container["command"] = job.command
    if job.args:
        container["args"] = job.args
    if job.resources_per_node:
        resources = job.resources_per_node.spec()
        container["resources"] = {"requests": resources, "limits": resources}
    pod = team_pod(queue, uid, dataset_claim, checkpoint_claim, container, landing)
    pod["metadata"]["labels"] = dict(training.METRICS_LABELS)
    pod["spec"]["restartPolicy"] = "Never"  # Volcano restarts the whole gang, not single pods
    return {
        "schedulerName": volcano.SCHEDULER_NAME,
        "queue": queue,
        "minAvailable": job.min_available or nodes,
        "maxRetry": job.max_retry,
        "policies": [{"event": event, "action": "RestartJob"} for event in RESTART_ON],
        "plugins": {plugin: [] for plugin in job.plugins},
        "tasks": [{"name": VOLCANO_TASK, "replicas": nodes, "template": pod}],
    }
