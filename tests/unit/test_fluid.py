"""Fluid: the chart in its own namespace, datasets over JuiceFS or the bucket, pre-warm and data affinity."""

import json

import pytest
import yaml

from components.common import versions
from components.settings import SettingsError, load_settings
from components.tiers.juicefs import JuiceFSSource
from components.toolchain.cli import main
from components.training.fluid import Fluid, FluidArgs, FluidSettings, chart_values
from components.training.fluid_dataset import BucketSource
from tests.conftest import by_name, objects

VOLUME = JuiceFSSource("ai-datasets", "redis://meta", "minio", "http://minio:9000/ai-datasets-dev", "ak", "sk")
BUCKET = BucketSource("http://minio.object-store.svc.cluster.local:9000", "ai-datasets-dev", "ak", "sk")
IMAGENET = {
    "name": "imagenet-mini",
    "path": "/datasets/imagenet-mini",
    "cache": [{"medium": "MEM", "path": "/dev/shm", "quota": "2Gi"}],
    "prewarm": True,
}


def fluid(*datasets: dict[str, object]) -> Fluid:
    settings = FluidSettings.model_validate({"enabled": True, "datasets": list(datasets)})
    return Fluid("fluid", FluidArgs(settings, lambda d: BUCKET, VOLUME))


def test_chart_namespace_is_created_and_set_as_the_namespace_value(build):
    result, _ = build(fluid)
    (chart,) = result.charts
    assert (chart["chart"], chart["version"]) == (versions.FLUID.chart, versions.FLUID.version)
    assert chart["namespace"] == chart["values"]["namespace"] == "fluid-system"
    ns = by_name(result, "Namespace", "fluid-system")
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"


def test_juicefs_dataset_mounts_the_platform_volume_with_secret_credentials(build):
    result, _ = build(lambda: fluid(IMAGENET))
    ds = by_name(result, "Dataset", "imagenet-mini")
    mount = ds["spec"]["mounts"][0]
    assert mount["mountPoint"] == "juicefs:///datasets/imagenet-mini"
    assert mount["name"] == VOLUME.volume_name
    assert mount["options"]["storage"] == "minio"
    secret = by_name(result, "Secret", "fluid-dataset-credentials-juicefs")
    assert secret["metadata"]["namespace"] == ds["metadata"]["namespace"] == "training"
    assert set(secret["stringData"]) == {"metaurl", "access-key", "secret-key"}
    assert set(secret["stringData"].values()) == {"[secret]"}
    refs = {o["name"]: o["valueFrom"]["secretKeyRef"] for o in mount["encryptOptions"]}
    assert refs == {k: {"name": secret["metadata"]["name"], "key": k} for k in ("metaurl", "access-key", "secret-key")}


def test_runtime_has_replicas_and_tiered_cache_and_dataload_prewarms(build):
    result, _ = build(lambda: fluid(IMAGENET))
    runtime = by_name(result, "JuiceFSRuntime", "imagenet-mini")
    assert runtime["spec"]["replicas"] == 1
    assert runtime["spec"]["tieredstore"]["levels"] == [
        {"mediumtype": "MEM", "path": "/dev/shm", "quota": "2Gi", "high": "0.95", "low": "0.7"}
    ]
    load = by_name(result, "DataLoad", "imagenet-mini-prewarm")
    assert load["spec"]["dataset"] == {"name": "imagenet-mini", "namespace": "training"}
    assert load["spec"]["target"] == [{"path": "/"}]


def test_every_fluid_resource_waits_for_the_chart(build):
    result, _ = build(lambda: fluid(IMAGENET))
    ours = [r for r in result.plan["resources"] if r["type"].startswith("kubernetes:data.fluid.io/")]
    assert len(ours) == 3  # the Dataset, its runtime and its DataLoad
    for r in ours:
        assert "fluid-release" in r["dependsOn"], r["name"]


def test_alluxio_dataset_reads_the_bucket_over_s3(build):
    dataset = {
        "name": "coco",
        "runtime": "alluxio",
        "path": "/coco/",
        "replicas": 2,
        "cache": [{"medium": "SSD", "path": "/mnt/nvme/fluid", "quota": "100Gi", "high": 0.9, "low": 0.6}],
    }
    result, _ = build(lambda: fluid(dataset))
    mount = by_name(result, "Dataset", "coco")["spec"]["mounts"][0]
    assert mount["mountPoint"] == "s3://ai-datasets-dev/coco/"
    assert mount["options"]["alluxio.underfs.s3.endpoint"] == BUCKET.endpoint
    assert [o["name"] for o in mount["encryptOptions"]] == ["aws.accessKeyId", "aws.secretKey"]
    runtime = by_name(result, "AlluxioRuntime", "coco")
    assert runtime["spec"]["replicas"] == 2
    assert runtime["spec"]["tieredstore"]["levels"][0]["mediumtype"] == "SSD"
    assert not objects(result, "DataLoad")


