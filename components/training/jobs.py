"""A team's training job, in the kind its framework needs, and the pods every kind shares.

Kinds: a Kubeflow Trainer v2 ``TrainJob`` (on a platform runtime), a Training Operator v1 ``PyTorchJob`` or
``TFJob`` (when the platform installs that operator), or a Volcano ``batch.volcano.sh`` Job of named tasks (the
specs: ``job_kinds``). Every pod of every kind runs in the team's queue, gang-scheduled by Volcano, non-root (the
namespace enforces the restricted Pod Security Standard), with the dataset read-only at ``/data`` and the
checkpoint claim at ``/checkpoints`` where its task mounts them, the metrics' multiprocess directory, the
checkpoint landing volume, the checkpoint tier's ``fsGroupChangePolicy``, the job's extra volumes (read-only
images, each pod's scratch claim, claims of the namespace: ``job_volumes``), a slice of ``/data`` of its own with
``dataSlices`` (``subPathExpr`` on the replica's index), and, when it requests GPUs, tolerations of the GPU nodes'
taints.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import Field

from ..common import kube
from ..common.sections import DnsLabel, PinnedImage, Problem, Section
from ..protection.checkpoints import LANDING_PATH, LANDING_VOLUME
from ..tiers.node_storage import GPU_TOLERATION, Toleration
from . import trainer as training
from . import volcano
from .job_volumes import JobVolume
from .node_pools import NodePool
from .staging import STAGED_PATH, STAGED_VOLUME
from .trainer import DATA_TIER_LABEL

Kind = Literal["trainjob", "pytorchjob", "tfjob", "volcano"]
Mount = Literal["data", "checkpoints"]
RESTART_ON = ("PodEvicted", "PodFailed")
"""Events after which a Volcano Job restarts as a whole (a gang with a lost member cannot go on)."""
TASK_NAMES: dict[str, tuple[str, ...]] = {"pytorchjob": ("master", "worker"), "tfjob": ("chief", "worker", "ps")}
"""The replica types a Training Operator v1 job has (its spec's keys, capitalized)."""
SLICE_VARIABLE = "AI_STORAGE_DATA_SLICE"
"""The replica's index in the container, which ``subPathExpr`` of the sliced ``/data`` mount expands."""
REPLICA_INDEX = {
    "trainjob": "metadata.annotations['batch.kubernetes.io/job-completion-index']",
    "volcano": "metadata.annotations['volcano.sh/task-index']",
    "pytorchjob": "metadata.labels['training.kubeflow.org/replica-index']",
    "tfjob": "metadata.labels['training.kubeflow.org/replica-index']",
}
"""Where a pod of each kind finds its index in its replica group: the Job controller's completion index (a
TrainJob's nodes are an Indexed Job), Volcano's task index, the v1 operator's replica-index label."""


class TaskSettings(Section):
    """A group of identical pods of the job (a Volcano task, a v1 replica type)."""

    name: DnsLabel
    """Task name (`pytorchjob`: master or worker; `tfjob`: chief, worker or ps; `volcano`: any)."""
    replicas: int = Field(1, ge=1, le=4096)
    """Pods of this task."""
    command: list[str] = []
    """Entrypoint of its container; empty: `job.command`."""
    args: list[str] = []
    """Arguments of its container; empty: `job.args`."""
    resources: volcano.QueueResources | None = None
    """CPU, memory and GPUs each of its pods requests and is limited to; unset: `job.resourcesPerNode`."""
    mounts: list[Mount] = ["data", "checkpoints"]
    """Which claims its pods mount: `data` (read-only at /data), `checkpoints` (at /checkpoints)."""


class JobSettings(Section):
    """The team's training job: its kind, tasks, volumes and GPU tolerations."""

    enabled: bool = True
    """Create the job."""
    kind: Kind = "trainjob"
    """`trainjob` (Trainer v2 TrainJob on a platform runtime), `pytorchjob` or `tfjob` (Training Operator v1, see
    `workspace.jobKinds`), or `volcano` (a Volcano Job of named tasks)."""
    name: str = Field("train", pattern=r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
    """Job name (an RFC 1035 label: starts with a letter)."""
    runtime: DnsLabel = "torch-distributed"
    """ClusterTrainingRuntime to run on (one of the platform's `training.runtimes`; `trainjob` only)."""
    image: PinnedImage | None = None
    """Trainer image, pinned by a version tag (not `latest`) or a digest; unset: the runtime's (every kind but
    `trainjob` needs one)."""
    command: list[str] = []
    """Entrypoint of the trainer container; empty uses the image's (or the runtime's)."""
    args: list[str] = []
    """Arguments of the trainer container."""
    num_nodes: int | None = Field(None, ge=1, le=4096)
    """Training nodes (pods) when `tasks` is empty; unset uses the runtime's (other kinds: 1)."""
    resources_per_node: volcano.QueueResources | None = None
    """CPU, memory and GPUs each node is limited to (and requests)."""
    tasks: list[TaskSettings] = []
    """Named groups of pods (`pytorchjob`, `tfjob`, `volcano`); empty: the kind's shape of `numNodes` pods (a
    master or chief and workers; for `volcano` one task `worker`)."""
    volumes: list[JobVolume] = []
    """Extra volumes of every training pod: images, scratch, claims of the namespace (names unique, paths apart from
    /data, /checkpoints and each other)."""
    data_slices: int | None = Field(None, ge=2, le=4096)
    """Give each replica of the one task that mounts /data its own slice: `/data/slice-<index>` of the claim,
    seen at /data; must equal that task's replicas."""
    gpu_tolerations: list[Toleration] = [GPU_TOLERATION]
    """Tolerations every pod that requests `nvidia.com/gpu` gets (GPU nodes' taints); empty: none."""
    min_available: int | None = Field(None, ge=1, le=4096)
    """Pods Volcano must place together before any starts (`volcano`, v1 kinds; unset: every pod)."""
    max_retry: int = Field(3, ge=0, le=100)
    """Whole-job restarts Volcano makes before the job fails (`volcano`)."""
    node_pool: DnsLabel | None = None
    """The node pool its pods run on (one of `workspace.nodePools`, the platform's): the pool's labels become the
    pods' `nodeSelector` and they tolerate its taints; unset: any node."""
    cpu_burst: float = Field(1.0, ge=1.0, le=16.0)
    """CPU limit of each trainer container as a multiple of its CPU request: above 1, data-loader workers may use
    the node's idle CPU (the pod becomes Burstable, not Guaranteed: no exclusive cores under the kubelet's static
    CPU manager); what Volcano and the queue count stays the request."""
    plugins: list[Literal["ssh", "svc", "env"]] = ["ssh", "svc"]
    """Volcano job plugins: `svc` gives pods stable peer names, `ssh` passwordless SSH between them (`volcano`)."""

    def groups(self) -> list[TaskSettings]:
        """The job's groups of pods: ``tasks``, or the kind's shape of ``numNodes`` pods."""
        if self.tasks:
            return list(self.tasks)
        nodes = self.num_nodes or 1
        if self.kind in TASK_NAMES:
            first, rest = TASK_NAMES[self.kind][:2]
            return [TaskSettings(name=first)] + ([TaskSettings(name=rest, replicas=nodes - 1)] if nodes > 1 else [])
        return [TaskSettings(name=training.NODE if self.kind == "trainjob" else "worker", replicas=nodes)]

    def pods(self, mount: Mount | None = None) -> int:
        """The job's pods (that mount ``mount``); a TrainJob's ``numNodes`` unset counts 1 (the runtime's is not
        known here)."""
        return sum(g.replicas for g in self.groups() if mount is None or mount in g.mounts)

    def gang(self) -> dict[str, float]:
        """What the pods Volcano must place together request in all (``QueueResources.amounts``): the first
        `minAvailable` pods in task order, as Volcano computes a PodGroup's minResources (``calcPGMinResources``,
        pkg/controllers/job/job_controller_actions.go at volcano-sh/volcano v1.15.1)."""
        total: dict[str, float] = {}
        left = self.min_available or sum(group.replicas for group in self.groups())
        for group in self.groups():
            pods, left = min(group.replicas, left), left - min(group.replicas, left)
            resources = self.group_resources(group)
            for name, amount in (resources.amounts() if resources else {}).items():
                total[name] = total.get(name, 0.0) + pods * amount
        return total

    def problems(self) -> list[Problem]:
        """Kinds without a runtime need an image; tasks fit the kind; the gang and the slices fit the pods."""
        found = []
        if self.enabled and self.kind != "trainjob" and self.image is None:
            found.append(Problem("image", f"expected an image with kind: {self.kind}", None, "no runtime supplies one"))
        found += self._task_problems()
        pods = sum(g.replicas for g in self.groups()) if self.kind != "trainjob" else None
        if pods is not None and self.min_available is not None and self.min_available > pods:
            expected = f"expected at most the job's pods ({pods})"
            found.append(Problem("minAvailable", expected, self.min_available, "the gang could never be placed"))
        if self.kind == "volcano" and "svc" not in self.plugins and sum(g.replicas for g in self.groups()) > 1:
            hint = "the svc plugin names each pod (<job>-<task>-<index>.<job>): the rendezvous address is pod 0's name"
            expected = "expected svc among the plugins of a job of several pods"
            found.append(Problem("plugins", expected, self.plugins, hint))
        if self.cpu_burst > 1 and not all((r := self.group_resources(g)) and r.cpu for g in self.groups()):
            hint = "the limit is the request times cpuBurst: set cpu in resourcesPerNode (or each task's resources)"
            found.append(Problem("cpuBurst", "expected a CPU request in every pod's resources", self.cpu_burst, hint))
        return found + self._slice_problems()

    def group_resources(self, group: TaskSettings) -> volcano.QueueResources | None:
        """What each pod of ``group`` requests: its own resources, or the job's."""
        return group.resources or self.resources_per_node

    def resources(self, group: TaskSettings) -> dict[str, Any] | None:
        """A container's requests and limits: ``group``'s resources (or the job's), the CPU limit ``cpuBurst``
        times the request."""
        given = self.group_resources(group)
        if given is None:
            return None
        limits = given.spec()
        if self.cpu_burst > 1 and given.cpu is not None:
            limits["cpu"] = f"{round(given.amounts()['cpu'] * self.cpu_burst * 1000)}m"
        return {"requests": given.spec(), "limits": limits}

    def _task_problems(self) -> list[Problem]:
        names = [t.name for t in self.tasks]
        if self.kind == "trainjob" and self.tasks:
            hint = "a TrainJob's pods are the runtime's nodes: set numNodes, or use kind: volcano for named tasks"
            return [Problem("tasks", "expected no tasks with kind: trainjob", names, hint)]
        if len(set(names)) < len(names):
            return [Problem("tasks", "expected each task name once", names, "a task's name names its pods")]
        allowed = TASK_NAMES.get(self.kind)
        if allowed and any(n not in allowed for n in names):
            hint = f"a {self.kind}'s replica types are {', '.join(allowed)}"
            return [Problem("tasks", f"expected task names among {', '.join(allowed)}", names, hint)]
        lead = [t for t in self.tasks if allowed and t.name == allowed[0]]
        if allowed and self.tasks and (len(lead) != 1 or lead[0].replicas != 1):
            hint = f"the operator runs exactly one {allowed[0]} (rank 0)"
            return [Problem("tasks", f"expected one {allowed[0]} task of 1 replica", names, hint)]
        return []

    def _slice_problems(self) -> list[Problem]:
        if self.data_slices is None:
            return []
        readers = [g for g in self.groups() if "data" in g.mounts]
        replicas = self.num_nodes if self.kind == "trainjob" else (readers[0].replicas if len(readers) == 1 else None)
        if replicas == self.data_slices:
            return []
        hint = (
            "each replica of the one task that mounts data gets slice-<its index>: set tasks so that exactly one "
            "mounts data, with as many replicas as slices (with kind: trainjob, numNodes)"
        )
        return [Problem("dataSlices", f"expected the replicas that read /data ({replicas})", self.data_slices, hint)]


@dataclass
class PodContext:
    """Where the job's pods run and what they mount."""

    queue: str
    uid: int
    dataset_claim: str
    checkpoint_claim: str
    landing: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    """The checkpoint landing volume, mount and variables (``checkpoints.landing``), or empty."""
    data_tier: str = "cold"
    """The tier the pods read their data from (the pods' ``training.DATA_TIER_LABEL``)."""
    tier_prefix: str = ""
    """The tier StorageClasses' name prefix (scratch volumes' class)."""
    node_pool: NodePool | None = None
    """The pool the job asked for (``job.nodePool``)."""


def pod_paths(landing: bool, staged: bool) -> dict[str, str]:
    """The volumes every training pod has of its own (name to mount path): the job's volumes keep apart."""
    return {
        training.DATA_VOLUME: training.DATA_PATH,
        training.CHECKPOINT_VOLUME: training.CHECKPOINT_PATH,
        training.METRICS_DIR_VOLUME: training.METRICS_DIR,
        **({LANDING_VOLUME: LANDING_PATH} if landing else {}),
        **({STAGED_VOLUME: STAGED_PATH} if staged else {}),
    }


def requests_gpus(resources: volcano.QueueResources | None) -> bool:
    return bool(resources and resources.gpu)


def team_pod(job: JobSettings, group: TaskSettings, where: PodContext, container: dict[str, Any]) -> dict:
    """A training pod of ``group``: the queue, non-root as the workspace's uid, the claims the group mounts (a
    slice of /data with ``dataSlices``) in ``container`` (whose root filesystem stays writable: training code
    writes caches and temporary files), the metrics' multiprocess directory, the landing volume, the job's
    extra volumes, and the GPU tolerations when the group requests GPUs."""
    mounts, volumes = training.claim_volumes(where.dataset_claim, where.checkpoint_claim)
    wanted = {"data": training.DATA_VOLUME, "checkpoints": training.CHECKPOINT_VOLUME}
    keep = {wanted[m] for m in group.mounts}
    mounts, volumes = [m for m in mounts if m["name"] in keep], [v for v in volumes if v["name"] in keep]
    env: list[dict[str, Any]] = list(container.get("env", []))
    if job.data_slices and "data" in group.mounts:
        env.append({"name": SLICE_VARIABLE, "valueFrom": {"fieldRef": {"fieldPath": REPLICA_INDEX[job.kind]}}})
        data = next(m for m in mounts if m["name"] == training.DATA_VOLUME)
        data["subPathExpr"] = f"slice-$({SLICE_VARIABLE})"
    for volume in job.volumes:
        mount, source = volume.spec(where.tier_prefix)
        mounts.append(mount)
        volumes.append(source)
    for extra in (training.metrics_dir(), where.landing):
        if extra.get("volumes"):
            env, mounts, volumes = env + extra["env"], mounts + extra["volumeMounts"], volumes + extra["volumes"]
    security = {**kube.restricted_container(where.uid), "readOnlyRootFilesystem": False}
    container = {**container, "volumeMounts": mounts, "securityContext": security}
    if env:
        container["env"] = env
    spec: dict[str, Any] = {
        "securityContext": {**kube.restricted_pod(where.uid), **kube.ON_ROOT_MISMATCH},
        "containers": [container],
        "volumes": volumes,
    }
    gpus = requests_gpus(job.group_resources(group))
    tolerations = [t.spec() for t in (job.gpu_tolerations if gpus else [])]
    if where.node_pool:
        spec["nodeSelector"] = dict(where.node_pool.labels)
        tolerations += [t.spec() for t in where.node_pool.tolerations if t.spec() not in tolerations]
    if tolerations:
        spec["tolerations"] = tolerations
    metadata = {"annotations": {volcano.QUEUE_ANNOTATION: where.queue}, "labels": {DATA_TIER_LABEL: where.data_tier}}
    return {"metadata": metadata, "spec": spec}
