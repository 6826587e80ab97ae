"""Training: Trainer v2 without its runtime installer hook, runtimes gang-scheduled by Volcano, the v1 operator beside
it."""

from pathlib import Path

import pytest
import yaml

from components.common import versions
from components.settings import SettingsError, load_settings
from components.training import trainer as training
from components.training.trainer import Training, TrainingArgs, TrainingSettings
from components.training.training_operator_v1 import (
    GANG_FLAG,
    V1_CONFIG,
    V1_CONFIG_DIR,
    V1_INIT_TEMPLATE,
    v1_init_container_template,
    v1_operator_transform,
)
from components.training.volcano import Volcano, VolcanoArgs, VolcanoSettings
from tests.conformance.upstream import UPSTREAM, validate_kubernetes_object
from tests.conftest import STACKS, by_name, objects, stack_settings

COLD = {training.DATA_TIER_LABEL: "cold"}
"""The data-tier label of a runtime whose dataset claim is a Fluid dataset's (the default)."""

V1_DEPLOYMENT = Path(UPSTREAM) / "kubeflow-training-operator-v1" / "base" / "deployment.yaml"


RUNTIME = {"name": "torch-distributed-team-a", "queue": "team-a", "numNodes": 2, "datasetClaim": "imagenet-mini"}


def training_on_volcano(required: tuple[str, ...] = (), **settings: object) -> Training:
    volcano = Volcano("volcano", VolcanoArgs(VolcanoSettings(enabled=True)))
    s = TrainingSettings.model_validate({"enabled": True, "runtimes": [RUNTIME], **settings})
    return Training("training", TrainingArgs(s, volcano.release, "ai-checkpoint", required_datasets=required))


def runtime_pod(result):
    spec = by_name(result, "ClusterTrainingRuntime", "torch-distributed-team-a")["spec"]
    return spec["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]


def test_trainer_chart_is_pinned_with_jobset_and_no_runtime_installer(build):
    result, _ = build(training_on_volcano)
    pin = versions.KUBEFLOW_TRAINER
    chart = next(c for c in result.charts if c["chart"] == pin.chart)
    assert (chart["repo"], chart["version"]) == (pin.repo, pin.version)
    values = chart["values"]
    assert values["jobset"]["install"] is True
    runtimes = values["runtimes"]
    # The installer Job exists while any built-in runtime is on: every one is off.
    assert runtimes["defaultEnabled"] is False
    assert all(runtimes[r]["enabled"] is False for r in training._BUILTIN_RUNTIMES)
    assert all(v["enabled"] is False for v in runtimes["torchtuneDistributed"].values())
    assert values["dataCache"]["runtimes"]["torchDistributedWithCache"]["enabled"] is False


def test_runtime_is_gang_scheduled_by_volcano_in_its_queue(build):
    result, _ = build(training_on_volcano)
    spec = by_name(result, "ClusterTrainingRuntime", "torch-distributed-team-a")["spec"]
    assert spec["podGroupPolicy"] == {"volcano": {}}
    assert spec["mlPolicy"]["numNodes"] == 2
    # The Trainer's Volcano plugin reads the queue from the JobSet template's annotations.
    assert spec["template"]["metadata"]["annotations"]["scheduling.volcano.sh/queue-name"] == "team-a"
    pod = runtime_pod(result)
    assert pod["metadata"]["annotations"]["scheduling.volcano.sh/queue-name"] == "team-a"
    assert pod["spec"]["schedulerName"] == "volcano"


def test_runtime_mounts_the_dataset_read_only_and_the_checkpoint_claim(build):
    result, _ = build(training_on_volcano)
    pod = runtime_pod(result)["spec"]
    mounts = {m["mountPath"]: m for m in pod["containers"][0]["volumeMounts"]}
    assert mounts["/data"]["readOnly"] is True and "readOnly" not in mounts["/checkpoints"]
    claims = {v["name"]: v["persistentVolumeClaim"] for v in pod["volumes"] if "persistentVolumeClaim" in v}
    assert claims["data"] == {"claimName": "imagenet-mini", "readOnly": True}
    assert claims["checkpoints"] == {"claimName": "checkpoints"}


def test_checkpoint_claim_is_rwx_on_the_checkpoint_class_it_is_given(build):
    result, _ = build(training_on_volcano)
    pvc = by_name(result, "PersistentVolumeClaim", "checkpoints")
    assert pvc["metadata"]["namespace"] == "training"
    assert pvc["spec"]["storageClassName"] == "ai-checkpoint"
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]


