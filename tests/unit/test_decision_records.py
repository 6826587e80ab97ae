"""Decision records: every tier StorageClass of every stack carries what its tier was sized for, as the stack's
settings say (a key a stack sets overrides that tier's default alone); bad values are refused naming the key;
docs/tiers.md is generated from the settings and the measured figures, and fails here when stale."""

from __future__ import annotations

import functools
import json
import re

import pytest

from components.common.sections import SettingsError, merge
from components.settings import load_settings
from components.tiers.decision_records import (
    ANNOTATION_PREFIX,
    DEFAULTS,
    DecisionRecord,
    TierDecisions,
    checkpoint_sizing,
)
from components.tiers.storage_tiers import TIERS
from components.toolchain import render
from components.toolchain.render import ROOT
from components.toolchain.tiers_page import tiers_page
from tests.conftest import STACKS, objects
from tests.unit.test_storage_tiers import stack_settings

KEYS = {
    "dataset-size",
    "file-count",
    "file-shape",
    "expected-reuse-percent",
    "checkpoint-interval",
    "restore-objective",
    "acceptable-cold-start",
    "checkpoint-size-per-rank",
    "ranks",
    "save-objective",
    "devices",
    "device-class",
    "device-write-mb-s",
    "device-read-mb-s",
    "kept-checkpoints",
}
ANNOTATION_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
"""A Kubernetes annotation key: a DNS-subdomain prefix, '/', a name of at most 63 characters."""


@functools.cache
def tier_classes(stack: str) -> dict[str, dict]:
    result = render.rendering(stack, render.run(stack))
    return {sc["metadata"]["annotations"]["ai-storage-platform/tier"]: sc for sc in objects(result, "StorageClass")}


def decision(sc: dict) -> dict[str, str]:
    annotations = sc["metadata"]["annotations"]
    return {k.removeprefix(ANNOTATION_PREFIX): v for k, v in annotations.items() if k.startswith(ANNOTATION_PREFIX)}


@pytest.mark.parametrize("stack", STACKS)
def test_every_tier_class_of_every_stack_carries_its_decision_record(stack):
    classes = tier_classes(stack)
    tiers = stack_settings(stack).tiers
    assert set(classes) == {t for t in TIERS if getattr(tiers, t) != "none"}
    for tier, sc in classes.items():
        record = getattr(tiers.decisions, tier)
        found = decision(sc)
        assert set(found) == KEYS, tier
        assert found["dataset-size"] == record.dataset_size and found["file-shape"] == record.file_shape
        assert found["file-count"] == str(record.file_count)
        assert found["restore-objective"] == (record.restore_objective or "none")
        assert all(ANNOTATION_NAME.match(f"{ANNOTATION_PREFIX}{key}") for key in found)


def test_each_stack_says_what_its_tiers_were_sized_for():
    sizes = {stack: decision(tier_classes(stack)["hot"])["dataset-size"] for stack in ("dev", "staging", "prod")}
    assert sizes == {"dev": "50Gi", "staging": "500Gi", "prod": "2Ti"}
    checkpoint = decision(tier_classes("prod")["checkpoint"])
    assert (checkpoint["checkpoint-interval"], checkpoint["restore-objective"]) == ("30m", "15m")
    assert decision(tier_classes("prod")["warm"])["checkpoint-interval"] == "none"


def test_a_key_a_stack_sets_overrides_that_tier_default_alone():
    decisions = load_settings("prod", {"tiers": {"decisions": {"cold": {"datasetSize": "80Ti"}}}}).tiers.decisions
    assert decisions.cold == DEFAULTS["cold"].model_copy(update={"dataset_size": "80Ti"})
    assert decisions.hot == DEFAULTS["hot"] and decisions.checkpoint == DEFAULTS["checkpoint"]
    cleared = load_settings("prod", {"tiers": {"decisions": {"hot": {"checkpointInterval": None}}}})
    assert cleared.tiers.decisions.hot.checkpoint_interval is None


@pytest.mark.parametrize(
    ("record", "key", "expected"),
    [
        ({"datasetSize": "lots"}, "datasetSize", "expected a Kubernetes quantity"),
        ({"fileCount": 0}, "fileCount", "expected a number >= 1"),
        ({"fileShape": "tiny-files"}, "fileShape", "expected one of"),
        ({"expectedReusePercent": 101}, "expectedReusePercent", "expected a number <= 100"),
        ({"checkpointInterval": "30 minutes"}, "checkpointInterval", "expected text matching"),
        ({"restoreObjective": "1w"}, "restoreObjective", "expected text matching"),
        ({"acceptableColdStart": 600}, "acceptableColdStart", "expected a string"),
        ({"coldStart": "10m"}, "coldStart", "no such key"),
    ],
)
def test_a_bad_record_value_is_refused_naming_the_key(record, key, expected):
    with pytest.raises(SettingsError) as err:
        load_settings("dev", {"tiers": {"decisions": {"checkpoint": record}}})
    assert f"  - tiers.decisions.checkpoint.{key}: " in str(err.value) and expected in str(err.value)


