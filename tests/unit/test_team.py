"""TeamWorkspace: the team-training example renders a restricted namespace, a Queue, cold-tier and checkpoint
claims and a TrainJob that patches the runtime's pods; a Fluid dataset reuses the Fluid code; bad values."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from components import render
from components.__main__ import main
from components.jobs import PATCH_MANAGER
from components.settings import SettingsError
from components.team import load_team_settings
from tests.conformance.upstream import validate_object
from tests.conftest import Render, by_name, objects, stack_file

EXAMPLE = render.ROOT / "examples" / "team-training"


@pytest.fixture(scope="session")
def as_installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Make ``ai_storage_platform``, the installed name the example imports, load this checkout's components/."""
    path = tmp_path_factory.mktemp("site")
    (path / "ai_storage_platform").symlink_to(render.ROOT / "components", target_is_directory=True)
    sys.path.insert(0, str(path))
    yield
    sys.path.remove(str(path))


@pytest.fixture(scope="session")
def platform_outputs() -> dict:
    """The outputs of the platform's dev stack, which the example reads through a StackReference."""
    return render.rendering("dev", render.run("dev")).outputs


@pytest.fixture
def render_team(tmp_path: Path, as_installed: None, platform_outputs: dict) -> Render:
    """``render_team(dataset={"size": "1Ti"})``: the example's dev stack with config overrides."""

    def run(**overrides: object) -> tuple[render.Rendering, render.RecordingMonitor]:
        config = stack_file(tmp_path, "dev", overrides, EXAMPLE)
        monitor = render.run("dev", config, EXAMPLE, platform_outputs)
        return render.rendering("dev", monitor), monitor

    return run


def node_pod(job: dict) -> dict:
    (patch,) = job["spec"]["runtimePatches"]
    (node,) = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    assert node["name"] == "node"
    return node["template"]["spec"]["template"]


def test_example_renders_the_workspace_and_exports_its_names(render_team):
    result, _ = render_team()
    assert result.plan["project"] == "team-training"
    assert result.charts == []  # the platform's charts are already on the cluster
    assert set(result.manifests) == {"vision"}
    assert result.outputs == {
        "namespace": "vision",
        "queue": "vision",
        "datasetClaim": "imagenet",
        "checkpointClaim": "checkpoints",
        "trainJob": "resnet50",
    }
    ns = by_name(result, "Namespace", "vision")
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    queue = by_name(result, "Queue", "vision")
    assert queue["spec"] == {
        "weight": 2,
        "reclaimable": True,
        "capability": {"cpu": "32", "memory": "128Gi", "nvidia.com/gpu": 4},
    }


def test_dataset_and_checkpoint_claims_are_rwx_on_the_cold_and_checkpoint_tiers(render_team):
    result, _ = render_team()
    data = by_name(result, "PersistentVolumeClaim", "imagenet")
    ckpt = by_name(result, "PersistentVolumeClaim", "checkpoints")
    assert (data["spec"]["storageClassName"], ckpt["spec"]["storageClassName"]) == ("cold", "checkpoint")
    assert data["spec"]["accessModes"] == ckpt["spec"]["accessModes"] == ["ReadWriteMany"]
    assert data["spec"]["resources"]["requests"]["storage"] == "500Gi"
    assert ckpt["spec"]["resources"]["requests"]["storage"] == "200Gi"
    assert data["metadata"]["namespace"] == ckpt["metadata"]["namespace"] == "vision"


def test_every_object_of_the_example_conforms_to_upstream_schemas(render_team):
    result, _ = render_team()
    rendered = [o for objs in result.manifests.values() for o in objs]
    assert {o["kind"] for o in rendered} == {
        "Namespace",
        "ResourceQuota",
        "LimitRange",
        "Queue",
        "PersistentVolumeClaim",
        "TrainJob",
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "CronJob",
        "Secret",
    }
    for obj in rendered:
        assert validate_object(obj, "1.33") == [], obj["kind"]


