"""StorageAcceptance: the exact fio job files and scripts the Jobs run, run here with the real fio."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pulumi
import pytest

from components.acceptance import (
    AcceptanceSettings,
    StorageAcceptance,
    StorageAcceptanceArgs,
    Thresholds,
    acceptance_script,
    fio_job_file,
)
from components.platform import Platform, PlatformArgs
from components.settings import PlatformSettings
from components.storage_tiers import TiersSettings
from tests.conftest import by_name, objects


@pytest.fixture
def fio():
    path = shutil.which("fio")
    if path is None:
        if os.environ.get("AI_STORAGE_REQUIRE_DATAPATH") == "1":
            pytest.fail("fio is not installed (apt-get install fio)")
        pytest.skip("fio is not installed (apt-get install fio); the acceptance scripts were not run")
    return path


def run_acceptance(tmp_path, tier, thresholds):
    (tmp_path / "job.fio").write_text(fio_job_file(tier, 16))
    (tmp_path / "run.sh").write_text(acceptance_script(tier, thresholds))
    env = {**os.environ, "DATA_DIR": str(tmp_path), "JOB_FILE": str(tmp_path / "job.fio")}
    proc = subprocess.run(["sh", str(tmp_path / "run.sh")], env=env, capture_output=True, text=True, timeout=300)
    summary = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith('{"tier"')]
    return proc, summary


@pytest.mark.parametrize("tier", ["hot", "warm", "cold", "checkpoint"])
def test_job_file_and_script_run_on_real_fio_and_report_every_figure(fio, tmp_path, tier):
    # Zero thresholds: this test proves the scripts run and report; speed on a shared machine is not the point.
    zero = Thresholds(seq_read_mib_s=0, seq_write_mib_s=0, rand_read_iops=0, warm_cold_ratio=0.0)
    proc, summary = run_acceptance(tmp_path, tier, zero)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr
    figures = {s["figure"]: s for s in summary}
    expected = {"seq_write_mib_s", "seq_read_mib_s", "rand_read_iops"}
    if tier == "cold":
        expected.add("warm_cold_ratio")
    assert set(figures) == expected
    assert all(s["value"] > 0 and s["result"] == "pass" for s in summary if s["figure"] != "warm_cold_ratio")
    assert f"ACCEPTANCE PASS: {tier}" in proc.stdout
    assert json.loads(proc.stdout[: proc.stdout.index("\n}\n") + 2])["jobs"]  # fio's own JSON is in the log


def test_a_missed_threshold_fails_the_job_and_names_the_figure(fio, tmp_path):
    proc, summary = run_acceptance(tmp_path, "hot", Thresholds(seq_read_mib_s=10**9))
    assert proc.returncode == 1
    failed = [s["figure"] for s in summary if s["result"] == "fail"]
    assert failed == ["seq_read_mib_s"]
    assert "ACCEPTANCE FAIL: hot" in proc.stdout


def test_each_given_tier_gets_an_fio_job_on_a_volume_of_its_class_with_its_thresholds(build):
    settings = AcceptanceSettings.model_validate({"enabled": True, "thresholds": {"cold": {"warmColdRatio": 3.0}}})
    classes = {"warm": "ai-warm", "cold": "ai-cold"}
    result, _ = build(lambda: StorageAcceptance("acceptance", StorageAcceptanceArgs(settings, classes)))
    assert {j["metadata"]["name"] for j in objects(result, "Job")} == {"acceptance-warm", "acceptance-cold"}
    script = by_name(result, "ConfigMap", "acceptance-cold")["data"]["run.sh"]
    assert "warm_cold_ratio" in script and " 3.0" in script
    for tier, storage_class in classes.items():
        volume = by_name(result, "Job", f"acceptance-{tier}")["spec"]["template"]["spec"]["volumes"][0]
        assert volume["ephemeral"]["volumeClaimTemplate"]["spec"]["storageClassName"] == storage_class


def test_the_platform_tests_every_tier_it_serves_and_no_other(build):
    # Cross-component wiring (the Platform hands StorageTiers' classes to StorageAcceptance), so this one builds
    # the whole Platform, from hand-made settings rather than a stack file.
    tiers = TiersSettings(name_prefix="ai-", hot="none")
    settings = PlatformSettings(acceptance=AcceptanceSettings(enabled=True), tiers=tiers)

    def program() -> None:
        platform = Platform("platform", PlatformArgs(settings))
        pulumi.export("storageClasses", platform.storage_classes)

    result, _ = build(program)
    classes = result.outputs["storageClasses"]
    jobs = {j["metadata"]["name"]: j for j in objects(result, "Job") if j["metadata"]["name"].startswith("acceptance-")}
    assert set(jobs) == {f"acceptance-{tier}" for tier in classes} and "hot" not in classes
    for tier, storage_class in classes.items():
        volume = jobs[f"acceptance-{tier}"]["spec"]["template"]["spec"]["volumes"][0]
        assert volume["ephemeral"]["volumeClaimTemplate"]["spec"]["storageClassName"] == storage_class
