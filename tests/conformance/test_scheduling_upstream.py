"""Volcano, Trainer and Fluid as rendered in shapes beyond the dev stack, against the upstream references."""

import pytest

from components.common import versions
from tests.conformance.upstream import validate_custom_resource, validate_object, values_path_errors

GROUPS = ("scheduling.volcano.sh/", "trainer.kubeflow.org/", "data.fluid.io/")
CHART_DIRS = {p.chart: p.upstream_dir for p in (versions.VOLCANO, versions.KUBEFLOW_TRAINER, versions.FLUID)}

VARIANTS = {
    "dev": {},
    "queues-with-guarantee-and-deserved": {
        "volcano": {
            "queues": [
                {
                    "name": "team-a",
                    "weight": 4,
                    "capability": {"cpu": 64, "memory": "256Gi", "gpu": 8},
                    "guarantee": {"gpu": 2},
                    "deserved": {"cpu": "500m", "memory": "1Gi"},
                    "reclaimable": False,
                },
                {"name": "team-b"},
            ]
        }
    },
    "alluxio-and-required-affinity": {
        # The JuiceFS cache and dev's two teams' shares (16 GiB with 10 % free) and the SSD level (50 GiB).
        "localNvme": {"cacheVolume": {"sizeGib": 68}},
        "fluid": {
            "dataAffinity": "required",
            "datasets": [
                {
                    "name": "imagenet-mini",
                    "prewarm": True,
                    "prewarmPaths": ["/train", "/val"],
                    "cache": [
                        {"medium": "MEM", "quota": "1Gi"},
                        {"medium": "SSD", "path": "/var/lib/ai-storage-cache/fluid", "quota": "50Gi"},
                    ],
                },
                {
                    "name": "coco",
                    "namespace": "datasets",
                    "runtime": "alluxio",
                    "path": "/datasets/coco",
                    "replicas": 3,
                    "cache": [{"medium": "HDD", "path": "/mnt/hdd", "quota": "1Ti", "high": 0.8, "low": 0.5}],
                },
            ],
        },
    },
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_volcano_trainer_and_fluid_custom_resource_passes_its_crd(render_stack, variant):
    result, _ = render_stack("dev", **VARIANTS[variant])
    ours = [o for objs in result.manifests.values() for o in objs if o["apiVersion"].startswith(GROUPS)]
    kinds = {o["kind"] for o in ours}
    assert {"Queue", "ClusterTrainingRuntime", "Dataset", "JuiceFSRuntime"} <= kinds
    assert [e for o in ours for e in validate_custom_resource(o)] == []


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_built_in_object_of_these_components_passes_strict_schemas(render_stack, variant):
    result, _ = render_stack("dev", **VARIANTS[variant])
    objs = [o for c in ("volcano", "training", "fluid") for o in result.manifests.get(c, [])]
    assert [e for o in objs for e in validate_object(o, "1.33")] == []


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_chart_value_path_exists_upstream(render_stack, variant):
    result, _ = render_stack("dev", **VARIANTS[variant])
    charts = [c for c in result.charts if c["chart"] in CHART_DIRS]
    assert {c["chart"] for c in charts} == set(CHART_DIRS)
    assert [e for c in charts for e in values_path_errors(CHART_DIRS[c["chart"]], c["values"])] == []