def test_runtime_and_operator_wait_for_their_charts(build):
    result, _ = build(training_on_volcano)
    deps = {r["name"]: r["dependsOn"] for r in result.plan["resources"]}
    assert "volcano-release" in deps["training-trainer"]
    runtime = deps["training-runtime-torch-distributed-team-a"]
    assert {"training-trainer", "volcano-release"} <= set(runtime)


def test_runtime_pods_carry_the_dataset_affinity_label_only_for_datasets_with_required_affinity(build):
    result, _ = build(lambda: training_on_volcano(required=("imagenet-mini",)))
    affinity = {"fluid.io/dataset.imagenet-mini.sched": "required"}
    assert runtime_pod(result)["metadata"]["labels"] == {**training.METRICS_LABELS, **COLD, **affinity}
    result, _ = build(lambda: training_on_volcano(required=("coco",)))
    assert runtime_pod(result)["metadata"]["labels"] == {**training.METRICS_LABELS, **COLD}


def test_runtime_pods_are_labelled_and_declare_the_port_the_training_metrics_podmonitor_scrapes(build):
    result, _ = build(training_on_volcano)
    pod = runtime_pod(result)
    assert pod["metadata"]["labels"]["ai-storage-platform/metrics"] == "training"
    (node,) = pod["spec"]["containers"]
    assert node["ports"] == [{"name": "train-metrics", "containerPort": 9095, "protocol": "TCP"}]
    assert {"name": "AI_STORAGE_METRICS_PORT", "value": "9095"} in node["env"]
    assert {"name": "TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "value": "1"} in node["env"]  # torchrun restarts reconnect


def multiproc_dir(pod_spec: dict, container: dict) -> dict:
    """The emptyDir the container's ``PROMETHEUS_MULTIPROC_DIR`` points at, mounted writable in it."""
    (path,) = [e["value"] for e in container.get("env", []) if e["name"] == "PROMETHEUS_MULTIPROC_DIR"]
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == path]
    assert not mount.get("readOnly") and "subPath" not in mount
    (volume,) = [v for v in pod_spec["volumes"] if v["name"] == mount["name"]]
    return volume["emptyDir"]


@pytest.mark.parametrize("stack", STACKS)
def test_every_runtime_container_of_every_stack_gets_a_writable_multiprocess_metrics_dir(render_stack, stack):
    result, _ = render_stack(stack)
    runtimes = objects(result, "ClusterTrainingRuntime")
    for runtime in runtimes:
        for job in runtime["spec"]["template"]["spec"]["replicatedJobs"]:
            pod = job["template"]["spec"]["template"]["spec"]
            for container in pod["containers"]:
                # Small and on the node's disk: prometheus_client writes about 16 KiB per process into it.
                assert multiproc_dir(pod, container) == {"sizeLimit": "64Mi"}, (stack, runtime["metadata"]["name"])
    assert runtimes  # every stack in the repo runs training runtimes


def test_a_runtime_that_stages_and_lands_checkpoints_keeps_the_metrics_dir(build):
    staging = {"enabled": True, "source": "imagenet", "version": "v1"}
    runtime = {**RUNTIME, "image": "ghcr.io/example/trainer:1.0.0", "staging": staging}
    result, _ = build(lambda: training_on_volcano(runtimes=[{**runtime, "checkpointLanding": {"enabled": True}}]))
    pod = runtime_pod(result)["spec"]
    (node,) = pod["containers"]
    assert multiproc_dir(pod, node) == {"sizeLimit": "64Mi"}
    assert len({v["name"] for v in pod["volumes"]}) == len(pod["volumes"])


