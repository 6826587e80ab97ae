"""``doctor job --prometheus`` against a real Prometheus: a CPU-bound job (tests/training/steps_job.py, its
DataLoader workers reporting through PROMETHEUS_MULTIPROC_DIR) scraped every second with the platform's rules.
The verdict from Prometheus is the one from the job's own scrape, and the generated recording rules compute the
job's data-wait and loader-transform shares, its storage goodput (high: its loader waits on its CPU, not on
storage) and the data wait on that CPU from the real series."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import observability
from harness import free_port

from components.observability.alert_rules import RuleSettings, rule_groups

REPO = Path(__file__).resolve().parents[2]
JOB = REPO / "tests" / "training" / "steps_job.py"


def doctor_job(*args: str) -> dict:
    argv = [sys.executable, "-m", "ai_storage_training", "doctor", "job", "--json", *args]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_verdict_from_prometheus_is_the_jobs_own(tmp_path, packed_dataset):
    groups = rule_groups(RuleSettings(window="20s", checkpoint_window="30s"), replicas=None, ceph=False, volcano=False)
    port = free_port()
    (tmp_path / "multiproc").mkdir()
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "multiproc"), "PYTHONPATH": str(REPO)}
    argv = [sys.executable, str(JOB), "--data", str(packed_dataset), "--transform-ms", "4", "--compute-ms", "5"]
    argv += ["--steps", "300", "--scrape", str(tmp_path / "job.prom"), "--serve-port", str(port), "--linger", "6"]
    argv += ["--start-after", "5"]
    with observability.prometheus({"training": port}, groups, tmp_path / "prometheus") as prom:
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        url = f"http://127.0.0.1:{prom.port}"
        from_prometheus = doctor_job("--prometheus", url, "--selector", '{job="training"}', "--window", "1m")
        shares = {
            name: prom.value(f"max(ai_storage:{name}:ratio)")
            for name in ("step_data_wait", "loader_transform", "storage_goodput", "data_wait_on_cpu")
        }
    from_scrape = doctor_job(str(tmp_path / "job.prom"))
    assert from_scrape["verdict"] == from_prometheus["verdict"] == "CPU-bound", (from_scrape, from_prometheus)
    assert abs(from_prometheus["figures"]["data_wait_share"] - from_scrape["figures"]["data_wait_share"]) < 0.15
    assert shares["step_data_wait"] is not None and shares["step_data_wait"] > 0.2, shares
    assert shares["loader_transform"] is not None and shares["loader_transform"] > 0.5, shares
    assert shares["storage_goodput"] is not None and shares["storage_goodput"] > 0.9, shares  # not storage's loss
    assert shares["data_wait_on_cpu"] is not None and shares["data_wait_on_cpu"] > 0.2, shares