def test_an_unknown_tier_is_refused_naming_it():
    with pytest.raises(SettingsError) as err:
        load_settings("dev", {"tiers": {"decisions": {"tape": {"datasetSize": "1Pi"}}}})
    assert "  - tiers.decisions.tape: no such key" in str(err.value)


def test_every_tier_has_defaults_of_its_own():
    assert set(DEFAULTS) == set(TIERS) == set(TierDecisions.model_fields)
    assert len({r.dataset_size for r in DEFAULTS.values()}) > 1 and DecisionRecord() not in DEFAULTS.values()


def test_docs_tiers_md_is_generated_from_the_settings():
    assert (ROOT / "docs" / "tiers.md").read_text() == tiers_page(), "run: python -m components docs"


def test_the_page_lists_every_stack_record_and_the_measured_figures(tmp_path):
    page = tiers_page(results=tmp_path)
    for stack in STACKS:
        assert f"### `{stack}`" in page
    assert "| hot | `hot` | topolvm | 50Gi | 500 | packed-shards | 95 | 15m | none | 10m |" in page  # dev
    assert page.count("Not measured yet") == 2  # neither results file in an empty folder
    (tmp_path / "datasets-cold-warm.json").write_text(json.dumps({"runs": {"shaped": {"packed_over_files": 6.2}}}))
    page = tiers_page(results=tmp_path)
    assert "[benchmarks/results/datasets-cold-warm.json]" in page
    assert "| `runs.shaped.packed_over_files` | 6.2 |" in page
    measured = tiers_page()  # the repository's results: the JuiceFS runs of the generated options
    assert "| generated:shaped | " in measured


def test_the_lag_alert_counts_in_the_checkpoint_tiers_own_interval_the_one_source(render_stack):
    from components.observability.alert_rules import rule_groups
    from components.observability.alert_settings import RuleSettings

    result, _ = render_stack("dev", tiers={"decisions": {"checkpoint": {"checkpointInterval": "20m"}}})
    (rule,) = [
        r
        for o in objects(result, "PrometheusRule")
        for g in o["spec"]["groups"]
        for r in g["rules"]
        if r.get("alert") == "CheckpointLagHigh" and r["labels"]["severity"] == "warning"
    ]
    assert (
        "ai_storage_checkpoint_lag_seconds / 1200 " in rule["expr"] and "(20m each)" in rule["annotations"]["summary"]
    )
    default = [r for g in rule_groups(RuleSettings(), None, False, False) for r in g["rules"]]
    assert any("/ 1800 " in r.get("expr", "") for r in default)  # the record's default, 30m: no second figure
    with pytest.raises(SettingsError, match=r"tiers\.decisions\.checkpoint\.checkpointInterval: expected a duration"):
        load_settings("dev", {"tiers": {"decisions": {"checkpoint": {"checkpointInterval": None}}}})


def test_the_checkpoint_tier_is_sized_by_arithmetic_and_refused_when_its_devices_cannot_meet_it():
    save, restore = checkpoint_sizing(DEFAULTS["checkpoint"], 3)  # prod: 64 x 10 GiB, 3 copies, 6 NVMe OSDs
    assert round(save) == 172 and round(restore) == 38  # within 5 and 15 minutes (nvme: 2000 and 3000 MB/s)
    hdd = {"rookCeph": {"checkpoint": {"deviceClass": "hdd"}}}
    record = {"devices": 12, "deviceClass": "hdd"}
    with pytest.raises(SettingsError) as caught:
        load_settings("prod", {**hdd, "tiers": {"decisions": {"checkpoint": record}}})
    message = str(caught.value)
    assert (  # the devices' speed is their class's (200 MB/s for hdd), not a figure typed beside it
        "tiers.decisions.checkpoint.saveObjective: expected devices that meet it: 64 ranks x 10Gi x 3 copies over 12 "
        "hdd devices at 200 MB/s takes 859 s; got '5m'"
    ) in message
    assert "restoreObjective" not in message  # 687 GB over 12 x 250 MB/s: 229 s, within 15 minutes
    # HDDs where a stack's own figures allow it: fewer ranks.
    small = load_settings("prod", {**hdd, "tiers": {"decisions": {"checkpoint": {**record, "ranks": 16}}}})
    assert small.tiers.decisions.checkpoint.ranks == 16
    assert checkpoint_sizing(DEFAULTS["checkpoint"].model_copy(update={"devices": None}), 3) is None


