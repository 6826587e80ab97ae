"""A team's job: a TrainJob on a platform runtime, or a Volcano Job that restarts whole when a pod is lost."""

from __future__ import annotations

import pytest

from components import training
from components.jobs import JobSettings, train_job_spec, volcano_job_spec
from components.sections import SettingsError
from components.team import load_team_settings
from tests.conformance.upstream import validate_custom_resource

IMAGE = "ghcr.io/example/trainer:1.0.0"


def volcano_job(**job: object) -> dict:
    spec = volcano_job_spec(JobSettings(kind="volcano", image=IMAGE, **job), "vision", 10001, "data", "ckpt")
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
    assert pod["metadata"]["labels"] == training.METRICS_LABELS
    (worker,) = pod["spec"]["containers"]
    assert worker["ports"] == [{"name": "train-metrics", "containerPort": 9095, "protocol": "TCP"}]
    assert {"name": "AI_STORAGE_METRICS_PORT", "value": "9095"} in worker["env"]
    # A TrainJob's pods get both from the platform's runtime (test_training); its patch leaves them alone.
    spec = train_job_spec(JobSettings(), "vision", 10001, "data", "ckpt")
    (replicated,) = spec["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    assert "labels" not in replicated["template"]["spec"]["template"]["metadata"]


def test_a_smaller_gang_can_start_first():
    assert volcano_job(num_nodes=4, min_available=2)["spec"]["minAvailable"] == 2


@pytest.mark.parametrize(
    ("job", "key", "expected"),
    [
        ({"kind": "volcano"}, "job.image", "expected an image with kind: volcano"),
        ({"kind": "volcano", "image": IMAGE, "numNodes": 2, "minAvailable": 3}, "job.minAvailable", "at most numNodes"),
        ({"kind": "slurm"}, "job.kind", "expected one of 'trainjob', 'volcano'"),
        ({"plugins": ["mpi"]}, "job.plugins[0]", "expected one of"),
        ({"maxRetry": -1}, "job.maxRetry", ">= 0"),
    ],
)
def test_bad_job_settings_are_rejected_with_key_and_hint(job, key, expected):
    with pytest.raises(SettingsError) as caught:
        load_team_settings({"job": job})
    message = str(caught.value)
    assert f"{key}:" in message and expected in message and "Hint:" in message
