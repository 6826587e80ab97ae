"""Volcano: the chart as a release, team Queues after it, and the queue names Volcano owns refused."""

import pytest
import yaml

from components.common import versions
from components.settings import SettingsError, load_settings
from components.toolchain.cli import main
from components.training.volcano import QueueResources, QueueSettings, Volcano, VolcanoArgs, VolcanoSettings, queue_spec
from tests.conftest import by_name, objects

TEAM_A = {"name": "team-a", "weight": 2, "capability": {"cpu": "32", "memory": "128Gi", "gpu": 4}}


def volcano(**settings: object) -> Volcano:
    return Volcano("volcano", VolcanoArgs(VolcanoSettings.model_validate({"enabled": True, **settings})))


def test_chart_is_a_pinned_release_that_waits_for_readiness(build):
    result, _ = build(volcano)
    (chart,) = result.charts
    assert (chart["chart"], chart["version"], chart["repo"]) == (
        versions.VOLCANO.chart,
        versions.VOLCANO.version,
        versions.VOLCANO.repo,
    )
    assert chart["namespace"] == "volcano-system"
    assert chart["values"]["basic"]["image_tag_version"] == versions.VOLCANO_IMAGE_TAG
    release = next(r for r in result.plan["resources"] if r["name"] == "volcano-release")
    assert release["inputs"].get("skipAwait", False) is False


def test_queues_carry_weight_capability_and_wait_for_the_release(build):
    result, _ = build(lambda: volcano(queues=[TEAM_A, {"name": "team-b"}]))
    assert {q["metadata"]["name"] for q in objects(result, "Queue")} == {"team-a", "team-b"}
    team_a = by_name(result, "Queue", "team-a")
    assert team_a["apiVersion"] == "scheduling.volcano.sh/v1beta1"
    assert team_a["spec"]["weight"] == 2
    assert team_a["spec"]["capability"] == {"cpu": "32", "memory": "128Gi", "nvidia.com/gpu": 4}
    queues = [r for r in result.plan["resources"] if r["type"] == "kubernetes:scheduling.volcano.sh/v1beta1:Queue"]
    assert len(queues) == 2
    for r in queues:
        assert "volcano-release" in r["dependsOn"]


def test_guarantee_and_deserved_are_rendered_only_where_set():
    spec = queue_spec(
        QueueSettings(
            name="infer",
            guarantee=QueueResources(gpu=1),
            deserved=QueueResources(cpu="8", memory="32Gi"),
            reclaimable=False,
        )
    )
    assert spec == {
        "weight": 1,
        "reclaimable": False,
        "guarantee": {"resource": {"nvidia.com/gpu": 1}},
        "deserved": {"cpu": "8", "memory": "32Gi"},
    }


@pytest.mark.parametrize("reserved", ["default", "root"])
def test_queues_volcano_owns_are_refused_with_the_key(reserved):
    with pytest.raises(SettingsError) as err:
        load_settings("dev", {"volcano": {"queues": [{"name": "team-a"}, {"name": reserved}]}})
    message = str(err.value)
    assert "volcano.queues[1].name" in message and "owns those queues" in message


def test_duplicate_queue_names_are_refused_with_the_key():
    with pytest.raises(SettingsError) as err:
        load_settings("dev", {"volcano": {"queues": [{"name": "team-a"}, {"name": "team-a", "weight": 3}]}})
    assert "volcano.queues[1].name: expected a queue name not already used by volcano.queues[0]" in str(err.value)


def test_queue_names_are_dns_labels():
    with pytest.raises(SettingsError) as err:
        load_settings("dev", {"volcano": {"queues": [{"name": "Team_A"}]}})
    assert "volcano.queues[0].name: expected a DNS label" in str(err.value)


def test_cli_rejects_a_reserved_queue_with_exit_2(tmp_path, capsys):
    path = tmp_path / "Pulumi.dev.yaml"
    path.write_text(yaml.safe_dump({"config": {"ai-storage-platform:volcano": {"queues": [{"name": "default"}]}}}))
    assert main(["render", "--stack", "dev", "--config-file", str(path), "--out", str(tmp_path / "out")]) == 2
    assert "volcano.queues[0].name" in capsys.readouterr().err
