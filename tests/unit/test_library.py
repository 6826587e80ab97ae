"""The component library installs with pip and imports under its own name."""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig

from components.render import ROOT


def test_library_installs_into_a_fresh_virtualenv_and_imports(tmp_path):
    source = tmp_path / "src"
    source.mkdir()
    for name in ("components", "stacks"):
        shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    site = next((venv / "lib").glob("python3*/site-packages"))
    # The dependencies (pulumi, pulumi-kubernetes, ...) come from the test environment, not the network.
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    install = subprocess.run(
        [str(venv / "bin" / "pip"), "install", "--no-deps", "--quiet", str(source)],
        capture_output=True, text=True, timeout=300,
    )
    assert install.returncode == 0, install.stderr
    check = (
        "import ai_storage_platform.platform as p, ai_storage_platform.versions as v\n"
        "s = p.load_settings('prod', {})\n"
        "print(s.object_store.backend, v.JUICEFS_CSI.version, p.__file__)\n"
    )
    proc = subprocess.run(
        [str(venv / "bin" / "python"), "-c", check], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    backend, version, path = proc.stdout.split()
    assert (backend, version) == ("s3", "0.32.4")
    assert str(venv) in path  # imported from the installed copy, profiles included
