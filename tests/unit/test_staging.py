"""Staging a dataset version onto the hot tier: the example's Volcano Job gets an init container that runs the
job's image with the `stage` command, onto a generic ephemeral volume of the hot class (or a claim), restricted
and within the namespace's LimitRange and quota; the trainer reads the staged copy read-only, told where by the
library's variables; a platform runtime stages the same way for its TrainJobs; off by default, and bad values are
refused naming the key."""

from __future__ import annotations

import functools

import pytest

from components.common import versions
from components.common.sections import SettingsError
from components.settings import load_settings, merge
from components.teams.team import load_team_settings
from components.toolchain import render
from components.training.staging import StagingSettings, stage_command
from components.training.trainer import RuntimeSettings, runtime_spec
from tests import kube_semantics
from tests.conformance.upstream import validate_custom_resource
from tests.conftest import Render, objects

SHA = "ab" * 32


@pytest.fixture
def render_team(render_team: Render) -> Render:
    """The team example's dev-volcano stack unless told otherwise (staging renders into Volcano jobs)."""
    return functools.partial(render_team, "dev-volcano")


def pod_spec(result: render.Rendering) -> dict:
    (job,) = objects(result, "Job")
    return job["spec"]["tasks"][0]["template"]["spec"]


def test_the_init_container_runs_the_job_image_with_the_stage_command(render_team):
    result, _ = render_team(staging={"manifestSha256": SHA})
    pod = pod_spec(result)
    (init,) = pod["initContainers"]
    (trainer,) = pod["containers"]
    assert init["name"] == "stage-dataset" and init["image"] == trainer["image"]
    source, dest = "/data/v3", "/staged/v3"
    expected = ["python", "-m", "ai_storage_training", "stage", "--source", source, "--dest", dest]
    assert init["command"] == [*expected, "--manifest-sha256", SHA]
    env = {e["name"]: e["value"] for e in trainer["env"] if "value" in e}
    assert env["AI_STORAGE_DATASET_DIR"] == dest and env["AI_STORAGE_DATASET_MANIFEST_SHA256"] == SHA


def test_the_copy_lands_on_a_hot_ephemeral_volume_the_trainer_mounts_read_only(render_team):
    result, _ = render_team(workspace={"tierPrefix": "ai-"}, staging={"size": "300Gi"})
    pod = pod_spec(result)
    volumes = {v["name"]: v for v in pod["volumes"]}
    template = volumes["staged"]["ephemeral"]["volumeClaimTemplate"]["spec"]
    assert template == {
        "accessModes": ["ReadWriteOnce"],
        "storageClassName": "ai-hot",
        "resources": {"requests": {"storage": "300Gi"}},
    }
    (init,) = pod["initContainers"]
    init_mounts = {m["mountPath"]: (m["name"], m.get("readOnly", False)) for m in init["volumeMounts"]}
    assert init_mounts == {"/data": ("data", True), "/staged": ("staged", False)}
    trainer_mounts = {
        m["mountPath"]: (m["name"], m.get("readOnly", False)) for m in pod["containers"][0]["volumeMounts"]
    }
    assert trainer_mounts["/staged"] == ("staged", True) and trainer_mounts["/data"] == ("data", True)


def test_a_named_hot_claim_keeps_the_staged_copy_between_jobs(render_team):
    result, _ = render_team(staging={"claim": "nvme-cache"})
    volumes = {v["name"]: v for v in pod_spec(result)["volumes"]}
    assert volumes["staged"] == {"name": "staged", "persistentVolumeClaim": {"claimName": "nvme-cache"}}


def test_the_init_container_is_restricted_and_fits_the_namespace_limit_range(render_team):
    result, _ = render_team(staging={"resources": {"cpuRequest": "1", "memoryRequest": "512Mi", "memoryLimit": "2Gi"}})
    (init,) = pod_spec(result)["initContainers"]
    security = init["securityContext"]
    assert security["runAsNonRoot"] is True and security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]} and security["seccompProfile"] == {"type": "RuntimeDefault"}
    assert init["resources"] == {"requests": {"cpu": "1", "memory": "512Mi"}, "limits": {"memory": "2Gi"}}
    platform = render.rendering("dev", render.run("dev"))
    (limits,) = [o for o in objects(platform, "LimitRange") if o["metadata"]["namespace"] == "speech"]
    _, errors = kube_semantics.admit_container(limits["spec"], init)
    assert errors == []


def test_staging_is_off_by_default_and_off_renders_nothing_of_it(render_team):
    result, _ = render_team(staging={"enabled": False})
    pod = pod_spec(result)
    assert "initContainers" not in pod and "staged" not in {v["name"] for v in pod["volumes"]}
    assert not any(e["name"].startswith("AI_STORAGE_DATASET") for e in pod["containers"][0]["env"])
    assert StagingSettings().enabled is False


def test_the_command_names_the_version_directory_under_the_dataset_claim():
    s = StagingSettings(enabled=True, version="2024-06", source="")
    assert stage_command(s)[4:] == ["--source", "/data/2024-06", "--dest", "/staged/2024-06"]


