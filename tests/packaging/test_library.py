"""The component library installs with pip and imports under its own name, with its data files; the team-training
example installs it from its requirements.txt and renders with it. Slow (a fresh virtualenv): marked
``packaging``, so ``pytest -m 'not packaging'`` leaves it out of a quick run; CI runs it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import yaml

from components.common import versions
from components.toolchain.render import ROOT
from tests.conformance.upstream import validate_object

pytestmark = pytest.mark.packaging


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(a fresh virtualenv, a copy of the repository's library, profiles and examples) in a temporary folder."""
    tmp = tmp_path_factory.mktemp("library")
    source = tmp / "src"
    source.mkdir()
    for name in ("components", "ai_storage_training", "stacks", "examples"):
        shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__", "build", ".venv"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    site = next((venv / "lib").glob("python3*/site-packages"))
    # The dependencies (pulumi, pulumi-kubernetes, ...) come from the test environment, not the network.
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv, source


def run(cmd: list[str], cwd: Path) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_library_installs_into_a_fresh_virtualenv_and_imports(fresh_venv, tmp_path):
    venv, source = fresh_venv
    run([str(venv / "bin" / "pip"), "install", "--no-deps", "--quiet", str(source)], tmp_path)
    check = (
        "import ai_storage_platform.settings as p, ai_storage_platform.common.versions as v\n"
        "import ai_storage_platform.backends.metadata_engines.redis_sentinel as r\n"
        "import ai_storage_platform.toolchain.plan_diff, ai_storage_platform.common.sections.validation\n"
        "from ai_storage_platform import Platform, PlatformArgs, TeamWorkspace, TeamWorkspaceArgs, stack_config\n"
        "s = p.load_settings('prod', {})\n"
        "print(s.object_store.backend, v.JUICEFS_CSI.version, r.start_script().split()[0], p.__file__)\n"
    )
    backend, version, shebang, path = run([str(venv / "bin" / "python"), "-c", check], tmp_path).split()
    assert (backend, version) == ("s3", versions.JUICEFS_CSI.version)  # prod's profile, the same pins
    assert shebang == "#!/bin/sh"  # the Sentinel pods' start script ships as package data
    assert str(venv) in path  # imported from the installed copy, profiles included


def test_team_example_installs_from_its_requirements_and_renders_with_the_installed_library(fresh_venv, tmp_path):
    venv, source = fresh_venv
    example = source / "examples" / "team-training"
    # As Pulumi's pip toolchain does: install requirements.txt from the project folder.
    run([str(venv / "bin" / "pip"), "install", "--quiet", "-r", "requirements.txt"], example)
    out = tmp_path / "out"
    # Nothing from the platform's stack: the example works in the namespace the platform vended.
    render = ["-m", "ai_storage_platform", "render", "--stack", "dev", "--project-dir", ".", "--out", str(out)]
    summary = run([str(venv / "bin" / "python"), *render], example)
    assert "vision (ai-storage:team:TeamWorkspace)" in summary
    plan = json.loads((out / "plan.json").read_text())
    assert plan["project"] == "team-training"
    objects = list(yaml.safe_load_all((out / "manifests" / "vision.yaml").read_text()))
    kinds = {o["kind"] for o in objects}
    assert {"PersistentVolumeClaim", "TrainJob", "CronJob"} <= kinds
    for obj in objects:
        assert validate_object(obj, "1.33") == [], obj["kind"]
    assert not (out / "charts.yaml").read_text().strip("[]\n")