def test_the_platform_backs_datasets_with_its_juicefs_volume_and_its_bucket(render_stack):
    # Stays on render_stack: it checks the Platform's wiring (the JuiceFS volume and the object store bucket it
    # hands Fluid), which only a whole stack has. The datasets are given here; the rest comes from the dev stack.
    coco = {"name": "coco", "runtime": "alluxio", "path": "/coco/"}
    result, _ = render_stack(
        "dev", juicefs={"volumeName": "shared"}, fluid={"datasets": [{"name": "imagenet-mini"}, coco]}
    )
    out = result.outputs
    volume = by_name(result, "Dataset", "imagenet-mini")["spec"]["mounts"][0]
    assert volume["name"] == "shared"
    assert volume["options"] == {"storage": out["objectStoreStorage"], "bucket": out["objectStoreBucketUrl"]}
    bucket = by_name(result, "Dataset", "coco")["spec"]["mounts"][0]
    assert bucket["mountPoint"] == f"s3://{out['objectStoreBucket']}/coco/"
    assert bucket["options"]["alluxio.underfs.s3.endpoint"] == out["objectStoreEndpoint"]
    # The Alluxio dataset's keys are a user of its own that reaches only coco/ (a MinIO scope on dev).
    secret = bucket["encryptOptions"][0]["valueFrom"]["secretKeyRef"]["name"]
    assert secret == "fluid-dataset-credentials-alluxio-coco"
    job = by_name(result, "Job", "minio-scope-fluid-training-coco")
    env = {e["name"]: e["value"] for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert json.loads(env["POLICY_DOCUMENT"])["Statement"][0]["Resource"].endswith("/coco/*")


def test_an_alluxio_dataset_of_the_whole_bucket_is_a_config_error():
    with pytest.raises(SettingsError) as err:
        load_settings("dev", {"fluid": {"datasets": [{"name": "all", "runtime": "alluxio", "path": "/"}]}})
    assert "fluid.datasets[0].path: expected a directory of the bucket" in str(err.value)


def test_data_affinity_sets_the_webhook_plugin_profile():
    def args(mode):
        config = chart_values(FluidSettings(data_affinity=mode))["webhook"]["pluginsProfile"]["pluginConfig"]
        (plugin,) = [p for p in config if p["name"] == "NodeAffinityWithCache"]
        return yaml.safe_load(plugin["args"])

    assert "required" not in args("preferred")
    assert args("preferred")["preferred"][0] == {"name": "fluid.io/node", "weight": 100}
    assert args("required")["required"] == ["fluid.io/node"]


def test_juicefs_dataset_without_juicefs_is_a_config_error_with_the_key():
    with pytest.raises(SettingsError) as err:
        load_settings(
            "dev",
            {
                "juicefs": {"enabled": False},
                "tiers": {"cold": "none", "checkpoint": "none"},
                "training": {"enabled": False},
                "teams": {"workspaces": []},  # their directories are on JuiceFS too (test_tenants)
            },
        )
    message = str(err.value)
    assert "fluid.datasets[0].runtime: expected a runtime with a backend" in message
    assert len(err.value.problems) == 1


def test_cache_low_watermark_must_be_below_high():
    bad = {"enabled": True, "datasets": [{"name": "x", "cache": [{"high": 0.5, "low": 0.6}]}]}
    with pytest.raises(SettingsError, match=r"fluid\.datasets\[0\]\.cache\[0\]\.low: expected a ratio below high"):
        load_settings("dev", {"fluid": bad})


def test_cli_rejects_a_bad_cache_medium_with_exit_2(tmp_path, capsys):
    bad = {"datasets": [{"name": "x", "cache": [{"medium": "NVME"}]}]}
    path = tmp_path / "Pulumi.dev.yaml"
    path.write_text(yaml.safe_dump({"config": {"ai-storage-platform:fluid": bad}}))
    assert main(["render", "--stack", "dev", "--config-file", str(path), "--out", str(tmp_path / "out")]) == 2
    expected = "fluid.datasets[0].cache[0].medium: expected one of 'MEM', 'SSD', 'HDD'; got 'NVME'"
    assert expected in capsys.readouterr().err


# The chart's condition for the misplaced annotation (fluid 1.0.8,
# templates/controller/<engine>runtime_controller.yaml): `if gt (.Values.runtime.<engine>.replicas | int) 1`.
def renders_an_invalid_runtime_deployment(values: dict) -> bool:
    return any(int(r.get("replicas", 1)) > 1 for r in values.get("runtime", {}).values() if isinstance(r, dict))


@pytest.mark.parametrize("stack", ["staging", "prod"])
def test_ha_stacks_replicate_the_controllers_fluid_scales_and_no_runtime_controller(render_stack, stack):
    result, _ = render_stack(stack)
    (chart,) = [c for c in result.charts if c["chart"] == "fluid"]
    values = chart["values"]
    assert not renders_an_invalid_runtime_deployment(values)
    assert values["runtime"]["juicefs"]["enabled"] is True  # its one replica runs from the start
    assert values["runtime"]["juicefs"]["resources"]["limits"]["memory"] == "2Gi"
    assert [values[k]["replicas"] for k in ("dataset", "webhook", "fluidapp")] == [2, 2, 2]
    assert values["webhook"]["forceReplacePluginsProfile"] is True  # the plugin profile is still there
    budgets = {
        o["metadata"]["name"]: o["spec"]["selector"]["matchLabels"] for o in objects(result, "PodDisruptionBudget")
    }
    fluid_budgets = {k: v for k, v in budgets.items() if v.get("control-plane")}
    assert fluid_budgets == {
        c: {"control-plane": c} for c in ("dataset-controller", "fluid-webhook", "fluidapp-controller")
    }


def test_the_invalid_deployment_check_sees_the_chart_condition():
    assert renders_an_invalid_runtime_deployment({"runtime": {"juicefs": {"enabled": True, "replicas": 2}}})
    assert not renders_an_invalid_runtime_deployment({"runtime": {"juicefs": {"enabled": True, "replicas": 1}}})


def test_dev_runs_single_controllers_without_budgets():
    values = chart_values(FluidSettings.model_validate({"enabled": True, "datasets": [{"name": "d"}]}))
    assert "dataset" not in values and "fluidapp" not in values
    assert "replicas" not in values["webhook"] and values["runtime"] == {"juicefs": values["runtime"]["juicefs"]}


def test_a_warmup_schedule_reloads_the_cache_on_a_cron_dataload_valid_against_fluids_crd(build):
    from tests.conformance.upstream import validate_custom_resource

    result, _ = build(lambda: fluid({**IMAGENET, "warmupSchedule": "0 1 * * *"}))
    first, again = (
        by_name(result, "DataLoad", "imagenet-mini-prewarm"),
        by_name(result, "DataLoad", "imagenet-mini-warmup"),
    )
    assert "policy" not in first["spec"]  # Fluid's default: Once, when the dataset is bound
    assert (again["spec"]["policy"], again["spec"]["schedule"]) == ("Cron", "0 1 * * *")
    assert again["spec"]["target"] == first["spec"]["target"] and again["spec"]["dataset"] == first["spec"]["dataset"]
    assert validate_custom_resource(first) == [] and validate_custom_resource(again) == []
    result, _ = build(lambda: fluid(IMAGENET))
    assert [o["metadata"]["name"] for o in objects(result, "DataLoad")] == ["imagenet-mini-prewarm"]


@pytest.mark.parametrize(
    ("dataset", "key", "expected"),
    [
        ({**IMAGENET, "warmupSchedule": "every night"}, "fluid.datasets[0].warmupSchedule", "expected a cron schedule"),
        ({**IMAGENET, "warmupSchedule": "0 25 * * *"}, "fluid.datasets[0].warmupSchedule", "expected a cron schedule"),
        (
            {**IMAGENET, "prewarm": False, "warmupSchedule": "0 1 * * *"},
            "fluid.datasets[0].prewarm",
            "true with warmupSchedule",
        ),
    ],
)
def test_a_bad_warmup_schedule_is_refused_in_one_line_naming_the_key(dataset, key, expected):
    with pytest.raises(SettingsError) as caught:
        load_settings("dev", {"fluid": {"datasets": [dataset]}})
    lines = [line for line in str(caught.value).splitlines() if line.startswith(f"  - {key}:")]
    assert len(lines) == 1 and expected in lines[0] and "Hint:" in lines[0]
