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

import re
from typing import Any

from . import trainer as training
from . import volcano
from .jobs import REPLICA_INDEX, RESTART_ON, JobSettings, PodContext, TaskSettings, team_pod
from .staging import INIT_CONTAINER

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
RDZV_PORT = "23456"
"""The port torchrun's master listens on in a Volcano Job (the v1 operator's PyTorchJob default)."""
NO_ENV_CONTAINERS = ("dataset-initializer", "model-initializer", training.NODE)
"""Containers a TrainJob's runtime patch must not set env on (Trainer v2.3.0's webhook; env goes in
``spec.trainer.env``, which the Trainer upserts into the ``node`` container)."""
RESERVED_ENV = ("PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT")
"""What the Trainer sets for torchrun and refuses in ``spec.trainer.env`` (``TorchRunReservedEnvNames``)."""
TRAINJOB_HINT = (
    "Kubeflow Trainer v2.3.0's webhook (pkg/runtime/framework/plugins/jobset/jobset.go, torch/torch.go) refuses the "
    "TrainJob: env of the node container belongs in spec.trainer.env, patches name only the runtime's own replicated "
    "jobs and containers, and the PET_* variables are the Trainer's"
)
_DOMAIN_PREFIXED_PATH = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*(/[^/]+)+$")


def _container(job: JobSettings, group: TaskSettings, name: str) -> dict[str, Any]:
    """A trainer container: the job's image, the group's (or the job's) command, args and resources, and the
    training metrics' port."""
    ports, env = training.trainer_port_and_env()
    container: dict[str, Any] = {"name": name, "image": job.image, "ports": ports, "env": env}
    if group.command or job.command:
        container["command"] = group.command or job.command
    if group.args or job.args:
        container["args"] = group.args or job.args
    resources = job.resources(group)
    if resources:
        container["resources"] = resources
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
    env = pod["spec"]["containers"][0].pop("env", [])  # the webhook refuses env in a patch of the node container
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
        resources = job.resources(group) or {}
        bursts = resources["limits"] != resources["requests"]  # else the limits alone: requests default to them
        given["resourcesPerNode"] = resources if bursts else {"limits": resources["limits"]}
    given["env"] = env
    trainer = {key: value for key, value in given.items() if value}
    if trainer:
        spec["trainer"] = trainer
    return spec


def trainjob_webhook_errors(spec: dict[str, Any], runtime_jobs: dict[str, set[str]] | None = None) -> list[str]:
    """What Kubeflow Trainer v2.3.0's TrainJob webhook refuses in ``spec`` (``JobSet.Validate`` in
    pkg/runtime/framework/plugins/jobset/jobset.go, ``Torch.Validate`` in plugins/torch/torch.go): a patch manager
    that is not a domain-prefixed path, a patched replicated job or container the runtime lacks (``runtime_jobs``:
    replicated job -> its containers and init containers; default: the platform's runtimes, a ``node`` job with the
    ``node`` container and the staging init container), env on the node or initializer containers, and torchrun's
    reserved variables in ``trainer.env``."""
    runtime_jobs = runtime_jobs or {training.NODE: {training.NODE, INIT_CONTAINER}}
    errors = []
    for patch in spec.get("runtimePatches", []):
        if not _DOMAIN_PREFIXED_PATH.match(patch.get("manager", "")):
            errors.append(f"runtimePatches.manager {patch.get('manager')!r} is not a domain-prefixed path")
        template = (patch.get("trainingRuntimeSpec") or {}).get("template") or {}
        for rjob in (template.get("spec") or {}).get("replicatedJobs", []):
            if rjob["name"] not in runtime_jobs:
                errors.append(f"runtimePatches: replicated job {rjob['name']!r} is not in the runtime")
                continue
            pod = ((rjob.get("template") or {}).get("spec") or {}).get("template", {}).get("spec") or {}
            for container in pod.get("initContainers", []) + pod.get("containers", []):
                if container["name"] not in runtime_jobs[rjob["name"]]:
                    errors.append(f"runtimePatches: container {container['name']!r} is not in the runtime job")
                elif container.get("env") and container["name"] in NO_ENV_CONTAINERS:
                    errors.append(f"runtimePatches: env on the {container['name']} container")
    reserved = sorted({e["name"] for e in (spec.get("trainer") or {}).get("env", [])} & set(RESERVED_ENV))
    if reserved:
        errors.append(f"trainer.env sets the Trainer's reserved {', '.join(reserved)}")
    return errors


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


