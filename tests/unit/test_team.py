"""TeamWorkspace: the team-training example renders, in the namespace the platform vends, its checkpoint claim
(snapshots, offsite copies with what the platform delivered), a shared or own dataset claim and a TrainJob that
patches the runtime's pods, with no Secret and no StackReference; bad values."""

from __future__ import annotations

import pytest

from components.common import kube
from components.settings import SettingsError
from components.teams import tenants
from components.teams.team import load_team_settings
from components.toolchain import render
from components.toolchain.cli import main
from components.training.job_kinds import PATCH_MANAGER
from tests.conformance.upstream import validate_object
from tests.conftest import TEAM_EXAMPLE, by_name, objects, stack_file
from tests.unit.test_training import multiproc_dir


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
    result, _ = render_team(dataset={"name": "imagenet", "source": "claim", "size": "2Gi"})  # the 2Gi cold left
    data = by_name(result, "PersistentVolumeClaim", "imagenet")
    assert data["spec"]["storageClassName"] == "cold" and data["spec"]["accessModes"] == ["ReadWriteMany"]
    assert data["spec"]["resources"]["requests"]["storage"] == "2Gi"
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
    for stack, job_kinds in (("dev", {"TrainJob"}), ("dev-volcano", {"Job", "NetworkPolicy"})):
        result, _ = render_team(stack)
        rendered = [o for objs in result.manifests.values() for o in objs]
        kinds = {"PersistentVolumeClaim", "ServiceAccount", "Role", "RoleBinding", "CronJob", *job_kinds}
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
    assert trainer["resourcesPerNode"] == {  # the example's cpuBurst 2: the limit twice the CPU request
        "requests": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": 1},
        "limits": {"cpu": "16000m", "memory": "32Gi", "nvidia.com/gpu": 1},
    }


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
    claims = {v["name"]: v["persistentVolumeClaim"] for v in pod["spec"]["volumes"] if "persistentVolumeClaim" in v}
    expected = {
        "data": {"claimName": "imagenet-mini", "readOnly": True},
        "checkpoints": {"claimName": "checkpoints"},
        "space": {"claimName": "space", "readOnly": False},  # the example's job volumes (test_job_volumes)
        "eval": {"claimName": "vision-eval", "readOnly": True},
    }
    assert claims == expected
    security = pod["spec"]["securityContext"]
    assert security["runAsNonRoot"] is True and security["fsGroup"] == 10001
    assert security["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}


def test_trainjob_waits_for_both_claims(render_team):
    result, _ = render_team(dataset={"source": "claim", "size": "1Gi"})
    deps = {r["name"]: set(r["dependsOn"]) for r in result.plan["resources"]}
    assert {"vision-dataset", "vision-checkpoints"} <= deps["vision-trainjob"]


def test_tier_prefix_and_protect_reach_the_claims(render_team):
    result, monitor = render_team(
        workspace={"tierPrefix": "ai-", "protect": True}, dataset={"source": "claim", "size": "1Gi"}
    )
    assert by_name(result, "PersistentVolumeClaim", "imagenet-mini")["spec"]["storageClassName"] == "ai-cold"
    assert by_name(result, "PersistentVolumeClaim", "checkpoints")["spec"]["storageClassName"] == "ai-checkpoint"
    claims = [r for r in monitor.registrations if r.type == "kubernetes:core/v1:PersistentVolumeClaim"]
    assert len(claims) == 2 and all(r.protect and r.retain_on_delete for r in claims)


def test_without_a_job_the_workspace_still_gets_its_claims(render_team):
    result, _ = render_team(job={"enabled": False}, dataset={"source": "claim", "size": "1Gi"})
    assert not objects(result, "TrainJob")
    assert "trainJob" not in result.outputs or result.outputs["trainJob"] is None
    assert len(objects(result, "PersistentVolumeClaim")) == 2


def test_the_queue_defaults_to_the_namespace(render_team):
    result, _ = render_team("dev-volcano")
    assert result.outputs["queue"] == "speech"
    assert by_name(result, "Job", "conformer")["spec"]["queue"] == "speech"


def pod_of(result: render.Rendering, stack: str) -> dict:
    """The training pod template of the example's job (TrainJob patch or Volcano task)."""
    if stack == "dev":
        return node_pod(by_name(result, "TrainJob", "resnet50"))
    (task,) = by_name(result, "Job", "conformer")["spec"]["tasks"]
    return task["template"]


def container_of(result: render.Rendering, stack: str) -> dict:
    """The training container as it runs: a TrainJob's patched node container gets ``spec.trainer.env`` from the
    Trainer (``Torch.EnforceMLPolicy`` upserts it, plugins/torch/torch.go at kubeflow/trainer v2.3.0)."""
    (container,) = pod_of(result, stack)["spec"]["containers"]
    if stack == "dev":
        trainer = by_name(result, "TrainJob", "resnet50")["spec"].get("trainer", {})
        assert "env" not in container  # the Trainer's webhook refuses env in a patch of the node container
        container = {**container, "env": trainer.get("env", [])}
    return container


@pytest.mark.parametrize(("stack", "job"), [("dev", "resnet50"), ("dev-volcano", "conformer")])
def test_a_landing_volume_on_the_hot_tier_is_mounted_and_named_to_the_library(render_team, stack, job):
    result, _ = render_team(
        stack, checkpoint={"landing": {"enabled": True, "size": "150Gi"}}, workspace={"tierPrefix": "ai-"}
    )
    pod, container = pod_of(result, stack), container_of(result, stack)
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    template = volumes["checkpoint-landing"]["ephemeral"]["volumeClaimTemplate"]
    assert template["spec"] == {
        "accessModes": ["ReadWriteOnce"],
        "storageClassName": "ai-hot",
        "resources": {"requests": {"storage": "150Gi"}},
    }
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert mounts["/checkpoint-landing"] == "checkpoint-landing" and mounts["/checkpoints"] == "checkpoints"
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["AI_STORAGE_CHECKPOINT_LOCAL_DIR"] == "/checkpoint-landing"
    assert env["AI_STORAGE_CHECKPOINT_DIR"] == f"/checkpoints/{job}"
    for obj in [o for objs in result.manifests.values() for o in objs]:
        assert validate_object(obj, "1.33") == [], obj["kind"]


@pytest.mark.parametrize("stack", ["dev", "dev-volcano"])
def test_without_the_landing_volume_the_pod_has_neither_the_volume_nor_the_variables(render_team, stack):
    result, _ = render_team(stack)
    pod, container = pod_of(result, stack), container_of(result, stack)
    assert "checkpoint-landing" not in [v["name"] for v in pod["spec"]["volumes"]]
    assert "/checkpoint-landing" not in [m["mountPath"] for m in container["volumeMounts"]]
    assert not any(e["name"].startswith("AI_STORAGE_CHECKPOINT") for e in container.get("env", []))


@pytest.mark.parametrize("stack", ["dev", "dev-volcano"])
@pytest.mark.parametrize("landing", [False, True])
def test_the_training_container_gets_a_writable_multiprocess_metrics_dir(render_team, stack, landing):
    # The TrainJob's patch carries it too (the runtime's volume of the same name merges with it): pods keep it on
    # a runtime of their own.
    result, _ = render_team(stack, checkpoint={"landing": {"enabled": landing}})
    pod, container = pod_of(result, stack), container_of(result, stack)
    assert multiproc_dir(pod["spec"], container) == {"sizeLimit": "64Mi"}
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True  # restricted: written as the team's user
    for obj in [o for objs in result.manifests.values() for o in objs]:
        assert validate_object(obj, "1.33") == [], obj["kind"]


def test_the_restore_test_runs_the_job_image_on_the_claim_read_only_as_the_team(render_team):
    result, _ = render_team(checkpoint={"restoreTest": {"enabled": True, "schedule": "0 5 * * 1"}})
    cronjob = by_name(result, "CronJob", "checkpoints-restore-test")
    assert cronjob["metadata"]["namespace"] == "vision" and cronjob["spec"]["schedule"] == "0 5 * * 1"
    job = cronjob["spec"]["jobTemplate"]["spec"]
    # A refused checkpoint (exit 1) or bad arguments (2) fail the Job at once; an I/O error (3) is retried.
    (rule,) = job["podFailurePolicy"]["rules"]
    assert rule["action"] == "FailJob" and rule["onExitCodes"]["values"] == [1, 2]
    pod = job["template"]["spec"]
    assert pod["serviceAccountName"] == "checkpoints-restore-test" and pod["automountServiceAccountToken"] is False
    assert pod["restartPolicy"] == "Never"
    assert pod["securityContext"]["runAsUser"] == 10001 and pod["securityContext"]["runAsNonRoot"] is True
    (container,) = pod["containers"]
    assert container["image"] == "ghcr.io/example/vision-trainer:1.4.0"
    assert container["command"] == ["python", "-m", "ai_storage_training", "restore-test", "/checkpoints/resnet50"]
    assert container["resources"]["limits"] == {"cpu": "2", "memory": "4Gi"}
    assert {"name": "checkpoints", "mountPath": "/checkpoints", "readOnly": True} in container["volumeMounts"]
    claim = {"name": "checkpoints", "persistentVolumeClaim": {"claimName": "checkpoints", "readOnly": True}}
    assert claim in pod["volumes"]
    account = by_name(result, "ServiceAccount", "checkpoints-restore-test")
    assert account["automountServiceAccountToken"] is False
    deps = {r["name"]: set(r["dependsOn"]) for r in result.plan["resources"]}
    assert {"vision-checkpoints", "vision-checkpoints-restore-test-account"} <= deps["vision-checkpoints-restore-test"]
    for obj in [o for objs in result.manifests.values() for o in objs]:
        assert validate_object(obj, "1.33") == [], obj["kind"]


def test_the_restore_test_is_off_by_default_and_takes_its_own_image(render_team):
    result, _ = render_team("dev-volcano")  # its stack file does not turn it on
    assert "checkpoints-restore-test" not in {o["metadata"]["name"] for o in objects(result, "CronJob")}
    result, _ = render_team(checkpoint={"restoreTest": {"enabled": True, "image": "ghcr.io/example/tester:1"}})
    pod = by_name(result, "CronJob", "checkpoints-restore-test")["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert pod["containers"][0]["image"] == "ghcr.io/example/tester:1"


def test_a_restore_test_without_any_image_is_refused_naming_the_key():
    with pytest.raises(SettingsError) as err:
        load_team_settings({"checkpoint": {"restoreTest": {"enabled": True}}})
    assert "checkpoint.restoreTest.image: expected an image (or job.image) with restoreTest.enabled" in str(err.value)
    assert "Hint:" in str(err.value)


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
        ({"checkpoint": {"landing": {"size": "lots"}}}, "checkpoint.landing.size", "expected a Kubernetes quantity"),
        ({"checkpoint": {"landing": {"enabled": "on"}}}, "checkpoint.landing.enabled", "expected true or false"),
        ({"checkpoint": {"restoreTest": {"schedule": "daily"}}}, "checkpoint.restoreTest.schedule", "cron schedule"),
        (
            {"checkpoint": {"restoreTest": {"image": "tester"}}},
            "checkpoint.restoreTest.image",
            "expected an image pinned by a version tag or a digest",
        ),
    ],
)
def test_bad_values_name_the_key(config, key, expected):
    with pytest.raises(SettingsError) as err:
        load_team_settings(config)
    assert f"  - {key}: " in str(err.value) and expected in str(err.value)


