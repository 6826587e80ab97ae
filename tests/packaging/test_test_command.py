"""The README's test command (scripts/test) checks what it cannot install before installing anything: without the
upstream reference folder it stops with one line saying what is missing, where it looked and how to provide it.

Fast (no install): it runs a copy of the script in a temporary clone whose ``python3`` refuses to make a
virtualenv, so a check that let the script go on fails the test at once instead of installing."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from components.toolchain.render import ROOT

GUARD = """#!/bin/sh
if [ "$1" = -m ]; then echo "scripts/test went on to install (python3 $*)" >&2; exit 97; fi
exec {python} "$@"
"""


@pytest.fixture
def clone(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """(a clone holding scripts/test with no ``shared`` folder beside it, an environment whose python3 refuses
    ``-m venv`` and which has no apt-get)."""
    repo = tmp_path / "clone" / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "test", repo / "scripts" / "test")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text(GUARD.format(python=sys.executable))
    (bin_dir / "python3").chmod(0o755)
    for tool in ("bash", "dirname", "find"):  # and no apt-get: nothing is installed whatever happens
        (bin_dir / tool).symlink_to(shutil.which(tool) or tool)
    env = {k: v for k, v in os.environ.items() if k != "AI_STORAGE_SHARED"}
    env["PATH"] = str(bin_dir)
    return repo, env


def run(repo: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    bash = str(Path(env["PATH"]) / "bash")
    return subprocess.run([bash, "scripts/test"], cwd=repo, env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(
    ("case", "looked_in"),
    [
        ("no shared folder beside the clone", "clone/shared/upstream (beside the clone)"),
        ("an empty upstream folder beside the clone", "clone/shared/upstream (beside the clone)"),
        ("AI_STORAGE_SHARED naming a missing folder", "elsewhere/upstream (AI_STORAGE_SHARED)"),
    ],
)
def test_a_missing_upstream_folder_stops_the_test_command_with_one_line(clone, case, looked_in):
    repo, env = clone
    if case.startswith("an empty"):
        (repo.parent / "shared" / "upstream").mkdir(parents=True)
    if case.startswith("AI_STORAGE_SHARED"):
        env["AI_STORAGE_SHARED"] = str(repo.parent / "elsewhere")
    result = run(repo, env)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, lines
    assert result.stdout == ""
    assert "upstream reference folder missing" in lines[0]
    assert looked_in in lines[0]
    assert "set AI_STORAGE_SHARED" in lines[0]
    assert not (repo / ".venv").exists()


def test_the_check_accepts_an_upstream_folder_with_chart_values(clone, tmp_path):
    """The same clone with a chart's values.yaml under AI_STORAGE_SHARED/upstream passes the check (and then
    reaches the guarded install step, which proves the check above is what stopped it)."""
    repo, env = clone
    chart = tmp_path / "shared" / "upstream" / "some-chart"
    chart.mkdir(parents=True)
    (chart / "values.yaml").write_text("{}\n")
    env["AI_STORAGE_SHARED"] = str(tmp_path / "shared")
    result = run(repo, env)
    assert result.returncode == 97, result.stderr
    assert "went on to install" in result.stderr
