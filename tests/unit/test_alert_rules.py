"""Alert rules: the generated rule groups pass the real `promtool check rules`, and `promtool test rules` shows
each alert firing at its warning and critical levels on series that cross them, and not on series that do not."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.alert_rules import AlertThresholds, RuleSettings, Threshold, rule_groups
from components.section import SettingsError
from components.settings import load_settings

SETTINGS = RuleSettings()
GROUPS = rule_groups(SETTINGS, replicas=2, ceph=True, volcano=True)
ALERTS = {r["alert"] for g in GROUPS for r in g["rules"] if "alert" in r}
MINUTES = 40
"""Length of every series in the rule tests; alerts are checked at the end."""


@pytest.fixture(scope="module")
def promtool() -> str:
    found = shutil.which("promtool")
    if found:
        return found
    reason = "promtool missing (apt-get install prometheus)"
    if os.environ.get("AI_STORAGE_REQUIRE_DATAPATH") == "1":
        pytest.fail(reason)
    pytest.skip(reason)


def rule_file(tmp_path: Path, groups: list[dict[str, Any]] = GROUPS) -> Path:
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    return path


def test_promtool_accepts_the_generated_rules(promtool, tmp_path):
    run = subprocess.run([promtool, "check", "rules", str(rule_file(tmp_path))], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"SUCCESS: {sum(len(g['rules']) for g in GROUPS)} rules found" in run.stdout


def counter(per_minute: float) -> str:
    """Values of a counter that grows by ``per_minute`` each minute, for the whole test."""
    return f"0+{per_minute:g}x{MINUTES}"


def gauge(value: float) -> str:
    return f"{value:g}x{MINUTES}"


def reading(labels: str) -> dict[str, str]:
    """A mount reading 10 times per second (the data-path alerts watch only reading mounts)."""
    return {f'juicefs_fuse_ops_total{{method="read",{labels}}}': counter(600)}


def cases(t: AlertThresholds) -> dict[str, list[tuple[dict[str, str], dict[str, str], list[str]]]]:
    """Per alert: (input series, the firing alert's labels besides severity, the severities expected) for a case
    that does not cross, one that crosses the warning level only, and one that crosses both."""
    thr, lat, hit, ev, mem = (
        t.read_throughput_mb_s,
        t.read_latency_ms,
        t.cache_hit_ratio_percent,
        t.cache_evictions_per_second,
        t.metadata_memory_percent,
    )
    mount = 'mp="/{}",vol_name="v"'

    def between(a: float, b: float) -> float:
        return (a + b) / 2

    out: dict[str, list[tuple[dict[str, str], dict[str, str], list[str]]]] = {}
    levels = {"ok": [], "warn": ["warning"], "crit": ["warning", "critical"]}
    for case, severities in levels.items():
        m = mount.format(case)
        labels = {"mp": f"/{case}", "vol_name": "v"}
        mb_s = {"ok": thr.warning * 2, "warn": between(thr.warning, thr.critical), "crit": thr.critical / 2}[case]
        out.setdefault("JuiceFSReadThroughputLow", []).append(
            ({f"juicefs_fuse_read_size_bytes_sum{{{m}}}": counter(mb_s * 1e6 * 60), **reading(m)}, labels, severities)
        )
        ms = {"ok": lat.warning / 2, "warn": between(lat.warning, lat.critical), "crit": lat.critical * 2}[case]
        series = {f'juicefs_fuse_ops_durations_seconds{{method="read",{m}}}': counter(600 * ms / 1000), **reading(m)}
        out.setdefault("JuiceFSReadLatencyHigh", []).append((series, labels, severities))
        pct = {"ok": between(hit.warning, 100), "warn": between(hit.warning, hit.critical), "crit": hit.critical / 2}
        hit_bytes = pct[case] * 1e6
        series = {
            f"juicefs_blockcache_hit_bytes{{{m}}}": counter(hit_bytes),
            f"juicefs_blockcache_miss_bytes{{{m}}}": counter(100e6 - hit_bytes),
            **reading(m),
        }
        out.setdefault("JuiceFSCacheHitRatioLow", []).append((series, labels, severities))
        per_s = {"ok": ev.warning / 2, "warn": between(ev.warning, ev.critical), "crit": ev.critical * 2}[case]
        out.setdefault("JuiceFSCacheEvictionsHigh", []).append(
            ({f"juicefs_blockcache_evicts{{{m}}}": counter(per_s * 60)}, labels, severities)
        )
        used = {"ok": mem.warning / 2, "warn": between(mem.warning, mem.critical), "crit": between(mem.critical, 100)}
        series = {
            f'redis_memory_used_bytes{{pod="{case}"}}': gauge(used[case] * 1e6),
            f'redis_memory_max_bytes{{pod="{case}"}}': gauge(100e6),
        }
        out.setdefault("RedisMemoryNearLimit", []).append((series, {"pod": case}, severities))
    return out


def single(alert: str, firing: dict[str, str], quiet: dict[str, str], labels: dict[str, str], severity: str):
    """An alert with one level: a series that fires it and one that does not."""
    return alert, [(quiet, {}, []), (firing, labels, [severity])]


SINGLE = [
    single(
        "JuiceFSCacheDiskFull",
        {'juicefs_blockcache_drops{mp="/full"}': counter(5)},
        {'juicefs_blockcache_drops{mp="/fine"}': gauge(0)},
        {"mp": "/full"},
        "warning",
    ),
    single(
        "JuiceFSObjectStoreErrors",
        {'juicefs_object_request_errors{mp="/bad"}': counter(3)},
        {'juicefs_object_request_errors{mp="/good"}': gauge(0)},
        {"mp": "/bad"},
        "warning",
    ),
    single("RedisDown", {'redis_up{pod="a"}': gauge(0)}, {'redis_up{pod="b"}': gauge(1)}, {"pod": "a"}, "critical"),
    single(
        "RedisPersistenceFailing",
        {'redis_aof_last_write_status{pod="a"}': gauge(0)},
        {'redis_aof_last_write_status{pod="b"}': gauge(1)},
        {"pod": "a"},
        "critical",
    ),
    single(
        "RedisReplicaLinkDown",
        {'redis_master_link_up{pod="a"}': gauge(0)},
        {'redis_master_link_up{pod="b"}': gauge(1)},
        {"pod": "a"},
        "warning",
    ),
    single(
        "RedisReplicasMissing",
        {'redis_sentinel_master_ok_slaves{pod="a",master_name="juicefs"}': gauge(1)},
        {'redis_sentinel_master_ok_slaves{pod="b",master_name="juicefs"}': gauge(2)},
        {"pod": "a", "master_name": "juicefs"},
        "warning",
    ),
    single(
        "RedisSentinelFailover",
        {
            'redis_sentinel_master_status{instance="s1",master_name="juicefs",master_address="r0:6379"}': "1x30",
            'redis_sentinel_master_status{instance="s1",master_name="juicefs",master_address="r1:6379"}': ("_x30 1x10"),
        },
        {'redis_sentinel_master_status{instance="s2",master_name="juicefs",master_address="r0:6379"}': gauge(1)},
        {"instance": "s1", "master_name": "juicefs"},
        "warning",
    ),
    single(
        "RedisSentinelQuorumLost",
        {'redis_sentinel_master_ckquorum_status{pod="a"}': gauge(0)},
        {'redis_sentinel_master_ckquorum_status{pod="b"}': gauge(1)},
        {"pod": "a"},
        "critical",
    ),
    single(
        "CephHealthError",
        {'ceph_health_status{cluster="bad"}': gauge(2)},
        {'ceph_health_status{cluster="ok"}': gauge(0)},
        {"cluster": "bad"},
        "critical",
    ),
    single(
        "CephHealthWarning",
        {'ceph_health_status{cluster="warn"}': gauge(1)},
        {'ceph_health_status{cluster="ok"}': gauge(0)},
        {"cluster": "warn"},
        "warning",
    ),
    single(
        "VolcanoGangJobsPending",
        {'volcano_queue_pod_group_pending_count{queue_name="team-a"}': gauge(1)},
        {'volcano_queue_pod_group_pending_count{queue_name="team-b"}': gauge(0)},
        {"queue_name": "team-a"},
        "warning",
    ),
]


def expected_alerts(alert: str, labels: dict[str, str], severities: list[str]) -> list[dict[str, Any]]:
    rules = {(r["alert"], r["labels"]["severity"]): r for g in GROUPS for r in g["rules"] if "alert" in r}
    return [
        {"exp_labels": {**labels, "severity": s}, "exp_annotations": rules[(alert, s)]["annotations"]}
        for s in severities
    ]


def test_every_alert_is_tested():
    assert set(cases(SETTINGS.thresholds)) | {name for name, _ in SINGLE} == ALERTS


def test_promtool_sees_each_alert_cross_its_levels_and_not_fire_below_them(promtool, tmp_path):
    tests = []
    for alert, scenarios in [*cases(SETTINGS.thresholds).items(), *SINGLE]:
        series = [{"series": k, "values": v} for scenario, _, _ in scenarios for k, v in scenario.items()]
        exp = [e for _, labels, severities in scenarios for e in expected_alerts(alert, labels, severities)]
        tests.append(
            {
                "name": alert,
                "interval": "1m",
                "input_series": series,
                "alert_rule_test": [{"eval_time": f"{MINUTES}m", "alertname": alert, "exp_alerts": exp}],
            }
        )
    rules = rule_file(tmp_path)
    spec = tmp_path / "tests.yml"
    spec.write_text(yaml.safe_dump({"rule_files": [rules.name], "evaluation_interval": "1m", "tests": tests}))
    run = subprocess.run([promtool, "test", "rules", str(spec)], capture_output=True, text=True, cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "SUCCESS" in run.stdout


def test_thresholds_are_settings_and_a_critical_level_must_be_the_worse_one():
    settings = load_settings(
        "dev", {"monitoring": {"rules": {"thresholds": {"readLatencyMs": {"warning": 50, "critical": 200}}}}}
    )
    assert settings.monitoring.rules.thresholds.read_latency_ms == Threshold(warning=50, critical=200)
    with pytest.raises(SettingsError) as caught:
        load_settings(
            "dev", {"monitoring": {"rules": {"thresholds": {"cacheHitRatioPercent": {"warning": 70, "critical": 85}}}}}
        )
    message = str(caught.value)
    assert "monitoring.rules.thresholds.cacheHitRatioPercent.critical: expected critical below warning (70)" in message


@pytest.mark.parametrize(
    ("config", "key", "expected"),
    [
        ({"rules": {"window": "five minutes"}}, "monitoring.rules.window", "expected text matching"),
        ({"scrapeInterval": "30"}, "monitoring.scrapeInterval", "expected text matching"),
        ({"namespace": "Monitoring"}, "monitoring.namespace", "DNS label"),
        ({"selectorLabels": ["release"]}, "monitoring.selectorLabels", "mapping"),
        ({"rules": {"thresholds": {"readThroughputMbS": {"warning": "fast"}}}}, "warning", "number"),
    ],
)
def test_bad_monitoring_settings_are_rejected_with_key_and_hint(config, key, expected):
    with pytest.raises(SettingsError) as caught:
        load_settings("dev", {"monitoring": config})
    message = str(caught.value)
    assert key in message and expected in message and "Hint:" in message
