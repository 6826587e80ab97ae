"""TeamWorkspace: the team-training example renders, in the namespace the platform vends, its checkpoint claim
(snapshots, offsite copies with what the platform delivered), a shared or own dataset claim and a TrainJob that
patches the runtime's pods, with no Secret and no StackReference; bad values."""

from __future__ import annotations

from pathlib import Path

import pytest

from components import tenants
from components.jobs import PATCH_MANAGER
from components.settings import SettingsError
from components.team import load_team_settings
from components.toolchain import render
from components.toolchain.cli import main
from tests.conformance.upstream import validate_object
from tests.conftest import Render, by_name, objects, stack_file

EXAMPLE = render.ROOT / "examples" / "team-training"


@pytest.fixture
def render_team(tmp_path: Path, as_installed: None) -> Render:
    """``render_team("dev-volcano", dataset={"size": "1Ti"})``: a stack of the example with config overrides."""

    def run(stack: str = "dev", **overrides: object) -> tuple[render.Rendering, render.RecordingMonitor]:
        config = stack_file(tmp_path, stack, overrides, EXAMPLE)
        monitor = render.run(stack, config, EXAMPLE)
        return render.rendering(stack, monitor), monitor

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
        "datasetClaim": "imagenet-mini",
        "checkpointClaim": "checkpoints",
        "trainJob": "resnet50",
    }
    # The platform vends the namespace, its quotas, its Queue and its keys; the team's project creates none
    # (and reads no output of the platform's stack: test_tenant_isolation).
    kinds = {o["kind"] for objs in result.manifests.values() for o in objs}
    assert not kinds & {"Namespace", "ResourceQuota", "LimitRange", "Queue", "Secret"}


def test_a_shared_dataset_is_mounted_not_created_and_the_checkpoint_claim_is_rwx(render_team):
    result, _ = render_team()
    (ckpt,) = objects(result, "PersistentVolumeClaim")
    assert (ckpt["metadata"]["name"], ckpt["metadata"]["namespace"]) == ("checkpoints", "vision")
    assert ckpt["spec"]["storageClassName"] == "checkpoint" and ckpt["spec"]["accessModes"] == ["ReadWriteMany"]
    assert ckpt["spec"]["resources"]["requests"]["storage"] == "200Gi"
    volumes = node_pod(by_name(result, "TrainJob", "resnet50"))["spec"]["volumes"]
    assert {"name": "data", "persistentVolumeClaim": {"claimName": "imagenet-mini", "readOnly": True}} in volumes


def test_an_own_dataset_is_a_cold_tier_claim(render_team):
    result, _ = render_team(dataset={"name": "imagenet", "source": "claim", "size": "500Gi"})
    data = by_name(result, "PersistentVolumeClaim", "imagenet")
    assert data["spec"]["storageClassName"] == "cold" and data["spec"]["accessModes"] == ["ReadWriteMany"]
    assert data["spec"]["resources"]["requests"]["storage"] == "500Gi"
    assert data["metadata"]["namespace"] == "vision"


