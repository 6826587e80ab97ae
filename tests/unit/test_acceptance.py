"""StorageAcceptance: the exact fio job files and scripts the Jobs run, run here with the real fio."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pulumi
import pytest

from components.platform import Platform, PlatformArgs
from components.settings import PlatformSettings
from components.tiers.acceptance import (
    DESIGN_FLOORS,
    AcceptanceSettings,
    StorageAcceptance,
    StorageAcceptanceArgs,
    StoriesSettings,
    Thresholds,
    acceptance_script,
    effective_thresholds,
    fio_job_file,
)
from components.tiers.storage_tiers import TiersSettings
from tests.conftest import STACKS, by_name, objects, stack_settings
from tests.kube_semantics import tolerates


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
        "seqWrite": {"sizeMib": 16, "runtimeSeconds": 2},
        "seqRead": {"sizeMib": 16, "runtimeSeconds": 2},
        "randRead": {"sizeMib": 16, "runtimeSeconds": 2},
    }
)
"""The design's stories (4 writers, 4 readers, 8 random readers at iodepth 32, time-based) on 16 MiB files, 2 s each."""


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
    # Every figure but the one under test set to 0: an unset figure is the tier's floor, which a slow disk misses.
    unreachable = Thresholds(seq_read_mib_s=10**9, seq_write_mib_s=0, rand_read_iops=0, warm_cold_ratio=0.0)
    proc, summary = run_acceptance(tmp_path, "hot", unreachable)
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
    from components.common.sections import SettingsError
    from components.settings import load_settings

    with pytest.raises(SettingsError) as caught:
        load_settings("dev", {"acceptance": acceptance})
    lines = [line for line in str(caught.value).splitlines() if line.startswith(f"  - {key}:")]
    assert len(lines) == 1 and expected in lines[0] and "Hint:" in lines[0]


def test_the_cold_tiers_default_criterion_is_the_designs_three_times():
    assert Thresholds().warm_cold_ratio is None and DESIGN_FLOORS["cold"].warm_cold_ratio == 3.0  # unset: the floor
    assert "warm_cold_ratio" in acceptance_script("cold", Thresholds()) and " 3.0" in acceptance_script(
        "cold", Thresholds()
    )


def test_the_stories_run_as_the_design_runs_them(fio, tmp_path):
    """Time-based (fio goes on for runtimeSeconds), size per job as fio means it; the cold and warm reads one pass
    each (a second pass of the cold read would be warm)."""
    proc, _ = run_acceptance(tmp_path, "cold", Thresholds(seq_read_mib_s=0, seq_write_mib_s=0, rand_read_iops=0))
    report = json.loads(proc.stdout[proc.stdout.index("{\n") : proc.stdout.index("\n}\n") + 2])
    jobs = {job["jobname"]: job for job in report["jobs"]}
    for story in ("seq-write", "seq-read", "rand-read"):
        options = jobs[story]["job options"]
        assert (options["time_based"], options["runtime"]) == ("1", "2"), story
        assert jobs[story]["job_runtime"] >= 2000 * 0.9  # ms: it ran its time, not until its files ended
    assert jobs["seq-write"]["job options"]["size"] == "16m"  # per job: 4 files of 16 MiB
    for one_pass in ("cold-read", "warm-read"):
        assert "time_based" not in jobs[one_pass]["job options"]
    default = fio_job_file("hot", StoriesSettings())
    assert "size=10240m" in default and "runtime=60\ntime_based=1" in default  # the design's 10 GiB, 60 s


def test_each_tier_is_judged_against_its_design_floor_unless_the_stack_says_otherwise(render_stack):
    floors = {tier: (t.seq_read_mib_s, t.seq_write_mib_s) for tier, t in DESIGN_FLOORS.items()}
    assert floors["hot"] == (2861, 2861) and floors["warm"] == (953, 953) and floors["cold"] == (95, 95)
    result, _ = render_stack("prod")
    for tier, (read, write) in floors.items():
        script = by_name(result, "ConfigMap", f"acceptance-{tier}")["data"]["run.sh"]
        assert f'check seq_read_mib_s "$(bw seq-read read)" {read}' in script, tier
        assert f'check seq_write_mib_s "$(bw seq-write write)" {write}' in script, tier
    fio_container = by_name(result, "Job", "acceptance-hot")["spec"]["template"]["spec"]["containers"][0]
    assert fio_container["resources"] == {
        "requests": {"cpu": "4", "memory": "8Gi"},
        "limits": {"cpu": "4", "memory": "8Gi"},
    }
    # A tier that sets one figure keeps its floor for the others (dev's cold tier sets only the warm/cold ratio).
    cold = effective_thresholds("cold", Thresholds.model_validate({"warmColdRatio": 1.3}))
    assert (cold.seq_read_mib_s, cold.warm_cold_ratio) == (95, 1.3)