def test_cli_renders_the_example_and_exits_2_on_a_bad_value(tmp_path, capsys, as_installed):
    example = ["--project-dir", str(TEAM_EXAMPLE)]
    assert main(["render", "--stack", "dev", *example, "--out", str(tmp_path / "ok")]) == 0
    assert (tmp_path / "ok" / "manifests" / "vision.yaml").is_file()
    bad = stack_file(tmp_path, "dev", {"job": {"name": "ResNet"}}, TEAM_EXAMPLE)
    args = ["render", "--stack", "dev", *example, "--config-file", str(bad)]
    assert main([*args, "--out", str(tmp_path / "bad")]) == 2
    assert "job.name: expected text matching" in capsys.readouterr().err


def test_example_imports_the_library_by_its_installed_name_only():
    source = (TEAM_EXAMPLE / "__main__.py").read_text()
    assert "from ai_storage_platform import" in source
    assert "import components" not in source and "from components" not in source
    assert (TEAM_EXAMPLE / "requirements.txt").read_text().splitlines()[-1] == "../.."


KIND_STACKS = {
    "dev": ("TrainJob", "resnet50"),
    "dev-pytorchjob": ("PyTorchJob", "resnet50-ddp"),
    "dev-tfjob": ("TFJob", "efficientnet"),
    "dev-volcano": ("Job", "conformer"),
    "dev-volcano-tasks": ("Job", "conformer-ps"),
}


