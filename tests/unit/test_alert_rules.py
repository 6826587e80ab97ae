"""Alert rules: the generated rule groups pass the real `promtool check rules`, and `promtool test rules` shows
each alert firing at its warning and critical levels on series that cross them, and not on series that do not."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.common.sections import SettingsError
from components.observability.alert_rules import PROTECTION, AlertThresholds, RuleSettings, Threshold, rule_groups
from components.observability.alert_settings import seconds as duration_seconds
from components.observability.dashboards import dashboards
from components.observability.protection_alerts import RESTORE_TEST
from components.settings import load_settings
from components.tiers.decision_records import DEFAULTS
from components.toolchain import render
from components.toolchain.render import ROOT
from tests.conftest import STACKS, objects, stack_file

SETTINGS = RuleSettings()
GROUPS = rule_groups(SETTINGS, replicas=2, ceph=True, volcano=True, acceptance="storage-acceptance")
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
    prefetch, save, restore, failed, lag = (
        t.prefetch_hit_ratio_percent,
        t.checkpoint_save_seconds,
        t.checkpoint_restore_seconds,
        t.checkpoint_save_failure_percent,
        t.checkpoint_lag_intervals,
    )
    interval = DEFAULTS["checkpoint"].checkpoint_interval  # the checkpoint tier's record: the lag alert's unit
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
        # A training pod (the training library's metrics, as Prometheus labels them).
        p, pod = f'namespace="team",pod="{case}"', {"namespace": "team", "pod": case}
        pct = {"ok": between(prefetch.warning, 100), "warn": between(prefetch.warning, prefetch.critical)}
        ready = {**pct, "crit": prefetch.critical / 2}[case]
        series = {
            f"ai_storage_prefetch_hits_total{{{p}}}": counter(ready * 10),
            f"ai_storage_prefetch_misses_total{{{p}}}": counter((100 - ready) * 10),
        }
        out.setdefault("TrainingPrefetchHitRatioLow", []).append((series, pod, severities))
        # Reads of a hot-tier pod and a warm-tier pod (every tier's alert is one rule, labelled by the tier),
        # 5 files a second; a pod that reads nothing (its rates zero) never fires.
        mb_s = {"ok": thr.warning * 2, "warn": between(thr.warning, thr.critical), "crit": thr.critical / 2}[case]
        ms = {"ok": lat.warning / 2, "warn": between(lat.warning, lat.critical), "crit": lat.critical * 2}[case]
        for tier in ("hot", "warm"):
            t_labels = {**pod, "pod": f"{case}-{tier}", "ai_storage_platform_data_tier": tier}
            q = ",".join(f'{k}="{v}"' for k, v in t_labels.items())
            reads = {f"ai_storage_read_seconds_count{{{q}}}": counter(300)}
            series = {f"ai_storage_read_bytes_total{{{q}}}": counter(mb_s * 1e6 * 60), **reads}
            out.setdefault("TierReadThroughputLow", []).append((series, t_labels, severities))
            series = {f"ai_storage_read_seconds_sum{{{q}}}": counter(300 * ms / 1000), **reads}
            out.setdefault("TierReadLatencyHigh", []).append((series, t_labels, severities))
        idle = f'namespace="team",pod="{case}-idle",ai_storage_platform_data_tier="warm"'
        series = {
            f"ai_storage_read_bytes_total{{{idle}}}": counter(0),
            f"ai_storage_read_seconds_count{{{idle}}}": counter(0),
        }
        out["TierReadThroughputLow"].append((series, {}, []))  # 0 MB/s, but reading nothing: silent
        for alert, what, level in (("CheckpointSaveSlow", "save", save), ("CheckpointRestoreSlow", "restore", restore)):
            seconds = {
                "ok": level.warning / 2,
                "warn": between(level.warning, level.critical),
                "crit": level.critical * 2,
            }
            series = {
                f"ai_storage_checkpoint_{what}_seconds_sum{{{p}}}": counter(seconds[case] * 2),
                f"ai_storage_checkpoint_{what}_seconds_count{{{p}}}": counter(2),
            }
            out.setdefault(alert, []).append((series, pod, severities))
        # Just below the warning level: a ratio of failures to successful saves only (not to all) would cross it.
        share = {
            "ok": failed.warning * 0.96,
            "warn": between(failed.warning, failed.critical),
            "crit": failed.critical * 2,
        }
        series = {
            f"ai_storage_checkpoint_save_failures_total{{{p}}}": counter(share[case]),
            f"ai_storage_checkpoint_save_seconds_count{{{p}}}": counter(100 - share[case]),
        }
        out.setdefault("CheckpointSaveFailures", []).append((series, pod, severities))
        # Lag in checkpoint intervals: the "ok" lag is above the level in seconds, so ignoring the interval fires.
        intervals = {"ok": lag.warning / 2, "warn": between(lag.warning, lag.critical), "crit": lag.critical * 2}
        series = {f"ai_storage_checkpoint_lag_seconds{{{p}}}": gauge(intervals[case] * duration_seconds(interval))}
        out.setdefault("CheckpointLagHigh", []).append((series, pod, severities))
    out["CheckpointRestoreTestOverdue"] = restore_test_cases(t.restore_test_age_hours)
    return out


RESTORE_TEST_CRONJOB = "checkpoints-restore-test"


def restore_test_cases(age: Threshold) -> list[tuple[dict[str, str], dict[str, str], list[str]]]:
    """Restore tests whose last success (a team's CronJob, or a training job's report) is recent, between the
    levels, or older than critical; a job that never reported one (0) and another CronJob stay silent."""
    now, hour = MINUTES * 60, 3600

    def succeeded(namespace: str, hours_ago: float | None, created_hours_ago: float = 0) -> dict[str, str]:
        labels = f'namespace="{namespace}",cronjob="{RESTORE_TEST_CRONJOB}"'
        series = {f"kube_cronjob_created{{{labels}}}": gauge(now - created_hours_ago * hour)}
        if hours_ago is not None:
            series[f"kube_cronjob_status_last_successful_time{{{labels}}}"] = gauge(now - hours_ago * hour)
        return series

    reported = "ai_storage_checkpoint_restore_test_timestamp_seconds"
    quiet = {
        **succeeded("fresh", age.warning / 2, age.critical * 2),
        **cronjob(OTHER_CRONJOB, "other", now - age.critical * 2 * hour, now - INTERVAL),
        f'{reported}{{namespace="team",pod="recent"}}': gauge(now - age.warning / 2 * hour),
        f'{reported}{{namespace="team",pod="never"}}': gauge(0),
    }
    warn = succeeded("warn", (age.warning + age.critical) / 2, age.critical * 2)
    never = succeeded("never", None, age.critical * 2)
    crit = {f'{reported}{{namespace="team",pod="old"}}': gauge(now - age.critical * 2 * hour)}
    return [
        (quiet, {}, []),
        (warn, {"namespace": "warn", "cronjob": RESTORE_TEST_CRONJOB}, ["warning"]),
        (never, {"namespace": "never", "cronjob": RESTORE_TEST_CRONJOB}, ["warning", "critical"]),
        (crit, {"namespace": "team", "pod": "old"}, ["warning", "critical"]),
    ]


def single(alert: str, firing: dict[str, str], quiet: dict[str, str], labels: dict[str, str], severity: str):
    """An alert with one level: a series that fires it and one that does not."""
    return alert, [(quiet, {}, []), (firing, labels, [severity])]


SINGLE = [
    # A tier's acceptance Job failed (kube-state-metrics): its script exits 1 when a figure misses its threshold.
    single(
        "StorageAcceptanceFailed",
        {'kube_job_status_failed{namespace="storage-acceptance",job_name="acceptance-warm"}': gauge(1)},
        {
            'kube_job_status_failed{namespace="storage-acceptance",job_name="acceptance-cold"}': gauge(0),
            'kube_job_status_failed{namespace="team",job_name="acceptance-of-my-model"}': gauge(1),
        },
        {"namespace": "storage-acceptance", "job_name": "acceptance-warm"},
        "warning",
    ),
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


PROTECTION_CRONJOBS = {
    "MetadataBackup": "juicefs-metadata-backup",
    "CheckpointSnapshots": "checkpoints-snapshots",
    "CheckpointOffsite": "checkpoints-offsite",
}
"""A CronJob of each protection kind, named as the prod stack names them (see the render test below)."""
OTHER_CRONJOB = "nightly-report"
INTERVAL = 600
"""Seconds between two scheduled runs of the CronJobs in the protection tests."""
STALE_AFTER = 2 * INTERVAL + 300
"""When a protection CronJob's Stale alert fires, pinned on its own (not read back from the rules): its last success
is older than two intervals of its schedule (docs/alerts.md), for 5 minutes. The tests put a success a minute
either side of it, so a rule with another factor (1.5, 2.5 intervals) or another wait fails them."""


def cronjob(name: str, namespace: str, success: float | None, last_schedule: float | None) -> dict[str, str]:
    """kube-state-metrics' series of a CronJob created at 0 that last succeeded at ``success`` and was last
    scheduled at ``last_schedule`` (None: never), every ``INTERVAL`` seconds."""
    labels = f'namespace="{namespace}",cronjob="{name}"'
    series = {
        f"kube_cronjob_created{{{labels}}}": gauge(0),
        f"kube_cronjob_next_schedule_time{{{labels}}}": gauge((last_schedule or 0) + INTERVAL),
    }
    if success is not None:
        series[f"kube_cronjob_status_last_successful_time{{{labels}}}"] = gauge(success)
    if last_schedule is not None:
        series[f"kube_cronjob_status_last_schedule_time{{{labels}}}"] = gauge(last_schedule)
    return series


def failed_run(cronjob_name: str, namespace: str, started: float) -> dict[str, str]:
    """kube-state-metrics' series of a Job of ``cronjob_name`` that started at ``started`` and failed."""
    job = f'namespace="{namespace}",job_name="{cronjob_name}-29000000"'
    return {
        f"kube_job_status_start_time{{{job}}}": gauge(started),
        f'kube_job_failed{{{job},condition="true"}}': gauge(1),
        f'kube_job_failed{{{job},condition="false"}}': gauge(0),
        f'kube_job_owner{{{job},owner_kind="CronJob",owner_name="{cronjob_name}",owner_is_controller="true"}}': gauge(
            1
        ),
    }


