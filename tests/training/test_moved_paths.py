"""The 0.2.0 module paths of the training library (moved into checkpoint/, data/ and doctor/ in 0.3.0) still
import, as the very module at the new path, and warn that they go in 0.4.0; the layout is one the reader can find:
every subpackage says what it is for and which module to read first."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import ai_storage_training
from ai_storage_training import _moved

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("old", "new"), sorted(_moved.MOVED.items()))
def test_an_old_module_path_is_the_new_module_and_warns(old, new, monkeypatch):
    monkeypatch.delitem(sys.modules, f"ai_storage_training.{old}", raising=False)
    with pytest.warns(DeprecationWarning, match=rf"ai_storage_training\.{old} moved to ai_storage_training\.{new};"):
        module = importlib.import_module(f"ai_storage_training.{old}")
    assert module is importlib.import_module(f"ai_storage_training.{new}")


def test_the_old_imports_the_docs_showed_work_in_a_fresh_process():
    script = """
import warnings
warnings.simplefilter("error", DeprecationWarning)
from ai_storage_training import CheckpointManager, PrefetchingReader, metrics  # unchanged: no warning
warnings.simplefilter("default", DeprecationWarning)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    from ai_storage_training import promotion, layout
    from ai_storage_training.async_save import AsyncCheckpointer
    from ai_storage_training.manifest import DIR_VARIABLE
    from ai_storage_training.datasets import ShardDataset
    from ai_storage_training.dcp import ManagedWriter
    import ai_storage_training.pack
    from ai_storage_training.doctor import diagnose
assert promotion.__name__ == "ai_storage_training.checkpoint.promotion", promotion.__name__
assert AsyncCheckpointer.__module__ == "ai_storage_training.checkpoint.async_save"
assert ai_storage_training.pack.pack.__module__ == "ai_storage_training.data.pack"
print(sorted({str(w.message).split(" moved")[0] for w in caught}))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(
        sorted(
            f"ai_storage_training.{n}"
            for n in ("async_save", "dcp", "datasets", "layout", "manifest", "pack", "promotion")
        )
    )


@pytest.mark.parametrize("package", ["checkpoint", "data", "doctor"])
def test_every_subpackage_says_what_it_is_for_and_which_module_to_read_first(package):
    module = importlib.import_module(f"ai_storage_training.{package}")
    assert module.__doc__ and "first" in module.__doc__
    first = module.__doc__.split("first")[0].rsplit("``", 2)[-2]  # the module named just before "first"
    assert (ROOT / "ai_storage_training" / package / first).is_file(), first


def test_the_public_names_import_from_the_package_itself():
    for name in ai_storage_training.__all__:
        assert getattr(ai_storage_training, name).__module__.startswith("ai_storage_training.")
