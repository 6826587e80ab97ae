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
    StoriesSettings,
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


SMALL = StoriesSettings.model_validate(
    {
        "seqWrite": {"sizeMib": 16, "runtimeSeconds": 5},
        "seqRead": {"sizeMib": 16, "runtimeSeconds": 5},
        "randRead": {"sizeMib": 16, "runtimeSeconds": 5},
    }
)
"""The design's stories (4 writers, 4 readers, 8 random readers at iodepth 32) on 16 MiB files."""


def run_acceptance(tmp_path, tier, thresholds):
    (tmp_path / "job.fio").write_text(fio_job_file(tier, SMALL))
    (tmp_path / "run.sh").write_text(acceptance_script(tier, thresholds))
    env = {**os.environ, "DATA_DIR": str(tmp_path), "JOB_FILE": str(tmp_path / "job.fio")}
    proc = subprocess.run(["sh", str(tmp_path / "run.sh")], env=env, capture_output=True, text=True, timeout=300)
    summary = [
        json.loads(line) for line in proc.stdout.splitlines() if line.startswith('{"tier"') and '"figure"' in line
    ]
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
    report = json.loads(proc.stdout[proc.stdout.index("{\n") : proc.stdout.index("\n}\n") + 2])  # fio's own JSON
    options = {job["jobname"]: job["job options"] for job in report["jobs"]}
    stories = {"seq-write": ("4", "1"), "seq-read": ("4", "1"), "rand-read": ("8", "32")}
    assert {name: (o["numjobs"], o["iodepth"]) for name, o in options.items() if name in stories} == stories
    assert options["rand-read"]["filename"] == "seq.0:seq.1:seq.2:seq.3"  # it reads what the writers wrote
    direct = [json.loads(line) for line in proc.stdout.splitlines() if '"direct_io"' in line]
    assert direct and direct[0]["direct_io"] in (0, 1)  # said either way
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("seq.")) == [f"seq.{i}" for i in range(4)]


def test_a_missed_threshold_fails_the_job_and_names_the_figure(fio, tmp_path):
    proc, summary = run_acceptance(tmp_path, "hot", Thresholds(seq_read_mib_s=10**9))
    assert proc.returncode == 1
    failed = [s["figure"] for s in summary if s["result"] == "fail"]
    assert failed == ["seq_read_mib_s"]
    assert "ACCEPTANCE FAIL: hot" in proc.stdout


def test_each_given_tier_gets_an_fio_job_on_a_volume_of_its_class_with_its_thresholds(build):
    settings = AcceptanceSettings.model_validate({"enabled": True, "thresholds": {"cold": {"warmColdRatio": 2.5}}})
    classes = {"warm": "ai-warm", "cold": "ai-cold"}
    result, _ = build(lambda: StorageAcceptance("acceptance", StorageAcceptanceArgs(settings, classes)))
    assert {j["metadata"]["name"] for j in objects(result, "Job")} == {"acceptance-warm", "acceptance-cold"}
    script = by_name(result, "ConfigMap", "acceptance-cold")["data"]["run.sh"]
    assert "warm_cold_ratio" in script and " 2.5" in script
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


def test_a_failed_acceptance_alerts_and_the_stack_output_names_each_verdict(render_stack):
    result, _ = render_stack("dev")
    (rule,) = objects(result, "PrometheusRule")
    alerts = {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r}
    assert 'namespace="storage-acceptance"' in alerts["StorageAcceptanceFailed"]["expr"]
    verdicts = result.outputs["acceptance"]
    assert set(verdicts) == {"hot", "warm", "cold", "checkpoint", "block"}
    assert verdicts["cold"] == "not awaited: kubectl -n storage-acceptance logs job/acceptance-cold | tail -n 1"
    job = by_name(result, "Job", "acceptance-cold")
    assert (job["spec"]["backoffLimit"], job["spec"]["template"]["spec"]["restartPolicy"]) == (0, "Never")


@pytest.mark.parametrize(
    ("acceptance", "key", "expected"),
    [
        ({"volumeSize": "1Gi"}, "acceptance.volumeSize", "expected room for the stories' files"),
        ({"stories": {"seqRead": {"jobs": 8}}}, "acceptance.stories.seqRead.jobs", "at most stories.seqWrite.jobs"),
        ({"stories": {"randRead": {"iodepth": 0}}}, "acceptance.stories.randRead.iodepth", ">= 1"),
    ],
)
def test_stories_that_would_fill_the_claim_or_read_unwritten_files_are_refused(acceptance, key, expected):
    from components.sections import SettingsError
    from components.settings import load_settings

    with pytest.raises(SettingsError) as caught:
        load_settings("dev", {"acceptance": acceptance})
    lines = [line for line in str(caught.value).splitlines() if line.startswith(f"  - {key}:")]
    assert len(lines) == 1 and expected in lines[0] and "Hint:" in lines[0]


def test_the_cold_tiers_default_criterion_is_the_designs_three_times():
    assert Thresholds().warm_cold_ratio == 3.0
    assert "warm_cold_ratio" in acceptance_script("cold", Thresholds()) and " 3.0" in acceptance_script(
        "cold", Thresholds()
    )