def protection_cases() -> list[tuple[str, list[tuple[dict[str, str], dict[str, str], list[str]]]]]:
    """Per protection alert: scenarios that fire (a last success older than two intervals, or none since the
    CronJob was created; a failed run after the last success) and scenarios that do not (a recent success, a
    failed run followed by a success, another CronJob)."""
    now = MINUTES * 60
    old, recent = now - STALE_AFTER - 60, now - INTERVAL
    out = []
    for prefix, name in PROTECTION_CRONJOBS.items():
        stale_labels, failed_labels = ({"namespace": ns, "cronjob": name} for ns in ("stale", "failing"))
        quiet = {
            **cronjob(name, "fresh", recent, recent),
            **cronjob(name, "almost-stale", now - STALE_AFTER + 60, now - INTERVAL),
            **cronjob(OTHER_CRONJOB, "other", old, now - INTERVAL),
        }
        out.append(
            (
                f"{prefix}Stale",
                [
                    (quiet, {}, []),
                    (cronjob(name, "stale", old, now - INTERVAL), stale_labels, ["critical"]),
                    (cronjob(name, "never", None, None), {**stale_labels, "namespace": "never"}, ["critical"]),
                ],
            )
        )
        out.append((f"{prefix}Failed", failed_cases(name, failed_labels)))
    out.append(("CheckpointRestoreTestFailed", failed_cases(RESTORE_TEST_CRONJOB, failed_labels)))
    return out


