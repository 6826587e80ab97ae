"""Decision records: every tier StorageClass of every stack carries what its tier was sized for, as the stack's
settings say (a key a stack sets overrides that tier's default alone); bad values are refused naming the key;
docs/tiers.md is generated from the settings and the measured figures, and fails here when stale."""

from __future__ import annotations

import functools
import json
import re

import pytest

from components.decision_records import ANNOTATION_PREFIX, DEFAULTS, DecisionRecord, TierDecisions
from components.sections import SettingsError
from components.settings import load_settings
from components.storage_tiers import TIERS
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
    "device-write-mb-s",
    "device-read-mb-s",
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
    from components.alert_rules import rule_groups
    from components.alert_settings import RuleSettings

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
    from components.decision_records import DEFAULTS, checkpoint_sizing
    from components.sections import SettingsError
    from components.settings import load_settings

    save, restore = checkpoint_sizing(DEFAULTS["checkpoint"], 3)  # prod: 64 x 10 GiB, 3 copies, 6 NVMe OSDs
    assert round(save) == 172 and round(restore) == 38  # within 5 and 15 minutes
    hdd = {"devices": 12, "deviceWriteMbS": 150, "deviceReadMbS": 180}
    with pytest.raises(SettingsError) as caught:
        load_settings(
            "prod", {"rookCeph": {"checkpoint": {"deviceClass": "hdd"}}, "tiers": {"decisions": {"checkpoint": hdd}}}
        )
    message = str(caught.value)
    assert (
        "tiers.decisions.checkpoint.saveObjective: expected devices that meet it: 64 ranks x 10Gi x 3 copies over 12 "
        "devices at 150 MB/s takes 1,145 s; got '5m'"
    ) in message
    assert "restoreObjective" not in message  # 687 GB over 12 x 180 MB/s: 318 s, within 15 minutes
    # HDDs where a stack's own figures allow it: fewer ranks.
    small = load_settings("prod", {"tiers": {"decisions": {"checkpoint": {**hdd, "ranks": 16}}}})
    assert small.tiers.decisions.checkpoint.ranks == 16
    assert checkpoint_sizing(DEFAULTS["checkpoint"].model_copy(update={"devices": None}), 3) is None
