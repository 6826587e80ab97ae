"""The spec of each kind of team job (``jobs.JobSettings.kind``), built from the pods ``jobs.team_pod`` makes.

- ``trainjob``: a Kubeflow Trainer v2 TrainJob names a ClusterTrainingRuntime the platform installed and patches
  its ``node`` pods through ``spec.runtimePatches`` (the runtime labels its pods and declares the metrics port: a
  patch cannot add ports, and the Trainer refuses patch changes to a running TrainJob);
- ``pytorchjob``, ``tfjob``: Training Operator v1 jobs (``kubeflow.org/v1``) with a replica spec per task
  (Master and Worker; Chief, Worker and PS), ``restartPolicy: OnFailure``, gang-scheduled by Volcano through
  ``runPolicy.schedulingPolicy`` (the platform runs the operator with ``--gang-scheduler-name=volcano``);
- ``volcano``: a Volcano Job of named tasks, gang-scheduled as a whole (``minAvailable``) and restarted as a whole
  when a pod is evicted or fails, with the ``svc`` and ``ssh`` plugins that launchers (torchrun, MPI) need.
"""

from __future__ import annotations

from typing import Any

from . import training, volcano
from .jobs import RESTART_ON, JobSettings, PodContext, TaskSettings, team_pod

PATCH_MANAGER = "ai-storage-platform/team-workspace"
"""Owner of the TrainJob's runtime patch (a domain-prefixed path, as the Trainer requires)."""
API: dict[str, tuple[str, str]] = {
    "trainjob": ("trainer.kubeflow.org/v1alpha1", "TrainJob"),
    "pytorchjob": ("kubeflow.org/v1", "PyTorchJob"),
    "tfjob": ("kubeflow.org/v1", "TFJob"),
    "volcano": ("batch.volcano.sh/v1alpha1", "Job"),
}
"""API version and kind of each job kind."""
V1_CONTAINER = {"pytorchjob": "pytorch", "tfjob": "tensorflow"}
"""The container name the v1 operator looks for in each replica (its default container)."""
V1_REPLICAS = {"pytorchjob": "pytorchReplicaSpecs", "tfjob": "tfReplicaSpecs"}


def _container(job: JobSettings, group: TaskSettings, name: str) -> dict[str, Any]:
    """A trainer container: the job's image, the group's (or the job's) command, args and resources, and the
    training metrics' port."""
    ports, env = training.metrics_port()
    container: dict[str, Any] = {"name": name, "image": job.image, "ports": ports, "env": env}
    if group.command or job.command:
        container["command"] = group.command or job.command
    if group.args or job.args:
        container["args"] = group.args or job.args
    resources = group.resources or job.resources_per_node
    if resources:
        container["resources"] = {"requests": resources.spec(), "limits": resources.spec()}
    return container


def _labelled(pod: dict[str, Any]) -> dict[str, Any]:
    """A pod the platform's training PodMonitor selects."""
    pod["metadata"]["labels"] = {**training.METRICS_LABELS, **pod["metadata"]["labels"]}
    return pod


def train_job_spec(job: JobSettings, where: PodContext) -> dict:
    """The TrainJob's ``spec``: the runtime by name, the trainer overrides, and a patch of the runtime's ``node``
    pods with the team's queue, claims, volumes, tolerations and non-root security context."""
    (group,) = job.groups()
    pod = team_pod(job, group, where, {"name": training.NODE})
    patch = {
        "manager": PATCH_MANAGER,
        "trainingRuntimeSpec": {
            "template": {
                # The Trainer's Volcano plugin reads the PodGroup's queue from the JobSet template's annotations.
                "metadata": {"annotations": {volcano.QUEUE_ANNOTATION: where.queue}},
                "spec": {"replicatedJobs": [{"name": training.NODE, "template": {"spec": {"template": pod}}}]},
            }
        },
    }
    spec: dict[str, Any] = {"runtimeRef": {"name": job.runtime}, "runtimePatches": [patch]}
    given: dict[str, Any] = {"image": job.image, "command": job.command, "args": job.args, "numNodes": job.num_nodes}
    if job.resources_per_node:
        given["resourcesPerNode"] = {"limits": job.resources_per_node.spec()}
    trainer = {key: value for key, value in given.items() if value}
    if trainer:
        spec["trainer"] = trainer
    return spec


def v1_job_spec(job: JobSettings, where: PodContext) -> dict:
    """A PyTorchJob's or TFJob's ``spec``: a replica spec per task, restarted on failure, gang-scheduled in the
    team's queue."""
    replicas = {}
    for group in job.groups():
        pod = _labelled(team_pod(job, group, where, _container(job, group, V1_CONTAINER[job.kind])))
        kind = group.name.upper() if group.name == "ps" else group.name.capitalize()
        replicas[kind] = {"replicas": group.replicas, "restartPolicy": "OnFailure", "template": pod}
    pods = sum(group.replicas for group in job.groups())
    policy = {"queue": where.queue, "minAvailable": job.min_available or pods}
    return {V1_REPLICAS[job.kind]: replicas, "runPolicy": {"cleanPodPolicy": "None", "schedulingPolicy": policy}}


def volcano_job_spec(job: JobSettings, where: PodContext) -> dict:
    """A Volcano Job's ``spec``: its tasks, gang-scheduled in the team's queue, restarted as a whole on an
    evicted or failed pod."""
    tasks: list[dict[str, Any]] = []
    for group in job.groups():
        pod = _labelled(team_pod(job, group, where, _container(job, group, group.name)))
        pod["spec"]["restartPolicy"] = "Never"  # Volcano restarts the whole gang, not single pods
        tasks.append({"name": group.name, "replicas": group.replicas, "template": pod})
    return {
        "schedulerName": volcano.SCHEDULER_NAME,
        "queue": where.queue,
        "minAvailable": job.min_available or sum(task["replicas"] for task in tasks),
        "maxRetry": job.max_retry,
        "policies": [{"event": event, "action": "RestartJob"} for event in RESTART_ON],
        "plugins": {plugin: [] for plugin in job.plugins},
        "tasks": tasks,
    }


def job_spec(job: JobSettings, where: PodContext) -> dict:
    """The ``spec`` of the job's kind."""
    if job.kind == "trainjob":
        return train_job_spec(job, where)
    if job.kind == "volcano":
        return volcano_job_spec(job, where)
    return v1_job_spec(job, where)
