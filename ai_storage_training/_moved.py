"""The module paths of 0.2.0, kept for one minor version: ``ai_storage_training.commit`` and the other modules that
moved into ``checkpoint/``, ``data/`` and ``doctor/`` in 0.3.0 still import (the same module object as the new
path, so anything patched or read through either is one thing) and warn (DeprecationWarning). They go in 0.4.0;
the CHANGELOG lists each old path with its new one."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from types import ModuleType

MOVED = {
    "async_save": "checkpoint.async_save",
    "checkpoints": "checkpoint.manager",
    "commit": "checkpoint.commit",
    "dcp": "checkpoint.dcp",
    "lag": "checkpoint.lag",
    "layout": "checkpoint.layout",
    "promotion": "checkpoint.promotion",
    "ranks": "checkpoint.ranks",
    "restore_test": "checkpoint.restore_test",
    "store": "checkpoint.store",
    "datasets": "data.datasets",
    "manifest": "data.manifest",
    "pack": "data.pack",
    "reader": "data.reader",
    "stage": "data.stage",
    "doctor_checkpoints": "doctor.checkpoints",
    "doctor_fio": "doctor.fio",
    "doctor_juicefs": "doctor.juicefs",
    "doctor_reads": "doctor.reads",
    "doctor_report": "doctor.report",
    "doctor_timing": "doctor.timing",
    "thresholds": "doctor.thresholds",
}
"""0.2.0's module (under ``ai_storage_training``) -> where it is now. ``doctor`` was a module and is the package
holding it (``doctor.command``): the package exports what the module did."""
REMOVED_IN = "0.4.0"


class _MovedFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old path and loads it as the module at its new path, with a DeprecationWarning."""

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> importlib.machinery.ModuleSpec:
        package, _, name = fullname.rpartition(".")
        if package != __package__ or name not in MOVED:
            return None  # type: ignore[return-value]  # not ours: the other finders look
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        old = spec.name.rpartition(".")[2]
        new = f"{__package__}.{MOVED[old]}"
        warnings.warn(
            f"{spec.name} moved to {new}; the old path goes in {REMOVED_IN}", DeprecationWarning, stacklevel=4
        )
        return importlib.import_module(new)

    def exec_module(self, module: ModuleType) -> None:
        """The module at the new path has run already."""


def install() -> None:
    """Put the finder on ``sys.meta_path`` (once)."""
    if not any(isinstance(finder, _MovedFinder) for finder in sys.meta_path):
        sys.meta_path.append(_MovedFinder())