def job_pods(job: dict) -> dict[str, dict]:
    """Each replica group's pod template of a rendered job, by group name."""
    spec = job["spec"]
    if job["kind"] == "TrainJob":
        return {"node": node_pod(job)}
    if job["kind"] == "Job":
        return {task["name"]: task["template"] for task in spec["tasks"]}
    replicas = spec.get("pytorchReplicaSpecs") or spec["tfReplicaSpecs"]
    return {name.lower(): r["template"] for name, r in replicas.items()}


@pytest.mark.parametrize("stack", sorted(KIND_STACKS))
def test_each_kind_of_the_example_runs_in_the_teams_queue_with_its_claims_as_the_team(render_team, stack):
    kind, name = KIND_STACKS[stack]
    result, _ = render_team(stack)
    job = by_name(result, kind, name)
    namespace = job["metadata"]["namespace"]
    for pod in job_pods(job).values():
        assert pod["metadata"]["annotations"] == {"scheduling.volcano.sh/queue-name": namespace}
        assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
        assert pod["spec"]["securityContext"]["fsGroupChangePolicy"] == "OnRootMismatch"
        claims = {
            v["persistentVolumeClaim"]["claimName"] for v in pod["spec"]["volumes"] if "persistentVolumeClaim" in v
        }
        shared = {"imagenet-mini", "librispeech", "space", "vision-eval"}  # vended by the platform
        assert claims and all(c in shared or c.startswith("checkpoints") for c in claims), claims
    for obj in [o for objs in result.manifests.values() for o in objs]:
        assert validate_object(obj, "1.33") == [], obj["kind"]


