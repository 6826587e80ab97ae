"""The GitHub workflows users run: valid against GitHub's workflow schema, and doing what they promise."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from components.toolchain.render import ROOT

WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))


def test_both_workflow_files_validate_against_the_github_workflow_schema():
    assert {w.name for w in WORKFLOWS} == {"ci.yml", "preview.yml"}
    checker = Path(sys.executable).with_name("check-jsonschema")
    proc = subprocess.run(
        [str(checker), "--builtin-schema", "vendor.github-workflows", *map(str, WORKFLOWS)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_preview_runs_per_stack_with_a_pinned_pulumi_action_and_comments():
    flow = yaml.safe_load((ROOT / ".github/workflows/preview.yml").read_text())
    job = flow["jobs"]["preview"]
    stacks = sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in ROOT.glob("Pulumi.*.yaml"))
    assert sorted(job["strategy"]["matrix"]["stack"]) == stacks
    step = next(s for s in job["steps"] if s.get("uses", "").startswith("pulumi/actions@"))
    assert step["uses"] == "pulumi/actions@v6"
    assert step["with"]["command"] == "preview" and step["with"]["comment-on-pr"] is True


def test_ci_needs_no_cloud_credentials():
    text = (ROOT / ".github/workflows/ci.yml").read_text()
    assert "secrets." not in text
    assert "bash scripts/test" in text


def test_diff_job_posts_the_storage_aware_diff_of_every_stack_and_fails_on_an_unacknowledged_replace():
    flow = yaml.safe_load((ROOT / ".github/workflows/preview.yml").read_text())
    job = flow["jobs"]["diff"]
    assert "if" not in job  # forks too: the diff needs no credentials
    assert "secrets." not in yaml.safe_dump(job)
    steps = {s.get("name") or s["uses"]: s for s in job["steps"]}
    assert steps["actions/checkout@v4"]["with"]["fetch-depth"] == 0  # the base branch is rendered from history
    run = steps["Diff every stack, base branch -> pull request"]
    assert run["env"]["BASE"] == "origin/${{ github.base_ref }}"
    assert '-m components diff "$BASE" HEAD > "$RUNNER_TEMP/diff.md"' in run["run"]
    assert 'echo "exit=$?" >> "$GITHUB_OUTPUT"' in run["run"] and "--stack" not in run["run"]  # every stack
    post = steps["Comment the diff on the pull request"]
    assert post["uses"] == "actions/github-script@v7" and "diff.md" in post["with"]["script"]
    assert "updateComment" in post["with"]["script"]  # one comment, kept up to date
    fail = steps["Fail on an unacknowledged replace or delete of data"]
    assert fail["if"] == "steps.diff.outputs.exit != '0'" and fail["run"] == 'exit "$CODE"'
    assert flow["permissions"]["pull-requests"] == "write"