def failed_cases(name: str, labels: dict[str, str]) -> list[tuple[dict[str, str], dict[str, str], list[str]]]:
    """A CronJob ``name`` that failed after its last success (fires), one that succeeded after its failure and
    another CronJob that failed (silent)."""
    quiet = {
        **cronjob(name, "recovered", 1800, 1800),
        **failed_run(name, "recovered", 1200),
        **cronjob(OTHER_CRONJOB, "other", 600, 1200),
        **failed_run(OTHER_CRONJOB, "other", 1200),
    }
    failing = {**cronjob(name, "failing", 600, 1200), **failed_run(name, "failing", 1200)}
    return [(quiet, {}, []), (failing, {**labels, "namespace": "failing", "cronjob": name}, ["warning"])]


PAGED_AS: dict[tuple[str, str], str] = {
    ("TierReadThroughputLow", "warning"): "A training job reads the {tier} tier below 100 MB/s",
    ("TierReadThroughputLow", "critical"): "A training job reads the {tier} tier below 50 MB/s",
    ("TierReadLatencyHigh", "warning"): "A training job's mean read latency on the {tier} tier is above 100 ms",
    ("TierReadLatencyHigh", "critical"): "A training job's mean read latency on the {tier} tier is above 500 ms",
}
"""The text a pager shows for the alerts whose summary is a template, written out (not taken from the rules): a
summary whose template Prometheus does not expand fails the promtool test."""