def test_offsite_copies_use_what_the_platform_delivered_into_the_namespace(render_team):
    result, _ = render_team()
    job = by_name(result, "CronJob", "checkpoints-offsite")
    pod = job["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == tenants.OFFSITE_ACCOUNT
    volumes = {v["name"]: v for v in pod["volumes"]}
    # Optional: under IAM roles for service accounts the platform delivers no keys, the account's role instead.
    assert volumes["credentials"]["secret"] == {"secretName": tenants.OFFSITE_CREDENTIALS, "optional": True}
    (container,) = pod["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert env["OFFSITE_URL"]["valueFrom"] == {"configMapKeyRef": {"name": tenants.OFFSITE_TARGET, "key": "url"}}
    assert env["SYNC_FLAGS"]["valueFrom"] == {"configMapKeyRef": {"name": tenants.OFFSITE_TARGET, "key": "sync-flags"}}
    # Kubernetes expands $(OFFSITE_URL) only from a variable defined before it.
    assert env["DESTINATION"]["value"] == "$(OFFSITE_URL)checkpoints/"
    names = [e["name"] for e in container["env"]]
    assert names.index("OFFSITE_URL") < names.index("DESTINATION")
    assert "juicefs sync $SYNC_FLAGS --exclude COMPLETE" in container["command"][2]


def test_every_object_of_the_example_conforms_to_upstream_schemas(render_team):
    for stack, kind in (("dev", "TrainJob"), ("dev-volcano", "Job")):
        result, _ = render_team(stack)
        rendered = [o for objs in result.manifests.values() for o in objs]
        kinds = {"PersistentVolumeClaim", "ServiceAccount", "Role", "RoleBinding", "CronJob", kind}
        assert {o["kind"] for o in rendered} == kinds
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
    expected = {"data": {"claimName": "imagenet-mini", "readOnly": True}, "checkpoints": {"claimName": "checkpoints"}}
    assert claims == expected
    security = pod["spec"]["securityContext"]
    assert security["runAsNonRoot"] is True and security["fsGroup"] == 10001
    assert security["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}


def test_trainjob_waits_for_both_claims(render_team):
    result, _ = render_team(dataset={"source": "claim"})
    deps = {r["name"]: set(r["dependsOn"]) for r in result.plan["resources"]}
    assert {"vision-dataset", "vision-checkpoints"} <= deps["vision-trainjob"]


def test_tier_prefix_and_protect_reach_the_claims(render_team):
    result, monitor = render_team(workspace={"tierPrefix": "ai-", "protect": True}, dataset={"source": "claim"})
    assert by_name(result, "PersistentVolumeClaim", "imagenet-mini")["spec"]["storageClassName"] == "ai-cold"
    assert by_name(result, "PersistentVolumeClaim", "checkpoints")["spec"]["storageClassName"] == "ai-checkpoint"
    claims = [r for r in monitor.registrations if r.type == "kubernetes:core/v1:PersistentVolumeClaim"]
    assert len(claims) == 2 and all(r.protect and r.retain_on_delete for r in claims)


def test_without_a_job_the_workspace_still_gets_its_claims(render_team):
    result, _ = render_team(job={"enabled": False}, dataset={"source": "claim"})
    assert not objects(result, "TrainJob")
    assert "trainJob" not in result.outputs or result.outputs["trainJob"] is None
    assert len(objects(result, "PersistentVolumeClaim")) == 2


def test_the_queue_defaults_to_the_namespace(render_team):
    result, _ = render_team("dev-volcano")
    assert result.outputs["queue"] == "speech"
    assert by_name(result, "Job", "conformer")["spec"]["queue"] == "speech"


def test_checkpoint_claim_and_dataset_need_different_names():
    with pytest.raises(SettingsError) as err:
        load_team_settings({"dataset": {"name": "ckpt"}, "checkpoint": {"claim": "ckpt"}})
    assert "checkpoint.claim: expected a claim name other than dataset.name" in str(err.value)


@pytest.mark.parametrize(
    ("config", "key", "expected"),
    [
        ({"job": {"name": "1st-run"}}, "job.name", "expected text matching ^[a-z]"),
        ({"job": {"image": "pytorch/pytorch"}}, "job.image", "expected an image pinned by a version tag or a digest"),
        ({"job": {"numNodes": 0}}, "job.numNodes", "expected a number >= 1"),
        ({"workspace": {"tierPrefix": "ai"}}, "workspace.tierPrefix", "expected text matching"),
        ({"workspace": {"runAsUser": 0}}, "workspace.runAsUser", "expected a number >= 1"),
        ({"workspace": {"protect": "yes"}}, "workspace.protect", "expected true or false"),
        ({"dataset": {"source": "fluid"}}, "dataset.source", "expected one of 'claim', 'shared'"),
        ({"queue": "Vision"}, "queue", "expected a DNS label"),
        ({"queue": {"name": "vision"}}, "queue", "expected a string"),
        ({"workspace": {"platformStack": "o/p/s"}}, "workspace.platformStack", "no such key"),
    ],
)
def test_bad_values_name_the_key(config, key, expected):
    with pytest.raises(SettingsError) as err:
        load_team_settings(config)
    assert f"  - {key}: " in str(err.value) and expected in str(err.value)


def test_cli_renders_the_example_and_exits_2_on_a_bad_value(tmp_path, capsys, as_installed):
    example = ["--project-dir", str(EXAMPLE)]
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
