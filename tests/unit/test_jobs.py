"""A team's job: a TrainJob on a platform runtime, or a Volcano Job that restarts whole when a pod is lost."""

from __future__ import annotations

import re

import pytest

from components.common.sections import SettingsError
from components.teams.team import load_team_settings
from components.training import trainer as training
from components.training.job_kinds import train_job_spec, volcano_job_spec
from components.training.jobs import JobSettings, PodContext
from tests.conformance.upstream import validate_custom_resource

IMAGE = "ghcr.io/example/trainer:1.0.0"
WHERE = PodContext("vision", 10001, "data", "ckpt")


def volcano_job(**job: object) -> dict:
    spec = volcano_job_spec(JobSettings(kind="volcano", image=IMAGE, **job), WHERE)
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "train"}, "spec": spec}


def test_a_volcano_job_is_gang_scheduled_in_the_team_queue_and_restarts_whole():
    job = volcano_job(num_nodes=4, command=["torchrun"], max_retry=5)
    spec = job["spec"]
    assert (spec["schedulerName"], spec["queue"], spec["minAvailable"], spec["maxRetry"]) == ("volcano", "vision", 4, 5)
    assert {(p["event"], p["action"]) for p in spec["policies"]} == {
        ("PodEvicted", "RestartJob"),
        ("PodFailed", "RestartJob"),
    }
    assert spec["plugins"] == {"ssh": [], "svc": []}
    (task,) = spec["tasks"]
    assert task["replicas"] == 4
    pod = task["template"]["spec"]
    assert pod["restartPolicy"] == "Never" and pod["securityContext"]["runAsNonRoot"] is True
    mounts = {m["mountPath"]: m.get("readOnly", False) for m in pod["containers"][0]["volumeMounts"]}
    assert mounts == {"/data": True, "/checkpoints": False, training.METRICS_DIR: False}
    assert validate_custom_resource(job) == []  # against Volcano's upstream CRD