def expected_alerts(alert: str, labels: dict[str, str], severities: list[str]) -> list[dict[str, Any]]:
    rules = {(r["alert"], r["labels"]["severity"]): r for g in GROUPS for r in g["rules"] if "alert" in r}

    def annotations(severity: str) -> dict[str, str]:
        given = dict(rules[(alert, severity)]["annotations"])
        if (alert, severity) in PAGED_AS:
            given["summary"] = PAGED_AS[(alert, severity)].format(tier=labels["ai_storage_platform_data_tier"])
        return given

    return [{"exp_labels": {**labels, "severity": s}, "exp_annotations": annotations(s)} for s in severities]


def test_every_alert_is_tested():
    from tests.unit.test_input_alerts import TESTED as FROM_THE_STEP_RUNS  # the runs of benchmarks/step_verdicts.py

    tested = set(cases(SETTINGS.thresholds)) | {name for name, _ in [*SINGLE, *protection_cases()]}
    tested |= set(FROM_THE_STEP_RUNS)
    assert tested == ALERTS


def test_promtool_sees_each_alert_cross_its_levels_and_not_fire_below_them(promtool, tmp_path):
    tests = []
    for alert, scenarios in [*cases(SETTINGS.thresholds).items(), *SINGLE, *protection_cases()]:
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
        ({"rules": {"window": "five minutes"}}, "monitoring.rules.window", "expected a positive duration"),
        ({"scrapeInterval": "30"}, "monitoring.scrapeInterval", "expected a positive duration"),
        ({"namespace": "Monitoring"}, "monitoring.namespace", "DNS label"),
        ({"selectorLabels": ["release"]}, "monitoring.selectorLabels", "mapping"),
        ({"rules": {"thresholds": {"readThroughputMbS": {"warning": "fast"}}}}, "warning", "number"),
        (
            {"rules": {"thresholds": {"checkpointLagIntervals": {"warning": 4, "critical": 2}}}},
            "monitoring.rules.thresholds.checkpointLagIntervals.critical",
            "expected critical above warning (4)",
        ),
        (
            {"rules": {"thresholds": {"restoreTestAgeHours": {"warning": -1, "critical": 2}}}},
            "monitoring.rules.thresholds.restoreTestAgeHours.warning",
            "expected a number >= 0",
        ),
    ],
)
def test_bad_monitoring_settings_are_rejected_with_key_and_hint(config, key, expected):
    with pytest.raises(SettingsError) as caught:
        load_settings("dev", {"monitoring": config})
    message = str(caught.value)
    assert key in message and expected in message and "Hint:" in message