def test_v1_operator_is_the_pinned_overlay_after_volcano(build):
    result, _ = build(lambda: training_on_volcano(operators=["training-operator-v1"], runtimes=[]))
    assert not objects(result, "ClusterTrainingRuntime")
    assert [c["chart"] for c in result.charts] == [versions.VOLCANO.chart]  # no kubeflow-trainer release
    directory = next(r for r in result.plan["resources"] if r["name"] == "training-training-operator-v1")
    assert directory["inputs"]["directory"] == versions.TRAINING_OPERATOR_V1_KUSTOMIZE
    assert "volcano-release" in directory["dependsOn"]
    config = by_name(result, "ConfigMap", V1_CONFIG)
    assert config["metadata"]["namespace"] == "kubeflow" and V1_INIT_TEMPLATE in config["data"]
    assert "training-training-operator-v1" in next(
        r["dependsOn"] for r in result.plan["resources"] if r["name"] == "training-training-operator-v1-config"
    )


def test_both_operators_install_side_by_side(build):
    result, _ = build(lambda: training_on_volcano(operators=["trainer-v2", "training-operator-v1"]))
    assert objects(result, "ClusterTrainingRuntime")
    assert versions.KUBEFLOW_TRAINER.chart in [c["chart"] for c in result.charts]
    assert any(r["name"] == "training-training-operator-v1" for r in result.plan["resources"])
    trainer_ns = {c["namespace"] for c in result.charts if c["chart"] == versions.KUBEFLOW_TRAINER.chart}
    assert trainer_ns == {"kubeflow-system"} and by_name(result, "ConfigMap", V1_CONFIG)["metadata"]["namespace"] == (
        "kubeflow"
    )


@pytest.mark.parametrize("operators", [[], ["trainer-v2", "trainer-v2"]])
def test_operators_must_be_one_or_two_distinct(operators):
    with pytest.raises(SettingsError) as err:
        load_settings("dev", {"training": {"operators": operators}})
    assert "training.operators: expected one or two distinct operators" in str(err.value)


def test_every_shipped_profile_runs_both_operators():
    for stack in ("dev", "staging", "prod"):
        assert stack_settings(stack).training.operators == ["trainer-v2", "training-operator-v1"], stack


def test_the_platform_wires_volcano_fluid_affinity_and_the_checkpoint_tier_into_training(render_stack):
    # Stays on render_stack: what it checks is the Platform's wiring between components (the Volcano release,
    # Fluid's required affinity for datasets in the workload namespace, the checkpoint tier's class), which only
    # a whole stack has. The scheduling sections are given here, so only the rest comes from the dev stack.
    result, _ = render_stack(
        "dev",
        volcano={"queues": [{"name": "team-a"}]},
        training={"runtimes": [RUNTIME]},
        fluid={"dataAffinity": "required", "datasets": [{"name": "imagenet-mini"}]},
        tiers={"namePrefix": "ai-"},
    )
    affinity = {"fluid.io/dataset.imagenet-mini.sched": "required"}
    assert runtime_pod(result)["metadata"]["labels"] == {**training.METRICS_LABELS, **COLD, **affinity}
    assert by_name(result, "PersistentVolumeClaim", "checkpoints")["spec"]["storageClassName"] == "ai-checkpoint"
    deps = {r["name"]: r["dependsOn"] for r in result.plan["resources"]}
    assert "ai-storage-volcano-release" in deps["ai-storage-training-runtime-torch-distributed-team-a"]


