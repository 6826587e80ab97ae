"""Is the GPU fed, as the alerts see it: the three runs of benchmarks/step_verdicts.py (storage-bound, CPU-bound,
compute-bound, each judged by ``doctor job``) turned into the series Prometheus would scrape from such a pod, with
a DCGM exporter's GPU utilisation beside them; ``promtool test rules`` shows TrainingInputBound fire for the
storage-bound run only, TrainingLoaderCPUBound for the CPU-bound run only, StorageGoodputLow for the storage-bound
run only (the CPU-bound one waits as long, on its CPU), and nothing for the compute-bound run; a pod that waits as
the storage-bound run but whose GPU is busy 90 % is not input-bound.

The runs were on CPU (no GPU): the DCGM series give each pod a GPU busy for the share of its step the loop
computed (what a GPU doing the compute would show), as the exporter labels it with the pod it is assigned to.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import yaml

from components.observability.alert_rules import RuleSettings, rule_groups
from tests.unit.test_alert_rules import MINUTES, counter, gauge, promtool, rule_file  # noqa: F401  (fixture)

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "step_verdicts.json"
TESTED = ("TrainingInputBound", "TrainingLoaderCPUBound", "StorageGoodputLow")
FIRING = {
    "storage": {"TrainingInputBound", "StorageGoodputLow"},
    "cpu": {"TrainingLoaderCPUBound"},  # its loader waits on its CPU: storage loses it nothing
    "storage-busy-gpu": {"StorageGoodputLow"},  # waits as the storage run, but its GPU is busy: not input-bound
}
TIER = "ai_storage_platform_data_tier"


def series(name: str, run: dict, gpu_busy: float | None = None) -> dict[str, str]:
    """The run's pod as Prometheus would hold it: its counters growing at the run's rates (per second of steps),
    and the DCGM exporter's utilisation of the GPU assigned to it."""
    totals, share = run["totals"], run["verdict"]["figures"]
    per_minute = {key: 60 * value / totals["step"] for key, value in totals.items()}
    labels = f'namespace="team",pod="{name}",{TIER}="{run["tier"]}"'
    out = {
        f"ai_storage_step_seconds_total{{{labels}}}": counter(60),
        f"ai_storage_step_data_wait_seconds_total{{{labels}}}": counter(per_minute["wait"]),
        f"ai_storage_step_checkpoint_seconds_total{{{labels}}}": counter(per_minute["checkpoint"]),
        f"ai_storage_loader_transform_seconds_total{{{labels}}}": counter(per_minute["transform"]),
        f"ai_storage_read_seconds_sum{{{labels}}}": counter(per_minute["read"]),
        f"ai_storage_read_seconds_count{{{labels}}}": counter(per_minute["reads"]),
        f"ai_storage_prefetch_hits_total{{{labels}}}": counter(per_minute["hits"]),
        f"ai_storage_prefetch_misses_total{{{labels}}}": counter(per_minute["misses"]),
        f"ai_storage_checkpoint_restore_seconds_sum{{{labels}}}": gauge(0),
        f"ai_storage_lost_progress_seconds_total{{{labels}}}": gauge(0),
    }
    gpu = f'namespace="team",pod="{name}",container="trainer",gpu="0",UUID="GPU-{name}",Hostname="node-1"'
    busy = round(100 * share["compute_share"]) if gpu_busy is None else gpu_busy
    out[f"DCGM_FI_DEV_GPU_UTIL{{{gpu}}}"] = gauge(busy)
    return out


def expected(alert: str, name: str, run: dict, rules: dict) -> list[dict]:
    hit = run["totals"]["hits"] / (run["totals"]["hits"] + run["totals"]["misses"])
    found = []
    for (rule_alert, severity), rule in rules.items():
        if rule_alert != alert:
            continue
        if alert == "StorageGoodputLow":
            f = run["verdict"]["figures"]  # storage's part of the data wait: its loader's read share
            goodput = 100 * (1 - f["data_wait_share"] * f["loader_read_share"] - f["checkpoint_share"])
            level = float(rule["expr"].rsplit("<", 1)[1])
            if goodput >= level:
                continue
        annotations = {
            k: v.replace(f"{{{{ $labels.{TIER} }}}}", run["tier"]).split("{{ with")[0]
            + (f"{100 * hit:.4g}%)" if "{{ with" in v else "")
            for k, v in rule["annotations"].items()
        }
        labels = {"namespace": "team", "pod": name, TIER: run["tier"], "severity": severity}
        found.append({"exp_labels": labels, "exp_annotations": annotations})
    return found


def test_the_runs_verdicts_are_the_expected_ones():
    runs = json.loads(RESULTS.read_text())["runs"]
    assert {name: run["verdict"]["verdict"] for name, run in runs.items()} == {
        "storage": "storage-bound",
        "cpu": "CPU-bound",
        "compute": "compute-bound",
    }


def test_the_alerts_fire_for_the_storage_and_cpu_bound_runs_only(promtool, tmp_path):  # noqa: F811
    runs = json.loads(RESULTS.read_text())["runs"]
    runs["storage-busy-gpu"] = {**runs["storage"], "gpu_busy": 90}
    groups = rule_groups(RuleSettings(), replicas=None, ceph=False, volcano=False)
    rules = {(r["alert"], r["labels"]["severity"]): r for g in groups for r in g["rules"] if "alert" in r}
    inputs = [
        {"series": k, "values": v}
        for name, run in runs.items()
        for k, v in series(name, run, run.get("gpu_busy")).items()
    ]
    checks = []
    for alert in TESTED:
        exp = [
            e for name, run in runs.items() if alert in FIRING.get(name, ()) for e in expected(alert, name, run, rules)
        ]
        checks.append({"eval_time": f"{MINUTES}m", "alertname": alert, "exp_alerts": exp})
    assert sum(len(c["exp_alerts"]) for c in checks) >= 4  # both input alerts and the goodput alert of two runs
    spec = tmp_path / "tests.yml"
    path = rule_file(tmp_path, groups)
    test = {"name": "step-verdicts", "interval": "1m", "input_series": inputs, "alert_rule_test": checks}
    spec.write_text(yaml.safe_dump({"rule_files": [path.name], "evaluation_interval": "1m", "tests": [test]}))
    run = subprocess.run([promtool, "test", "rules", str(spec)], capture_output=True, text=True, cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