def test_the_protection_alerts_select_each_protection_cronjob_a_stack_renders():
    result = render.rendering("prod", render.run("prod"))
    found = {o["metadata"]["name"]: o for objs in result.manifests.values() for o in objs if o.get("kind") == "CronJob"}
    assert set(found) == set(PROTECTION_CRONJOBS.values())
    for prefix, name in PROTECTION_CRONJOBS.items():
        matching = [p for p, (pattern, _) in PROTECTION.items() if re.fullmatch(pattern, name)]
        assert matching == [prefix], name


PROTECTION_KINDS = {
    "-offsite": ("CheckpointOffsiteStale", STALE_AFTER + 60, ["critical"]),
    "-snapshots": ("CheckpointSnapshotsStale", STALE_AFTER + 60, ["critical"]),
    "-metadata-backup": ("MetadataBackupStale", STALE_AFTER + 60, ["critical"]),
    "-restore-test": ("CheckpointRestoreTestOverdue", 200 * 3600, ["warning", "critical"]),
}
"""What each CronJob the platform or a team makes protects, by the end of its name (restated here, not read from
the rules), the alert that must watch it wherever it runs and whatever its claim's name, and how long ago a last
success makes that alert fire (past two intervals; restore tests: past 48 h and 168 h)."""


def cronjobs(result: render.Rendering) -> list[tuple[str, str]]:
    return [(o["metadata"]["namespace"], o["metadata"]["name"]) for o in objects(result, "CronJob")]


def every_cronjob(tmp_path: Path) -> list[tuple[str, str]]:
    """(namespace, name) of every CronJob each stack renders, and of a team project's (the team-training example,
    with a checkpoint claim named otherwise than the platform's)."""
    found = [c for stack in STACKS for c in cronjobs(render.rendering(stack, render.run(stack)))]
    example = ROOT / "examples" / "team-training"
    config = stack_file(tmp_path, "dev", {"checkpoint": {"claim": "run-a"}}, example)
    found += cronjobs(render.rendering("dev", render.run("dev", config, example)))
    return sorted(set(found))