def test_v1_transform_pins_the_image_and_adds_gang_scheduling_to_the_upstream_deployment():
    upstream = yaml.safe_load(V1_DEPLOYMENT.read_text())
    out = v1_operator_transform(upstream)
    container = out["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == versions.TRAINING_OPERATOR_V1_IMAGE
    flags = [
        GANG_FLAG,
        f"--pytorch-init-container-image={versions.TRAINING_OPERATOR_V1_INIT_IMAGE}",
        f"--pytorch-init-container-template-file={V1_CONFIG_DIR}/{V1_INIT_TEMPLATE}",
    ]
    assert container["command"] == ["/manager"] and container["args"] == flags
    assert v1_operator_transform(out)["spec"]["template"]["spec"]["containers"][0]["args"] == flags
    assert {"name": V1_CONFIG, "mountPath": V1_CONFIG_DIR, "readOnly": True} in container["volumeMounts"]
    assert {"name": V1_CONFIG, "configMap": {"name": V1_CONFIG}} in out["spec"]["template"]["spec"]["volumes"]
    assert validate_kubernetes_object(out, "1.33") == []
    assert v1_operator_transform({"kind": "Service", "metadata": {"name": "training-operator"}}) is None


def test_the_v1_init_container_template_is_upstreams_with_a_restricted_security_context():
    (container,) = yaml.safe_load(v1_init_container_template())
    assert container["name"] == "init-pytorch" and container["image"] == "{{.InitContainerImage}}"
    assert "nslookup {{.MasterAddr}}" in container["command"][2] and "seq {{.MaxTries}}" in container["command"][2]
    security = container["securityContext"]
    assert security["runAsNonRoot"] and security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]} and security["seccompProfile"] == {"type": "RuntimeDefault"}


def test_v1_transform_labels_the_overlay_namespace_for_pod_security():
    out = v1_operator_transform({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kubeflow"}})
    assert out["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "baseline"


def test_training_without_volcano_is_a_config_error():
    with pytest.raises(SettingsError) as err:
        load_settings("dev", {"volcano": {"enabled": False}})
    assert "training.enabled: expected volcano.enabled: true" in str(err.value)


def test_runtime_queue_must_be_a_volcano_queue():
    runtime = {"name": "rt", "queue": "team-z", "datasetClaim": "imagenet-mini"}
    with pytest.raises(SettingsError) as err:
        load_settings("dev", {"training": {"runtimes": [runtime]}})
    assert "training.runtimes[0].queue: expected one of volcano.queues (team-a, team-b)" in str(err.value)


def test_training_needs_a_checkpoint_tier():
    with pytest.raises(SettingsError) as err:
        load_settings("dev", {"tiers": {"checkpoint": "none"}})
    assert "tiers.checkpoint: expected a backend" in str(err.value)


def test_a_runtimes_pods_tolerate_the_gpu_nodes_taint_unless_told_not_to(build):
    from tests.kube_semantics import tolerates

    taint = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    result, _ = build(lambda: training_on_volcano())
    assert tolerates(runtime_pod(result)["spec"].get("tolerations"), taint)  # a TrainJob's GPUs: resourcesPerNode
    result, _ = build(lambda: training_on_volcano(runtimes=[{**RUNTIME, "gpuTolerations": []}]))
    assert not tolerates(runtime_pod(result)["spec"].get("tolerations"), taint)


def test_a_runtime_whose_dataset_claim_nothing_creates_is_refused():
    from components.common.sections import SettingsError
    from components.settings import load_settings

    with pytest.raises(SettingsError) as caught:
        load_settings("prod", {"fluid": {"enabled": False}})
    message = str(caught.value)
    assert "training.runtimes[0].datasetClaim: expected a Fluid dataset of training (none); got 'datasets'" in message
    assert "externalClaim: true" in message
    runtime = {"name": "torch-distributed", "queue": "platform", "datasetClaim": "datasets", "externalClaim": True}
    settings = load_settings("prod", {"fluid": {"enabled": False}, "training": {"runtimes": [runtime]}})
    assert settings.training.runtimes[0].external_claim