@pytest.mark.parametrize("stack", ["staging", "prod"])
def test_staging_and_prod_run_them_after_install_and_wait_for_the_verdicts(render_stack, stack):
    result, _ = render_stack(stack)
    jobs = {j["metadata"]["name"]: j for j in objects(result, "Job") if j["metadata"]["name"].startswith("acceptance-")}
    assert set(jobs) == {f"acceptance-{tier}" for tier in ("hot", "warm", "cold", "checkpoint", "block")}
    assert all("pulumi.com/skipAwait" not in (j["metadata"].get("annotations") or {}) for j in jobs.values())
    assert set(result.outputs["acceptance"]) == {"hot", "warm", "cold", "checkpoint", "block"}


def described_nodes(stack: str) -> list[dict]:
    """The node kinds docs/eks.md lays out, with the stack's own labels: GPU nodes that alone hold the NVMe volume
    group (labelled `localNvme.nodeSelector`, tainted `nvidia.com/gpu=present:NoSchedule`), storage nodes (the Ceph
    OSD label, no taint) and untainted system nodes with neither."""
    s = stack_settings(stack)
    gpu_taint = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    return [
        {
            "name": "gpu",
            "labels": {**s.local_nvme.node_selector, "nvidia.com/gpu.present": "true"},
            "taints": [gpu_taint],
        },
        {"name": "storage", "labels": dict(s.rook_ceph.storage.osd_node_selector), "taints": []},
        {"name": "system", "labels": {}, "taints": []},
    ]


def landing(pod_spec: dict, nodes: list[dict]) -> list[str]:
    """The nodes the scheduler's NodeAffinity (nodeSelector) and TaintToleration filters leave for a pod."""
    return [
        n["name"]
        for n in nodes
        if all(n["labels"].get(k) == v for k, v in (pod_spec.get("nodeSelector") or {}).items())
        and all(
            tolerates(pod_spec.get("tolerations"), t) for t in n["taints"] if t["effect"] in ("NoSchedule", "NoExecute")
        )
    ]


@pytest.mark.parametrize("stack", STACKS)
def test_every_acceptance_job_schedules_on_the_nodes_that_hold_its_tier(render_stack, stack):
    result, _ = render_stack(stack)
    jobs = {j["metadata"]["name"]: j for j in objects(result, "Job") if j["metadata"]["name"].startswith("acceptance-")}
    assert jobs or not stack_settings(stack).acceptance.enabled
    nodes = described_nodes(stack)
    for name, job in jobs.items():
        where = landing(job["spec"]["template"]["spec"], nodes)
        assert where, f"{name} fits no node of {stack}"
        if name in ("acceptance-hot",) or (
            name == "acceptance-cold" and "nodeSelector" in job["spec"]["template"]["spec"]
        ):
            assert where == ["gpu"], (name, where)  # the tier (or its cache volume) exists only there


def test_the_hot_tier_job_follows_the_nvme_nodes_and_the_node_plugins_tolerations(render_stack):
    taint = {"key": "example.com/dedicated", "operator": "Equal", "value": "train", "effect": "NoSchedule"}
    result, _ = render_stack("prod", localNvme={"nodeSelector": {"pool": "p5"}}, nodeStorage={"tolerations": [taint]})
    spec = by_name(result, "Job", "acceptance-hot")["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {"pool": "p5"} and spec["tolerations"] == [taint]
    warm = by_name(result, "Job", "acceptance-warm")["spec"]["template"]["spec"]
    assert "nodeSelector" not in warm and warm["tolerations"] == [taint]  # Ceph volumes reach any node