@pytest.mark.parametrize(
    ("staging", "key", "expected"),
    [
        ({"enabled": True}, "staging.version", "expected a dataset version with enabled: true"),
        ({"version": "../v1"}, "staging.version", "expected text matching"),
        ({"source": "a/../b"}, "staging.source", "expected text matching"),
        ({"source": "/abs"}, "staging.source", "expected text matching"),
        ({"manifestSha256": "AB" * 32}, "staging.manifestSha256", "expected text matching"),
        ({"manifestSha256": "ab"}, "staging.manifestSha256", "expected text matching"),
        ({"size": "lots"}, "staging.size", "expected a Kubernetes quantity"),
        ({"claim": "Cache"}, "staging.claim", "expected a DNS label"),
    ],
)
def test_bad_staging_values_name_the_key(staging, key, expected):
    with pytest.raises(SettingsError) as err:
        load_team_settings({"job": {"kind": "volcano", "image": "x/y:1"}, "staging": staging})
    assert f"  - {key}: " in str(err.value) and expected in str(err.value)


def test_a_trainjob_cannot_stage_and_says_why():
    with pytest.raises(SettingsError) as err:
        load_team_settings({"staging": {"enabled": True, "version": "v1"}})
    assert "  - staging.enabled: expected job.kind: volcano" in str(err.value)


def test_the_staging_claim_is_not_the_dataset_or_checkpoint_claim():
    config = {"job": {"kind": "volcano", "image": "x/y:1"}, "staging": {"enabled": True, "version": "v1"}}
    with pytest.raises(SettingsError) as err:
        load_team_settings({**config, "staging": {"enabled": True, "version": "v1", "claim": "dataset"}})
    assert "  - staging.claim: expected a claim other than dataset.name and checkpoint.claim" in str(err.value)


def test_the_example_hot_volumes_fit_the_vended_namespace_quota_and_claim_policy(render_team):
    result, _ = render_team()
    (job,) = objects(result, "Job")
    volumes = {v["name"]: v for v in pod_spec(result)["volumes"]}
    claim = volumes["staged"]["ephemeral"]["volumeClaimTemplate"]["spec"]
    platform = render.rendering("dev", render.run("dev"))
    (quota,) = [o for o in objects(platform, "ResourceQuota") if o["metadata"]["namespace"] == "speech"]
    hard = quota["spec"]["hard"]
    cls = claim["storageClassName"]
    pods = job["spec"]["tasks"][0]["replicas"]  # one ephemeral claim per pod
    requested = pods * kube_semantics.quantity(claim["resources"]["requests"]["storage"])
    assert requested <= kube_semantics.quantity(hard[f"{cls}.storageclass.storage.k8s.io/requests.storage"])
    assert pods <= int(hard[f"{cls}.storageclass.storage.k8s.io/persistentvolumeclaims"])
    (policy,) = objects(platform, "ValidatingAdmissionPolicy")
    assert f"'{cls}'" in policy["spec"]["validations"][0]["expression"]  # a tier class: the claim policy admits it


STAGER = "ghcr.io/example/vision-trainer:1.4.0"
RUNTIME = {"name": "torch-staged", "queue": "team-a", "datasetClaim": "datasets", "image": STAGER}


def test_a_platform_runtime_stages_for_its_trainjobs_with_its_image():
    staging = {"enabled": True, "source": "imagenet", "version": "v2", "size": "500Gi"}
    runtime = RuntimeSettings.model_validate({**RUNTIME, "staging": staging})
    cr = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": "torch-staged"},
        "spec": runtime_spec(runtime, "checkpoints", None, "ai-"),
    }
    assert validate_custom_resource(cr) == []  # against the Trainer's upstream CRD
    pod = cr["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    (init,) = pod["initContainers"]
    assert init["image"] == STAGER and init["command"][4:] == [
        "--source",
        "/data/imagenet/v2",
        "--dest",
        "/staged/imagenet/v2",
    ]
    assert pod["securityContext"]["fsGroup"] == 10001  # the non-root init container can write the new volume
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["staged"]["ephemeral"]["volumeClaimTemplate"]["spec"]["storageClassName"] == "ai-hot"
    (node,) = pod["containers"]
    assert {"name": "AI_STORAGE_DATASET_DIR", "value": "/staged/imagenet/v2"} in node["env"]


def test_a_runtime_without_staging_renders_as_before():
    runtime = RuntimeSettings.model_validate(RUNTIME)
    pod = runtime_spec(runtime, "checkpoints")["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert "initContainers" not in pod["template"]["spec"]
    assert "fsGroup" not in pod["template"]["spec"].get("securityContext", {})


def test_a_runtime_stages_only_with_an_image_that_has_the_library_and_a_hot_tier():
    platform = {"training": {"enabled": True}, "volcano": {"enabled": True, "queues": [{"name": "team-a"}]}}
    staging = {"enabled": True, "version": "v1"}
    bare = {**RUNTIME, "image": versions.TORCH_RUNTIME_IMAGE, "staging": staging}
    with pytest.raises(SettingsError) as err:
        load_settings("dev", merge(platform, {"training": {"runtimes": [bare]}}))
    assert "  - training.runtimes[0].image: expected an image with the training library" in str(err.value)
    no_hot = merge(platform, {"training": {"runtimes": [{**RUNTIME, "staging": staging}]}, "tiers": {"hot": "none"}})
    with pytest.raises(SettingsError) as err:
        load_settings("dev", no_hot)
    assert "  - training.runtimes[0].staging.enabled: expected a backend for tiers.hot" in str(err.value)