def rendezvous_env(job: JobSettings) -> list[dict[str, Any]]:
    """What torchrun (and ``init_process_group``'s ``env://``) needs to meet its peers in a Volcano Job: the
    master's address, the first task's pod 0 by the name the ``svc`` plugin gives it (hostname ``<job>-<task>-0``,
    subdomain ``<job>``: pkg/controllers/job/plugins/svc/svc.go at volcano-sh/volcano v1.15.1, the first of
    ``VC_<TASK>_HOSTS``), a port, and, when every pod is of one task, the nodes and this node's rank (the task
    index Volcano annotates, ``volcano.sh/task-index``). Volcano itself sets none of them: without them torchrun
    waits on 127.0.0.1 as node 0 in every pod."""
    groups = job.groups()
    pods = sum(group.replicas for group in groups)
    if pods < 2:
        return []
    master = f"{job.name}-{groups[0].name}-0.{job.name}"
    env: list[dict[str, Any]] = []
    for prefix in ("", "PET_"):
        env += [{"name": f"{prefix}MASTER_ADDR", "value": master}, {"name": f"{prefix}MASTER_PORT", "value": RDZV_PORT}]
    if len(groups) == 1:
        rank = {"fieldRef": {"fieldPath": REPLICA_INDEX["volcano"]}}
        env += [{"name": "PET_NNODES", "value": str(pods)}, {"name": "PET_NODE_RANK", "valueFrom": rank}]
    return env


def volcano_job_spec(job: JobSettings, where: PodContext) -> dict:
    """A Volcano Job's ``spec``: its tasks, gang-scheduled in the team's queue, restarted as a whole on an
    evicted or failed pod; every container told where its peers meet (``rendezvous_env``)."""
    tasks: list[dict[str, Any]] = []
    for group in job.groups():
        container = _container(job, group, group.name)
        container["env"] = [*rendezvous_env(job), *container["env"]]
        pod = _labelled(team_pod(job, group, where, container))
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


VOLCANO_JOB_LABELS = ("volcano.sh/job-name", "volcano.sh/job-namespace")
"""Labels Volcano's job controller puts on a job's pods, which the ``svc`` plugin's NetworkPolicy selects."""


def scrape_policy(job: JobSettings, namespace: str) -> dict[str, Any] | None:
    """For a Volcano Job with the ``svc`` plugin: a NetworkPolicy letting Prometheus, from any namespace, reach
    the metrics port of the job's pods. The plugin (pkg/controllers/job/plugins/svc/svc.go at v1.15.1) gives every
    such job a policy of the job's name admitting only the job's own pods; NetworkPolicies add up, so this one
    reopens the metrics port alone, and the step timer, goodput and "is the GPU fed" alerts keep their data."""
    if job.kind != "volcano" or "svc" not in job.plugins:
        return None
    selected = dict(zip(VOLCANO_JOB_LABELS, (job.name, namespace), strict=True))
    return {
        "metadata": {"name": f"{job.name}-metrics", "namespace": namespace},
        "spec": {
            "podSelector": {"matchLabels": {**selected, **training.METRICS_LABELS}},
            "policyTypes": ["Ingress"],
            "ingress": [
                {
                    "from": [{"namespaceSelector": {}}],
                    "ports": [{"protocol": "TCP", "port": training.METRICS_PORT_NAME}],
                }
            ],
        },
    }


def job_spec(job: JobSettings, where: PodContext) -> dict:
    """The ``spec`` of the job's kind."""
    if job.kind == "trainjob":
        return train_job_spec(job, where)
    if job.kind == "volcano":
        return volcano_job_spec(job, where)
    return v1_job_spec(job, where)