def test_the_design_master_alone_mounts_the_checkpoints_and_each_worker_reads_its_slice(render_team):
    result, _ = render_team("dev-volcano-tasks")
    pods = job_pods(by_name(result, "Job", "conformer-ps"))
    mounts = {
        name: {m["mountPath"]: m for m in pod["spec"]["containers"][0]["volumeMounts"]} for name, pod in pods.items()
    }
    assert "/checkpoints" in mounts["master"] and "/data" not in mounts["master"]
    assert "/checkpoints" not in mounts["worker"]
    assert mounts["worker"]["/data"]["subPathExpr"] == "slice-$(AI_STORAGE_DATA_SLICE)"
    assert pods["worker"]["spec"]["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    assert "tolerations" not in pods["master"]["spec"]  # no GPU: it stays off the GPU nodes


def test_the_v1_kinds_are_refused_on_a_platform_without_the_v1_operator(render_team):
    # The example imports the installed package (ai_storage_platform): its own SettingsError class.
    expected = r"job\.kind: expected one of trainjob, volcano \(workspace\.jobKinds, the platform's output jobKinds\)"
    with pytest.raises(Exception, match=expected) as refused:
        render_team("dev-pytorchjob", workspace={"jobKinds": ["trainjob", "volcano"]})
    assert type(refused.value).__name__ == "SettingsError"


@pytest.mark.parametrize(
    ("stack", "config", "tier"),
    [
        ("dev", {}, "cold"),
        ("dev", {"dataset": {"source": "claim", "tier": "warm"}}, "warm"),
        ("dev-volcano", {}, "hot"),
    ],
)
def test_the_pods_name_the_tier_they_read_for_the_read_alerts(render_team, stack, config, tier):
    result, _ = render_team(stack, **config)  # dev-volcano stages its dataset: its pods read the hot tier
    job = by_name(result, "Job", "conformer") if stack == "dev-volcano" else by_name(result, "TrainJob", "resnet50")
    for pod in job_pods(job).values():
        assert pod["metadata"]["labels"]["ai-storage-platform/data-tier"] == tier
    if tier == "warm":
        assert by_name(result, "PersistentVolumeClaim", "imagenet-mini")["spec"]["storageClassName"] == "warm"


@pytest.mark.parametrize(
    ("job", "key"),
    [
        (
            {"volumes": [{"name": "scratch", "mountPath": "/scratch", "hostPath": "/mnt/nvme0"}]},
            "job.volumes[0].hostPath",
        ),
        (
            {"volumes": [{"name": "w", "mountPath": "/w", "image": "ghcr.io/example/weights:latest"}]},
            "job.volumes[0].image",
        ),
        ({"kind": "volcano", "numNodes": 2, "dataSlices": 3}, "job.dataSlices"),
        ({"kind": "volcano", "numNodes": 2, "plugins": ["ssh"]}, "job.plugins"),
    ],
)
def test_the_cli_refuses_each_new_bad_job_value_in_one_line_with_exit_2(tmp_path, capsys, as_installed, job, key):
    bad = stack_file(tmp_path, "dev", {"job": job}, TEAM_EXAMPLE)
    args = ["render", "--stack", "dev", "--project-dir", str(TEAM_EXAMPLE), "--config-file", str(bad)]
    assert main([*args, "--out", str(tmp_path / "bad")]) == 2
    err = capsys.readouterr().err
    assert len([line for line in err.splitlines() if line.startswith(f"  - {key}:")]) == 1, err
    assert "Traceback" not in err and not (tmp_path / "bad").exists()


EXAMPLE_STACKS = sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in TEAM_EXAMPLE.glob("Pulumi.*.yaml"))