def test_a_volcano_job_labels_its_pods_for_the_training_metrics_and_declares_the_port():
    pod = volcano_job()["spec"]["tasks"][0]["template"]
    assert pod["metadata"]["labels"] == {**training.METRICS_LABELS, training.DATA_TIER_LABEL: "cold"}
    (worker,) = pod["spec"]["containers"]
    assert worker["ports"] == [{"name": "train-metrics", "containerPort": 9095, "protocol": "TCP"}]
    assert {"name": "AI_STORAGE_METRICS_PORT", "value": "9095"} in worker["env"]
    assert {"name": "TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "value": "1"} in worker["env"]  # torchrun restarts reconnect
    # A TrainJob's pods get both from the platform's runtime (test_training); its patch adds only the data tier.
    spec = train_job_spec(JobSettings(), WHERE)
    (replicated,) = spec["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    assert replicated["template"]["spec"]["template"]["metadata"]["labels"] == {training.DATA_TIER_LABEL: "cold"}


def test_a_smaller_gang_can_start_first():
    assert volcano_job(num_nodes=4, min_available=2)["spec"]["minAvailable"] == 2


@pytest.mark.parametrize(
    ("job", "key", "expected"),
    [
        ({"kind": "volcano"}, "job.image", "expected an image with kind: volcano"),
        ({"kind": "volcano", "image": IMAGE, "numNodes": 2, "minAvailable": 3}, "job.minAvailable", "at most the job"),
        ({"kind": "slurm"}, "job.kind", "expected one of 'trainjob', 'pytorchjob', 'tfjob', 'volcano'"),
        ({"plugins": ["mpi"]}, "job.plugins[0]", "expected one of"),
        ({"maxRetry": -1}, "job.maxRetry", ">= 0"),
    ],
)
def test_bad_job_settings_are_rejected_with_key_and_hint(job, key, expected):
    with pytest.raises(SettingsError) as caught:
        load_team_settings({"job": job})
    message = str(caught.value)
    assert f"{key}:" in message and expected in message and "Hint:" in message


# ---------------------------------------------------------------- kinds, tasks, volumes, slices, GPU tolerations

V1 = {"workspace": {"jobKinds": ["pytorchjob", "tfjob", "volcano"]}}
GPU = {"cpu": "8", "memory": "32Gi", "gpu": 1}


def rendered(kind: str, **job: object) -> dict:
    from components.training.job_kinds import API, job_spec

    settings = JobSettings(kind=kind, image=IMAGE, **job)
    api, name = API[kind]
    return {"apiVersion": api, "kind": name, "metadata": {"name": "train"}, "spec": job_spec(settings, WHERE)}


def pods(job: dict) -> dict[str, dict]:
    """Each replica group's pod template, by group name."""
    spec = job["spec"]
    if job["kind"] == "Job":
        return {t["name"]: t["template"] for t in spec["tasks"]}
    if job["kind"] == "TrainJob":
        patch = spec["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]
        return {"node": patch["template"]["spec"]["template"]}
    replicas = spec.get("pytorchReplicaSpecs") or spec["tfReplicaSpecs"]
    return {name.lower(): r["template"] for name, r in replicas.items()}


def mounts(pod: dict) -> dict[str, dict]:
    return {m["mountPath"]: m for m in pod["spec"]["containers"][0]["volumeMounts"]}


@pytest.mark.parametrize(
    ("kind", "groups", "container"),
    [("pytorchjob", {"Master": 1, "Worker": 3}, "pytorch"), ("tfjob", {"Chief": 1, "Worker": 3}, "tensorflow")],
)
def test_a_v1_job_runs_a_lead_and_workers_in_the_team_queue_valid_upstream(kind, groups, container):
    job = rendered(kind, num_nodes=4, resources_per_node=GPU, command=["torchrun"])
    replicas = job["spec"]["pytorchReplicaSpecs" if kind == "pytorchjob" else "tfReplicaSpecs"]
    assert {name: r["replicas"] for name, r in replicas.items()} == groups
    assert {r["restartPolicy"] for r in replicas.values()} == {"OnFailure"}
    assert job["spec"]["runPolicy"]["schedulingPolicy"] == {"queue": "vision", "minAvailable": 4}
    for pod in pods(job).values():
        (trainer,) = pod["spec"]["containers"]
        assert trainer["name"] == container and trainer["securityContext"]["runAsNonRoot"] is True
        assert pod["metadata"]["annotations"] == {"scheduling.volcano.sh/queue-name": "vision"}
        assert pod["spec"]["securityContext"]["fsGroupChangePolicy"] == "OnRootMismatch"
        assert set(mounts(pod)) == {"/data", "/checkpoints", training.METRICS_DIR}
    assert validate_custom_resource(job) == []


def test_named_volcano_tasks_mount_only_their_claims_the_design_master_and_workers():
    tasks = [
        {"name": "master", "replicas": 1, "command": ["python", "coordinator.py"]},
        {"name": "worker", "replicas": 2, "mounts": ["data"], "resources": GPU},
    ]
    job = rendered("volcano", tasks=tasks)
    master, worker = pods(job)["master"], pods(job)["worker"]
    assert set(mounts(master)) == {"/data", "/checkpoints", training.METRICS_DIR}
    assert set(mounts(worker)) == {"/data", training.METRICS_DIR}  # workers never see the checkpoints
    assert {v["name"] for v in worker["spec"]["volumes"]} == {training.DATA_VOLUME, training.METRICS_DIR_VOLUME}
    assert master["spec"]["containers"][0]["command"] == ["python", "coordinator.py"]
    assert job["spec"]["minAvailable"] == 3 and [t["replicas"] for t in job["spec"]["tasks"]] == [1, 2]
    assert "tolerations" not in master["spec"] and worker["spec"]["tolerations"]
    assert validate_custom_resource(job) == []


@pytest.mark.parametrize("kind", ["trainjob", "pytorchjob", "tfjob", "volcano"])
def test_every_pod_that_requests_gpus_tolerates_the_gpu_taint_on_the_schedulers_terms(kind):
    from tests.kube_semantics import tolerates

    gpu = rendered(kind, num_nodes=2, resources_per_node=GPU)
    taint = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    for pod in pods(gpu).values():
        assert tolerates(pod["spec"].get("tolerations"), taint)
        assert not tolerates(pod["spec"].get("tolerations"), {"key": "dedicated", "value": "x", "effect": "NoSchedule"})
    for pod in pods(rendered(kind, num_nodes=2, resources_per_node={"cpu": "8"})).values():
        assert not tolerates(pod["spec"].get("tolerations"), taint)  # a CPU pod stays off the GPU nodes
    for pod in pods(rendered(kind, num_nodes=2, resources_per_node=GPU, gpu_tolerations=[])).values():
        assert not tolerates(pod["spec"].get("tolerations"), taint)
    assert validate_custom_resource(gpu) == []


@pytest.mark.parametrize("kind", ["trainjob", "pytorchjob", "volcano"])
def test_image_volumes_mount_read_only_in_every_pod(kind):
    weights = {"name": "weights", "mountPath": "/weights", "image": "ghcr.io/example/llama-weights:3.1"}
    job = rendered(kind, num_nodes=2, volumes=[weights])
    for pod in pods(job).values():
        assert mounts(pod)["/weights"]["readOnly"] is True
        (volume,) = [v for v in pod["spec"]["volumes"] if v["name"] == "weights"]
        assert volume["image"] == {"reference": "ghcr.io/example/llama-weights:3.1", "pullPolicy": "IfNotPresent"}
    assert validate_custom_resource(job) == []


@pytest.mark.parametrize(
    ("kind", "job", "index"),
    [
        ("trainjob", {"num_nodes": 4}, "metadata.annotations['batch.kubernetes.io/job-completion-index']"),
        ("volcano", {"num_nodes": 4}, "metadata.annotations['volcano.sh/task-index']"),
        (
            "pytorchjob",
            {"tasks": [{"name": "master", "mounts": ["checkpoints"]}, {"name": "worker", "replicas": 4}]},
            "metadata.labels['training.kubeflow.org/replica-index']",
        ),
    ],
)
def test_each_replica_sees_only_its_slice_of_the_dataset(kind, job, index):
    rendered_job = rendered(kind, data_slices=4, **job)
    for pod in pods(rendered_job).values():
        data = mounts(pod).get("/data")
        if data is None:
            continue
        assert data["subPathExpr"] == "slice-$(AI_STORAGE_DATA_SLICE)" and data["readOnly"] is True
        # A TrainJob's node container gets its env from spec.trainer.env (the webhook refuses it in a patch).
        given = rendered_job["spec"]["trainer"]["env"] if kind == "trainjob" else pod["spec"]["containers"][0]["env"]
        env = {e["name"]: e for e in given}
        assert env["AI_STORAGE_DATA_SLICE"]["valueFrom"]["fieldRef"]["fieldPath"] == index
    assert validate_custom_resource(rendered_job) == []


@pytest.mark.parametrize(
    ("config", "key", "expected"),
    [
        ({"job": {"kind": "volcano", "image": IMAGE, "numNodes": 3, "dataSlices": 4}}, "job.dataSlices", "(3)"),
        (
            {"job": {"kind": "volcano", "image": IMAGE, "dataSlices": 2, "tasks": [{"name": "a"}, {"name": "b"}]}},
            "job.dataSlices",
            "(None)",
        ),
        (
            {"job": {"volumes": [{"name": "w", "mountPath": "/w", "image": "ghcr.io/x/w:latest"}]}},
            "job.volumes[0].image",
            "pinned",
        ),
        (
            {"job": {"volumes": [{"name": "w", "mountPath": "/w", "hostPath": "/mnt/nvme"}]}},
            "job.volumes[0].hostPath",
            "Pod Security restricted",
        ),
        ({"job": {"kind": "tfjob", "image": IMAGE}}, "job.kind", "expected one of trainjob, volcano"),
        ({**V1, "job": {"kind": "trainjob"}}, "job.kind", "expected one of pytorchjob, tfjob, volcano"),
        (
            {**V1, "job": {"kind": "pytorchjob", "image": IMAGE, "tasks": [{"name": "chief"}]}},
            "job.tasks",
            "among master, worker",
        ),
        (
            {**V1, "job": {"kind": "pytorchjob", "image": IMAGE, "tasks": [{"name": "worker"}]}},
            "job.tasks",
            "one master",
        ),
        ({"job": {"tasks": [{"name": "worker"}]}}, "job.tasks", "no tasks with kind: trainjob"),
        (
            {
                "workspace": {"kubernetesVersion": "1.32"},
                "job": {"volumes": [{"name": "w", "mountPath": "/w", "image": IMAGE}]},
            },
            "job.volumes",
            "1.33+ with workspace.imageVolumes: true",
        ),
        (
            {"job": {"volumes": [{"name": "w", "mountPath": "/w", "image": IMAGE}]}},
            "job.volumes",
            "the ImageVolume gate",
        ),
        (
            {"job": {"kind": "volcano", "image": IMAGE, "numNodes": 2, "plugins": ["ssh"]}},
            "job.plugins",
            "expected svc",
        ),
        ({"job": {"gpuTolerations": [{"operator": "Equal"}]}}, "job.gpuTolerations[0].key", "expected a key"),
        ({"dataset": {"source": "claim", "tier": "hot"}}, "dataset.tier", "expected warm or cold"),
    ],
)
def test_bad_kinds_tasks_volumes_and_slices_are_refused_in_one_line_naming_the_key(config, key, expected):
    with pytest.raises(SettingsError) as caught:
        load_team_settings(config)
    lines = [line for line in str(caught.value).splitlines() if line.startswith(f"  - {key}:")]
    assert len(lines) == 1 and expected in lines[0] and "Hint:" in lines[0], str(caught.value)


def test_the_v1_kinds_run_where_the_platform_installs_the_v1_operator():
    for kind in ("pytorchjob", "tfjob", "volcano"):
        assert load_team_settings({**V1, "job": {"kind": kind, "image": IMAGE}}).job.kind == kind


# ------------------------------------------------------ gangs, rendezvous, the Trainer's webhook, image volumes

SPEECH = {"cpu": "16", "memory": "64Gi", "gpu": 2}
"""Queue speech's capability on the dev platform (stacks/dev.yaml)."""
DESIGN_TASKS = [
    {"name": "master", "replicas": 1, "resources": {"cpu": "4", "memory": "16Gi"}},
    {"name": "worker", "replicas": 2, "resources": GPU},
]


def test_a_gang_larger_than_its_queue_is_refused_with_both_numbers():
    config = {
        "workspace": {"queueCapability": SPEECH},
        "job": {"kind": "volcano", "image": IMAGE, "tasks": DESIGN_TASKS},
    }
    with pytest.raises(SettingsError) as caught:
        load_team_settings(config)
    (line,) = [line for line in str(caught.value).splitlines() if line.startswith("  - job:")]
    assert "capability (cpu 16, memory 64Gi)" in line and "ask cpu 20, memory 80Gi" in line and "Hint:" in line


def test_a_gang_counts_only_its_first_min_available_pods_as_volcano_does():
    tasks = DESIGN_TASKS
    job = {"kind": "volcano", "image": IMAGE, "tasks": tasks, "minAvailable": 2}
    settings = load_team_settings({"workspace": {"queueCapability": SPEECH}, "job": job})
    assert settings.job.gang() == {"cpu": 12.0, "memory": 48 * 2**30, "gpu": 1.0}  # the master and one worker
    assert load_team_settings({"job": {**job, "minAvailable": None}}).job.gang()["cpu"] == 20.0  # unchecked: no cap


def test_a_single_task_volcano_job_tells_torchrun_the_master_and_each_pods_rank():
    spec = volcano_job(num_nodes=2, command=["torchrun"])["spec"]
    env = {e["name"]: e for e in spec["tasks"][0]["template"]["spec"]["containers"][0]["env"]}
    assert env["PET_MASTER_ADDR"]["value"] == env["MASTER_ADDR"]["value"] == "train-worker-0.train"
    assert env["PET_NNODES"]["value"] == "2" and env["PET_MASTER_PORT"]["value"] == "23456"
    assert env["PET_NODE_RANK"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.annotations['volcano.sh/task-index']"
    tasks = volcano_job(tasks=[{"name": "master"}, {"name": "worker", "replicas": 2}])["spec"]["tasks"]
    for task in tasks:  # several tasks: the master's address for env://, no node rank a task index could give
        names = {e["name"] for e in task["template"]["spec"]["containers"][0]["env"]}
        assert {"MASTER_ADDR", "PET_MASTER_ADDR"} <= names and "PET_NODE_RANK" not in names
    assert "PET_MASTER_ADDR" not in str(volcano_job(num_nodes=1)["spec"])


def test_a_trainjob_puts_the_node_containers_env_in_trainer_env_never_in_its_patch():
    job = JobSettings(num_nodes=2, data_slices=2)
    spec = train_job_spec(job, PodContext("vision", 10001, "data", "ckpt", training.metrics_dir()))
    (replicated,) = spec["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    assert "env" not in replicated["template"]["spec"]["template"]["spec"]["containers"][0]
    assert {e["name"] for e in spec["trainer"]["env"]} >= {"AI_STORAGE_DATA_SLICE", "PROMETHEUS_MULTIPROC_DIR"}


def test_what_the_trainer_webhook_refuses_is_named_at_render(monkeypatch):
    from components.training import job_kinds

    original = job_kinds.train_job_spec

    def with_env_in_the_patch(job: JobSettings, where: PodContext) -> dict:
        spec = original(job, where)
        replicated = spec["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]
        replicated["template"]["spec"]["template"]["spec"]["containers"][0]["env"] = spec["trainer"].pop("env")
        spec["trainer"]["env"] = [{"name": "PET_NODE_RANK", "value": "0"}]
        return spec

    monkeypatch.setattr("components.teams.team.train_job_spec", with_env_in_the_patch)
    with pytest.raises(SettingsError) as caught:
        load_team_settings({"job": {"dataSlices": 2, "numNodes": 2}})
    lines = [line for line in str(caught.value).splitlines() if line.startswith("  - job:")]
    assert any("env on the node container" in line for line in lines)
    assert any("reserved PET_NODE_RANK" in line for line in lines)


@pytest.mark.parametrize(
    ("workspace", "accepted"),
    [
        ({"imageVolumes": True}, True),
        ({"kubernetesVersion": "1.35"}, True),
        ({}, False),
        ({"kubernetesVersion": "1.34"}, False),
    ],
)
def test_image_volumes_need_a_cluster_that_keeps_them(workspace, accepted):
    config = {"workspace": workspace, "job": {"volumes": [{"name": "w", "mountPath": "/w", "image": IMAGE}]}}
    if accepted:
        assert load_team_settings(config).job.volumes
    else:
        with pytest.raises(SettingsError, match=r"job\.volumes: expected Kubernetes 1\.35"):
            load_team_settings(config)


# ------------------------------------------------------------------------------- loaders that burst into idle CPU


@pytest.mark.parametrize("kind", ["trainjob", "pytorchjob", "tfjob", "volcano"])
def test_a_cpu_burst_raises_only_the_cpu_limit_of_every_trainer(kind):
    job = rendered(kind, num_nodes=2, resources_per_node=GPU, cpu_burst=2.5)
    if kind == "trainjob":  # the Trainer puts resourcesPerNode on the node container
        given = [job["spec"]["trainer"]["resourcesPerNode"]]
    else:
        given = [pod["spec"]["containers"][0]["resources"] for pod in pods(job).values()]
    for resources in given:
        assert resources["requests"] == {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": 1}
        assert resources["limits"] == {"cpu": "20000m", "memory": "32Gi", "nvidia.com/gpu": 1}
    assert validate_custom_resource(job) == []
    still = rendered(kind, num_nodes=2, resources_per_node=GPU)  # no burst: Guaranteed, limits equal requests
    if kind == "trainjob":
        assert still["spec"]["trainer"]["resourcesPerNode"] == {
            "limits": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": 1}
        }
    else:
        for pod in pods(still).values():
            resources = pod["spec"]["containers"][0]["resources"]
            assert resources["limits"] == resources["requests"]


@pytest.mark.parametrize(
    ("job", "expected"),
    [
        ({"cpuBurst": 0.5, "resourcesPerNode": GPU}, "cpuBurst: expected a number >= 1"),
        ({"cpuBurst": 2}, "cpuBurst: expected a CPU request in every pod's resources"),
        ({"cpuBurst": 2, "resourcesPerNode": {"memory": "8Gi"}}, "cpuBurst: expected a CPU request"),
    ],
)
def test_a_bad_cpu_burst_is_refused_naming_the_key(job, expected):
    with pytest.raises(SettingsError, match=re.escape(f"job.{expected}")):
        load_team_settings({"job": job})