def test_a_record_of_another_device_class_than_the_checkpoint_pools_is_refused_naming_both():
    with pytest.raises(SettingsError) as caught:  # the pools move to hdd, the record keeps its NVMe figures
        load_settings("prod", {"rookCeph": {"checkpoint": {"deviceClass": "hdd"}}})
    assert (
        "tiers.decisions.checkpoint.deviceClass: expected the checkpoint pools' device class "
        "(rookCeph.checkpoint.deviceClass or rookCeph.deviceClass: hdd); got 'nvme'"
    ) in str(caught.value)
    with pytest.raises(SettingsError, match=r"deviceClass: expected the checkpoint pools' device class \(unset: every"):
        load_settings("dev", {"tiers": {"decisions": {"checkpoint": {"deviceClass": "ssd"}}}})


def test_a_device_class_of_unknown_speed_needs_its_figures():
    own = {
        "rookCeph": {"checkpoint": {"deviceClass": "optane"}},
        "tiers": {"decisions": {"checkpoint": {"deviceClass": "optane"}}},
    }
    with pytest.raises(SettingsError) as caught:
        load_settings("prod", own)
    assert (
        "tiers.decisions.checkpoint.deviceClass: expected a class of tiers.deviceSpeeds (hdd, nvme, ssd); got "
        "'optane'. Hint: add the class to tiers.deviceSpeeds"
    ) in str(caught.value)
    fast = {"optane": {"writeMbS": 4000, "readMbS": 6000}}
    s = load_settings("prod", merge(own, {"tiers": {"deviceSpeeds": fast}}))
    assert checkpoint_sizing(s.tiers.decisions.checkpoint, 3, {"optane": s.tiers.device_speeds["optane"]}) == (
        pytest.approx(687194767360 * 3 / (6 * 4000e6)),
        pytest.approx(687194767360 / (6 * 6000e6)),
    )
    with pytest.raises(SettingsError, match=r"tiers\.deviceSpeeds\.optane\.writeMbS: expected .*0"):
        load_settings("prod", merge(own, {"tiers": {"deviceSpeeds": {"optane": {"writeMbS": 0, "readMbS": 1}}}}))


def test_the_checkpoint_claim_holds_the_saves_its_record_keeps():
    with pytest.raises(SettingsError) as caught:  # prod's claim before: the first save filled it
        load_settings("prod", {"training": {"checkpointSize": "100Gi"}})
    assert (
        "training.checkpointSize: expected at least 64 ranks x 10Gi x 4 saves (keptCheckpoints 3 + the one landing) "
        "= 2,560Gi; got '100Gi'"
    ) in str(caught.value)
    assert load_settings("prod", {"training": {"checkpointSize": "2560Gi"}}).training.checkpoint_size == "2560Gi"
    two = {"tiers": {"decisions": {"checkpoint": {"keptCheckpoints": 2}}}}
    with pytest.raises(SettingsError, match=r"x 3 saves \(keptCheckpoints 2 \+ the one landing\) = 1,920Gi; got '1Ti'"):
        load_settings("prod", merge(two, {"training": {"checkpointSize": "1Ti"}}))
    assert load_settings("prod", merge(two, {"training": {"checkpointSize": "1920Gi"}}))
    with pytest.raises(SettingsError, match=r"keptCheckpoints: expected .*1"):
        load_settings("prod", {"tiers": {"decisions": {"checkpoint": {"keptCheckpoints": 0}}}})


def test_the_metadata_servers_cache_the_files_their_tiers_record_holds(render_stack):
    with pytest.raises(SettingsError) as caught:  # prod before: one server with 2 GiB of cache for 20 M files
        load_settings("prod", {"rookCeph": {"mds": {"activeCount": 1}, "resources": {"mds": {"memoryLimit": "4Gi"}}}})
    assert (
        "rookCeph.mds.activeCount: expected at least 20,000,000 files (tiers.decisions.warm.fileCount) x 2 KiB over "
        "2.0Gi of cache per server (half of rookCeph.resources.mds.memoryLimit 4Gi): 20; got 1"
    ) in str(caught.value)
    many = {"tiers": {"decisions": {"checkpoint": {"fileCount": 30_000_000}}}}
    with pytest.raises(
        SettingsError, match=r"rookCeph\.checkpoint\.mds\.activeCount: expected at least 30,000,000 .*: 5; got 1"
    ):
        load_settings("prod", many)  # 30 M x 2 KiB = 57 GiB over 12 GiB per server
    assert load_settings("prod", merge(many, {"rookCeph": {"checkpoint": {"mds": {"activeCount": 5}}}}))
    with pytest.raises(SettingsError, match=r"rookCeph\.mds\.activeCount: expected .*1"):
        load_settings("prod", {"rookCeph": {"mds": {"activeCount": 0}}})
    result, _ = render_stack("prod")
    servers = {fs["metadata"]["name"]: fs["spec"]["metadataServer"] for fs in objects(result, "CephFilesystem")}
    assert servers["ai-warm"]["activeCount"] == 4 and servers["ai-warm"]["activeStandby"] is True
    assert servers["ai-checkpoint"]["activeCount"] == 1
    assert servers["ai-warm"]["resources"]["limits"]["memory"] == "24Gi"
