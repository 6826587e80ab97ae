"""The training library installs ALONE into a bare virtualenv (no Pulumi, no platform components) from its own
pyproject.toml, and a job saves, is stopped, and resumes there. Marked ``packaging`` (a fresh virtualenv)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from importlib.metadata import distribution
from pathlib import Path

import pytest

from components.toolchain.render import ROOT
from tests.training.conftest import beyond_progress

pytestmark = pytest.mark.packaging

TRAIN = """
import sys
from pathlib import Path
from ai_storage_training import CheckpointManager, PrefetchingReader, metrics

data, run, steps = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
manager = CheckpointManager(run, keep=2)
with manager.load() as checkpoint:
    start = checkpoint.step + 1 if checkpoint else 0
    seen = int((checkpoint.path / "seen").read_text()) if checkpoint else 0
for step, (path, blob) in zip(range(start, start + steps), PrefetchingReader(sorted(data.iterdir()), depth=2)):
    seen += len(blob)
    manager.save(step, lambda d: (d / "seen").write_text(str(seen)))
print(start, seen, [c.step for c in manager.checkpoints()])
"""


def run(cmd: list[str], cwd: Path) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=cwd)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_the_training_library_installs_alone_and_a_job_resumes_from_its_checkpoint(tmp_path):
    source = tmp_path / "src" / "ai_storage_training"
    shutil.copytree(
        ROOT / "ai_storage_training", source, ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info")
    )
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    site = next((venv / "lib").glob("python3*/site-packages"))
    # Its dependencies, prometheus_client and crc32c, come from the test environment (alone, not the whole
    # environment; their package folders, not their console scripts under ../): pip finds them installed and
    # installs nothing else.
    deps = tmp_path / "deps"
    deps.mkdir()
    for dependency in ("prometheus_client", "crc32c"):
        installed = distribution(dependency)
        for entry in {Path(str(f)).parts[0] for f in installed.files or []}:
            if entry != ".." and not entry.endswith(".pth") and Path(str(installed.locate_file(entry))).exists():
                (deps / entry).symlink_to(installed.locate_file(entry))
    (site / "deps.pth").write_text(f"{deps}\n")
    python, pip = str(venv / "bin" / "python"), str(venv / "bin" / "pip")
    run([pip, "install", "--quiet", str(source)], tmp_path)

    isolated = "import importlib.util as u; print([m for m in ('pulumi', 'components', 'pydantic') if u.find_spec(m)])"
    assert run([python, "-c", isolated], tmp_path).strip() == "[]"  # nothing of the platform is there
    where = run([python, "-c", "import ai_storage_training as t; print(t.__file__)"], tmp_path).strip()
    assert where.startswith(str(site))

    data = tmp_path / "data"
    data.mkdir()
    for i in range(10):
        (data / f"sample-{i}.bin").write_bytes(bytes(100 + i))
    train = tmp_path / "train.py"
    train.write_text(TRAIN)
    first = run([python, str(train), str(data), str(tmp_path / "run"), "4"], tmp_path).strip().split(maxsplit=2)
    assert first == ["0", str(sum(range(100, 104))), "[2, 3]"]
    resumed = run([python, str(train), str(data), str(tmp_path / "run"), "3"], tmp_path).strip().split(maxsplit=2)
    assert resumed == ["4", str(sum(range(100, 104)) + sum(range(100, 103))), "[5, 6]"]  # from step 4, state kept

    doctor = [python, "-m", "ai_storage_training", "doctor", str(data), "--no-fio", "--checkpoint-mib", "1"]
    proc = subprocess.run(doctor, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    # 100-byte files read slowly: a critical verdict (exit 1) is a fair report here; a crash (traceback) is not.
    said = beyond_progress(proc.stderr)
    assert proc.returncode in (0, 1) and "checkpoint restore" in proc.stdout and not said, proc.stderr  # progress only