def test_every_cronjob_a_stack_or_a_team_makes_is_watched_by_a_stale_alert(promtool, tmp_path, as_installed):
    """Each rendered CronJob, stale in its own namespace, fires the Stale alert of its kind (promtool)."""
    now = MINUTES * 60
    tests, kinds, every = [], set(), every_cronjob(tmp_path)
    assert ("vision", "run-a-offsite") in every, every
    for namespace, name in every:
        kind = next((k for suffix, k in PROTECTION_KINDS.items() if name.endswith(suffix)), None)
        assert kind, f"CronJob {namespace}/{name} protects nothing a staleness alert knows of"
        alert, age, severities = kind
        kinds.add(alert)
        series = cronjob(name, namespace, now - age, now - INTERVAL)
        tests.append(
            {
                "name": f"{namespace}/{name}",
                "interval": "1m",
                "input_series": [{"series": k, "values": v} for k, v in series.items()],
                "alert_rule_test": [
                    {
                        "eval_time": f"{MINUTES}m",
                        "alertname": alert,
                        "exp_alerts": expected_alerts(alert, {"namespace": namespace, "cronjob": name}, severities),
                    }
                ],
            }
        )
    assert kinds == {alert for alert, _, _ in PROTECTION_KINDS.values()}
    rules = rule_file(tmp_path)
    spec = tmp_path / "tests.yml"
    spec.write_text(yaml.safe_dump({"rule_files": [rules.name], "evaluation_interval": "1m", "tests": tests}))
    run = subprocess.run([promtool, "test", "rules", str(spec)], capture_output=True, text=True, cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr


def test_the_restore_test_alerts_select_the_restore_test_cronjob_of_the_team_example(as_installed):
    from tests.unit.test_checkpoints import EXAMPLE

    result = render.rendering("dev", render.run("dev", None, EXAMPLE))
    names = {o["metadata"]["name"] for o in result.manifests["vision"] if o.get("kind") == "CronJob"}
    assert RESTORE_TEST_CRONJOB in names
    prefix, pattern, _ = RESTORE_TEST
    matching = [p for p, (other, _) in PROTECTION.items() if re.fullmatch(other, RESTORE_TEST_CRONJOB)]
    assert re.fullmatch(pattern, RESTORE_TEST_CRONJOB) and matching == [] and prefix == "CheckpointRestoreTest"


TEMPLATE_ACTION = re.compile(r"\{\{.*?\}\}", re.S)


@pytest.mark.parametrize("stack", STACKS)
def test_every_alert_of_every_stack_reads_as_a_pager_shows_it_and_links_its_runbook(stack):
    """No annotation holds template text Prometheus would show as it is (`{ $labels.x }`, or `$labels` outside
    `{{ }}`); every `runbook_url` is an absolute https link to the alert's section of docs/alerts.md."""
    pages = set(re.findall(r"^## (\w+)$", (ROOT / "docs" / "alerts.md").read_text(), re.M))
    result = render.rendering(stack, render.run(stack))
    alerts = [r for rule in objects(result, "PrometheusRule") for g in rule["spec"]["groups"] for r in g["rules"]]
    alerts = [r for r in alerts if "alert" in r]
    assert alerts
    for rule in alerts:
        for key, text in rule["annotations"].items():
            outside = TEMPLATE_ACTION.sub("", text)
            assert "$" not in outside and "{ " not in outside, (rule["alert"], key, text)
        url = rule["annotations"]["runbook_url"]
        assert url.startswith("https://") and url.endswith(f"/alerts.md#{rule['alert'].lower()}"), url
        assert rule["alert"] in pages


def test_docs_alerts_md_has_a_page_for_every_alert():
    text = (ROOT / "docs" / "alerts.md").read_text()
    pages = set(re.findall(r"^## (\w+)$", text, re.M))
    assert pages == ALERTS
    for group in GROUPS:
        for rule in group["rules"]:
            if "alert" in rule:
                assert rule["annotations"]["runbook_url"].endswith(f"#{rule['alert'].lower()}")


@pytest.mark.parametrize(
    "key",
    ["cacheHitRatioPercent", "metadataMemoryPercent", "prefetchHitRatioPercent", "checkpointSaveFailurePercent"],
)
@pytest.mark.parametrize(("level", "value", "expected"), [("warning", 150, "<= 100"), ("critical", -1, ">= 0")])
def test_a_percentage_outside_0_to_100_is_refused_naming_the_key(key, level, value, expected):
    levels = {"warning": 50, "critical": 50, level: value}
    with pytest.raises(SettingsError) as caught:
        load_settings("dev", {"monitoring": {"rules": {"thresholds": {key: levels}}}})
    message = str(caught.value)
    assert f"monitoring.rules.thresholds.{key}.{level}: expected a number {expected}; got {value}" in message
    assert "Hint:" in message


def test_every_dashboard_query_parses_and_reads_only_recorded_series_the_rules_make(promtool, tmp_path):
    queries = [
        t["expr"]
        for board in dashboards(SETTINGS.window).values()
        for p in json.loads(board)["panels"]
        for t in p.get("targets", [])
    ]
    recorded = {r["record"] for g in GROUPS for r in g["rules"] if "record" in r}
    used = {name for q in queries for name in re.findall(r"ai_storage:[a-z0-9_:]+", q)}
    assert used and used <= recorded, used - recorded
    # promtool parses PromQL in rule files: each query as a recording rule.
    rules = [{"record": f"dashboard:query_{i}", "expr": q} for i, q in enumerate(queries)]
    run = subprocess.run(
        [promtool, "check", "rules", str(rule_file(tmp_path, [{"name": "dashboards", "rules": rules}]))],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stdout + run.stderr