def test_every_stack_of_the_example_can_live_in_its_teams_namespace_beside_the_others(render_team, render_stack):
    """A team runs several stacks in one namespace: no object belongs to two of them (a second apply of another spec
    is refused; one object in two stacks goes when either stack is destroyed), and their claims together fit what
    the namespace's quota leaves (the platform's output teamQuotaLeft)."""
    owners: dict[tuple[str, str, str], list[str]] = {}
    requested: dict[tuple[str, str], list[int]] = {}
    for stack in EXAMPLE_STACKS:
        result, _ = render_team(stack)
        for obj in [o for objs in result.manifests.values() for o in objs]:
            meta = obj["metadata"]
            owners.setdefault((obj["kind"], meta.get("namespace", ""), meta["name"]), []).append(stack)
            if obj["kind"] == "PersistentVolumeClaim":
                tier = obj["spec"]["storageClassName"].removeprefix("ai-")
                size = kube.quantity_bytes(obj["spec"]["resources"]["requests"]["storage"])
                requested.setdefault((meta["namespace"], tier), []).append(size)
    assert {k: v for k, v in owners.items() if len(v) > 1} == {}
    platform, _ = render_stack("dev")
    left = platform.outputs["teamQuotaLeft"]
    assert requested
    for (team, tier), sizes in requested.items():
        quota = left[team][tier]
        assert sum(sizes) <= kube.quantity_bytes(quota["storage"]) and len(sizes) <= quota["claims"], (team, tier)
