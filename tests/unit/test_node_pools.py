"""Node pools: the platform defines them once (labels, taints' tolerations) and exports them; a team job asks for one
by name and its pods land only on that pool's nodes (the scheduler's nodeSelector and taint filters); unknown
pools, empty labels and taints the storage node plugins do not tolerate are refused naming the key; so is a
TrainJob runtime the platform does not have (its output trainingRuntimes)."""

from __future__ import annotations

import pytest

from components.common.sections import SettingsError
from components.settings import load_settings
from components.teams.team import load_team_settings
from components.tiers.node_storage import Toleration
from components.training.node_pools import covers
from tests.conftest import by_name
from tests.unit.test_acceptance import landing
from tests.unit.test_job_volumes import _example_config
from tests.unit.test_jobs import pods

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
SPOT_TAINT = {"key": "example.com/spot", "value": "true", "effect": "NoSchedule"}
NODES = [
    {"name": "a100-1", "labels": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}, "taints": [GPU_TAINT]},
    {"name": "h100-1", "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}, "taints": [GPU_TAINT]},
    {
        "name": "h100-spot-1",
        "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "pool": "spot"},
        "taints": [GPU_TAINT, SPOT_TAINT],
    },
    {"name": "cpu-1", "labels": {}, "taints": []},
]
SPOT = {
    "labels": {"pool": "spot"},
    "tolerations": [{"key": "example.com/spot", "operator": "Equal", "value": "true", "effect": "NoSchedule"}],
}


def test_the_team_example_runs_on_the_pool_it_names_and_copies_the_platforms_pools(render_team):
    from components.toolchain import render

    platform = render.rendering("dev", render.run("dev")).outputs
    settings = load_team_settings(_example_config())
    assert platform["nodePools"] == {name: pool.spec() for name, pool in settings.workspace.node_pools.items()}
    result, _ = render_team()
    (pod,) = pods(by_name(result, "TrainJob", "resnet50")).values()
    assert landing(pod["spec"], NODES) == ["a100-1"]
    result, _ = render_team(job={"nodePool": "h100"})
    (pod,) = pods(by_name(result, "TrainJob", "resnet50")).values()
    assert landing(pod["spec"], NODES) == ["h100-1"]  # not the spot node: its taint is not tolerated
    assert pod["spec"]["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


def test_a_spot_pool_tolerates_its_taint_beside_the_gpu_one(render_team):
    workspace = {**_example_config()["workspace"], "nodePools": {"spot": SPOT}}
    result, _ = render_team("dev-volcano", workspace=workspace, job={"nodePool": "spot"})
    for pod in pods(by_name(result, "Job", "conformer")).values():
        assert landing(pod["spec"], NODES) == ["h100-spot-1"]
    result, _ = render_team("dev-volcano")
    for pod in pods(by_name(result, "Job", "conformer")).values():
        # No pool: any node without other taints (the resources filter, not modelled here, leaves out cpu-1, which
        # has no nvidia.com/gpu), never the spot node.
        assert landing(pod["spec"], NODES) == ["a100-1", "h100-1", "cpu-1"]


def test_an_unknown_pool_is_refused_naming_the_platforms():
    config = _example_config()
    with pytest.raises(SettingsError) as caught:
        load_team_settings({**config, "job": {**config["job"], "nodePool": "b200"}})
    assert "job.nodePool: expected one of the platform's pools (a100, h100); got 'b200'" in str(caught.value)
    with pytest.raises(SettingsError, match=r"job\.nodePool: expected one of the platform's pools \(none\)"):
        load_team_settings({"job": {"nodePool": "a100"}})


def test_a_pool_whose_taint_the_node_plugins_do_not_tolerate_is_refused():
    with pytest.raises(SettingsError) as caught:
        load_settings("dev", {"cluster": {"nodePools": {"spot": SPOT}}})
    assert "cluster.nodePools.spot.tolerations[0]: expected a taint nodeStorage.tolerations tolerates" in str(
        caught.value
    )
    both = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}, *SPOT["tolerations"]]
    s = load_settings("dev", {"cluster": {"nodePools": {"spot": SPOT}}, "nodeStorage": {"tolerations": both}})
    assert list(s.cluster.node_pools) == ["a100", "h100", "spot"]  # beside dev's own


@pytest.mark.parametrize(
    ("pool", "key"),
    [
        ({"labels": {}}, "cluster.nodePools.x.labels"),
        ({"labels": {"bad key!": "x"}}, "cluster.nodePools.x.labels"),
        ({"labels": {"pool": "not a value"}}, "cluster.nodePools.x.labels"),
        ({"labels": {"pool": "p"}, "tolerations": [{"operator": "Equal"}]}, "cluster.nodePools.x.tolerations[0].key"),
    ],
)
def test_a_bad_pool_is_refused_naming_the_key(pool, key):
    with pytest.raises(SettingsError, match=key.replace(".", r"\.").replace("[", r"\[")):
        load_settings("dev", {"cluster": {"nodePools": {"x": pool}}})


@pytest.mark.parametrize(
    ("given", "needed", "expected"),
    [
        ({"operator": "Exists"}, {"key": "a", "value": "b", "effect": "NoSchedule"}, True),
        ({"key": "a", "operator": "Exists"}, {"key": "a", "value": "b", "effect": "NoExecute"}, True),
        ({"key": "a", "operator": "Exists", "effect": "NoSchedule"}, {"key": "a", "effect": "NoExecute"}, False),
        ({"key": "a", "value": "b"}, {"key": "a", "value": "b", "effect": "NoSchedule"}, True),
        ({"key": "a", "value": "b"}, {"key": "a", "value": "c", "effect": "NoSchedule"}, False),
        ({"key": "a", "value": "b"}, {"key": "a", "operator": "Exists"}, False),
        ({"key": "b", "operator": "Exists"}, {"key": "a", "operator": "Exists"}, False),
    ],
)
def test_a_toleration_covers_another_as_the_scheduler_matches_taints(given, needed, expected):
    assert covers(Toleration(**given), Toleration(**needed)) is expected


def test_a_trainjob_names_a_runtime_the_platform_has():
    from components.toolchain import render

    platform = render.rendering("dev", render.run("dev")).outputs
    config = _example_config()
    assert platform["trainingRuntimes"] == load_team_settings(config).workspace.runtimes
    with pytest.raises(SettingsError) as caught:
        load_team_settings({**config, "job": {**config["job"], "runtime": "torch-distributed"}})
    assert (
        "job.runtime: expected one of the platform's runtimes (torch-distributed-team-a); got 'torch-distributed'"
    ) in str(caught.value)
    volcano = {**config["job"], "kind": "volcano", "runtime": "torch-distributed"}  # only a TrainJob has a runtime
    assert load_team_settings({**config, "job": volcano}).job.kind == "volcano"
    unchecked = {**config, "workspace": {k: v for k, v in config["workspace"].items() if k != "runtimes"}}
    assert load_team_settings({**unchecked, "job": {**config["job"], "runtime": "any"}})