def test_trainjob_runs_on_the_named_runtime_with_the_trainer_overrides(render_team):
    result, _ = render_team()
    job = by_name(result, "TrainJob", "resnet50")
    assert job["apiVersion"] == "trainer.kubeflow.org/v1alpha1"
    assert job["metadata"]["namespace"] == "vision"
    assert job["spec"]["runtimeRef"] == {"name": "torch-distributed-team-a"}
    trainer = job["spec"]["trainer"]
    assert trainer["numNodes"] == 2 and trainer["image"] == "ghcr.io/example/vision-trainer:1.4.0"
    assert trainer["resourcesPerNode"] == {"limits": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": 1}}


def test_trainjob_patches_queue_dataset_checkpoints_and_non_root_into_the_node_pods(render_team):
    result, _ = render_team()
    job = by_name(result, "TrainJob", "resnet50")
    (patch,) = job["spec"]["runtimePatches"]
    assert patch["manager"] == PATCH_MANAGER
    queue = {"scheduling.volcano.sh/queue-name": "vision"}
    # The Trainer's Volcano plugin takes the PodGroup's queue from the JobSet template annotations.
    assert patch["trainingRuntimeSpec"]["template"]["metadata"]["annotations"] == queue
    pod = node_pod(job)
    assert pod["metadata"]["annotations"] == queue
    (container,) = pod["spec"]["containers"]
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts["/data"]["readOnly"] is True and "readOnly" not in mounts["/checkpoints"]
    claims = {v["name"]: v["persistentVolumeClaim"] for v in pod["spec"]["volumes"]}
    assert claims == {"data": {"claimName": "imagenet", "readOnly": True}, "checkpoints": {"claimName": "checkpoints"}}
    security = pod["spec"]["securityContext"]
    assert security["runAsNonRoot"] is True and security["fsGroup"] == 10001
    assert security["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}


def test_trainjob_waits_for_the_queue_and_both_claims(render_team):
    result, _ = render_team()
    deps = {r["name"]: set(r["dependsOn"]) for r in result.plan["resources"]}
    assert {"vision-queue", "vision-dataset", "vision-checkpoints"} <= deps["vision-trainjob"]


def test_tier_prefix_and_protect_reach_the_claims(render_team):
    result, monitor = render_team(workspace={"tierPrefix": "ai-", "protect": True})
    assert by_name(result, "PersistentVolumeClaim", "imagenet")["spec"]["storageClassName"] == "ai-cold"
    assert by_name(result, "PersistentVolumeClaim", "checkpoints")["spec"]["storageClassName"] == "ai-checkpoint"
    claims = [r for r in monitor.registrations if r.type == "kubernetes:core/v1:PersistentVolumeClaim"]
    assert len(claims) == 2 and all(r.protect and r.retain_on_delete for r in claims)


def test_without_a_job_the_workspace_still_gets_its_queue_and_claims(render_team):
    result, _ = render_team(job={"enabled": False})
    assert not objects(result, "TrainJob")
    assert "trainJob" not in result.outputs or result.outputs["trainJob"] is None
    assert len(objects(result, "PersistentVolumeClaim")) == 2


FLUID_PROGRAM = """
import pulumi
from components.fluid import JuiceFSSource
from components.settings import stack_config
from components.team import TeamWorkspace, TeamWorkspaceArgs, load_team_settings

volume = JuiceFSSource("ai-datasets", "redis://:pw@redis:6379/1", "s3", "https://b.s3.amazonaws.com", "ak", "sk")
TeamWorkspace("nlp", TeamWorkspaceArgs(load_team_settings(stack_config()), volume))
"""


def test_fluid_dataset_is_a_dataset_and_juicefs_runtime_in_a_privileged_namespace(tmp_path):
    (tmp_path / "Pulumi.yaml").write_text("name: team-fluid\nruntime: python\n")
    (tmp_path / "__main__.py").write_text(FLUID_PROGRAM)
    dataset = {"name": "corpus", "source": "fluid", "fluid": {"path": "/datasets/corpus", "prewarm": True}}
    workspace = {"podSecurity": "privileged", "namespace": "nlp"}
    config = {"team-fluid:workspace": workspace, "team-fluid:dataset": dataset}
    (tmp_path / "Pulumi.dev.yaml").write_text(yaml.safe_dump({"config": config}))
    result = render.rendering("dev", render.run("dev", root=tmp_path))
    assert by_name(result, "Namespace", "nlp")["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == (
        "privileged"
    )
    ds = by_name(result, "Dataset", "corpus")
    assert ds["spec"]["mounts"][0]["mountPoint"] == "juicefs:///datasets/corpus"
    assert by_name(result, "JuiceFSRuntime", "corpus")["metadata"]["namespace"] == "nlp"
    assert by_name(result, "DataLoad", "corpus-prewarm")["spec"]["dataset"] == {"name": "corpus", "namespace": "nlp"}
    assert set(by_name(result, "Secret", "fluid-dataset-credentials-juicefs")["stringData"].values()) == {"[secret]"}
    # Fluid creates the claim, named after the Dataset: the workspace creates only the checkpoint claim.
    assert [c["metadata"]["name"] for c in objects(result, "PersistentVolumeClaim")] == ["checkpoints"]
    pod = node_pod(by_name(result, "TrainJob", "train"))
    data = {"name": "data", "persistentVolumeClaim": {"claimName": "corpus", "readOnly": True}}
    assert data in pod["spec"]["volumes"]
    for objs in result.manifests.values():
        for obj in objs:
            assert validate_object(obj, "1.33") == [], obj["kind"]


def test_fluid_dataset_needs_a_privileged_namespace():
    with pytest.raises(SettingsError) as err:
        load_team_settings({"dataset": {"source": "fluid"}})
    assert "workspace.podSecurity: expected privileged with dataset.source: fluid; got 'restricted'" in str(err.value)


def test_checkpoint_claim_and_dataset_need_different_names():
    with pytest.raises(SettingsError) as err:
        load_team_settings({"dataset": {"name": "ckpt"}, "checkpoint": {"claim": "ckpt"}})
    assert "checkpoint.claim: expected a claim name other than dataset.name" in str(err.value)


@pytest.mark.parametrize(
    ("config", "key", "expected"),
    [
        ({"job": {"name": "1st-run"}}, "job.name", "expected text matching ^[a-z]"),
        ({"job": {"image": "pytorch/pytorch"}}, "job.image", "expected text matching"),
        ({"job": {"numNodes": 0}}, "job.numNodes", "expected a number >= 1"),
        ({"queue": {"name": "default"}}, "queue.name", "owns those queues"),
        ({"workspace": {"tierPrefix": "ai"}}, "workspace.tierPrefix", "expected text matching"),
        ({"workspace": {"runAsUser": 0}}, "workspace.runAsUser", "expected a number >= 1"),
        ({"workspace": {"protect": "yes"}}, "workspace.protect", "expected true or false"),
        ({"dataset": {"source": "s3"}}, "dataset.source", "expected one of 'claim', 'fluid'"),
    ],
)
def test_bad_values_name_the_key(config, key, expected):
    with pytest.raises(SettingsError) as err:
        load_team_settings(config)
    assert f"  - {key}: " in str(err.value) and expected in str(err.value)


def test_cli_renders_the_example_and_exits_2_on_a_bad_value(tmp_path, capsys, as_installed, platform_outputs):
    outputs = tmp_path / "platform-outputs.json"
    outputs.write_text(json.dumps(platform_outputs))
    example = ["--project-dir", str(EXAMPLE), "--stack-outputs", str(outputs)]
    assert main(["render", "--stack", "dev", *example, "--out", str(tmp_path / "ok")]) == 0
    assert (tmp_path / "ok" / "manifests" / "vision.yaml").is_file()
    bad = stack_file(tmp_path, "dev", {"job": {"name": "ResNet"}}, EXAMPLE)
    args = ["render", "--stack", "dev", *example, "--config-file", str(bad)]
    assert main([*args, "--out", str(tmp_path / "bad")]) == 2
    assert "job.name: expected text matching" in capsys.readouterr().err


def test_example_imports_the_library_by_its_installed_name_only():
    source = (EXAMPLE / "__main__.py").read_text()
    assert "from ai_storage_platform." in source
    assert "import components" not in source and "from components" not in source
    assert (EXAMPLE / "requirements.txt").read_text().splitlines()[-1] == "../.."
