"""The module paths of 0.2.0, kept for one minor version: ``ai_storage_platform.juicefs`` and the other modules
that moved into ``tiers/``, ``protection/``, ``training/``, ``observability/``, ``teams/``, ``settings/`` and
``common/sections`` in 0.3.0 still import (the same module object as the new path, so anything patched or read
through either is one thing) and warn (DeprecationWarning). They go in 0.4.0; the CHANGELOG lists each old path
with its new one. ``training`` was a module and is the package holding it (``training.trainer``): see
``training/__init__.py``."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from types import ModuleType

_ROOT = __package__.rpartition(".")[0]
MOVED = {
    **{
        name: f"tiers.{name}"
        for name in [
            "acceptance",
            "capacity",
            "ceph",
            "ceph_toolbox",
            "decision_records",
            "juicefs",
            "local_nvme",
            "metadata_engine",
            "node_cache",
            "node_storage",
            "object_store",
            "rook_ceph",
            "storage_tiers",
        ]
    },
    **{
        name: f"protection.{name}"
        for name in [
            "checkpoint_offsite",
            "checkpoint_restore",
            "checkpoint_snapshots",
            "checkpoints",
            "metadata_backup",
        ]
    },
    **{
        name: f"training.{name}"
        for name in [
            "fluid",
            "fluid_dataset",
            "job_kinds",
            "job_volumes",
            "jobs",
            "node_pools",
            "staging",
            "training_operator_v1",
            "volcano",
        ]
    },
    **{
        name: f"observability.{name}"
        for name in [
            "alert_rules",
            "alert_settings",
            "dashboards",
            "gpu_metrics",
            "monitoring",
            "protection_alerts",
            "training_alerts",
        ]
    },
    **{
        name: f"teams.{name}"
        for name in [
            "artifacts",
            "namespace_rules",
            "network_policies",
            "quotas",
            "team",
            "team_io",
            "team_spaces",
            "tenants",
            "workspace",
        ]
    },
    **{name: f"settings.{name}" for name in ["design_values", "profiles", "setting_effects", "sources"]},
    "sections": "common.sections",
    "redis_sentinel": "backends.metadata_engines.redis_sentinel",
}
"""0.2.0's module (under ``ai_storage_platform``) -> where it is now (a moved package's modules follow it)."""
REMOVED_IN = "0.4.0"


def new_path(fullname: str) -> str | None:
    """Where the module at an old path is now, or None when the path did not move."""
    if not fullname.startswith(f"{_ROOT}."):
        return None
    old, _, rest = fullname[len(_ROOT) + 1 :].partition(".")
    if old not in MOVED:
        return None
    return ".".join(part for part in (_ROOT, MOVED[old], rest) if part)


class _MovedFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old path and loads it as the module at its new path, with a DeprecationWarning."""

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> importlib.machinery.ModuleSpec:
        if new_path(fullname) is None:
            return None  # type: ignore[return-value]  # not ours: the other finders look
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        new = str(new_path(spec.name))
        warnings.warn(
            f"{spec.name} moved to {new}; the old path goes in {REMOVED_IN}", DeprecationWarning, stacklevel=4
        )
        return importlib.import_module(new)

    def exec_module(self, module: ModuleType) -> None:
        """The module at the new path has run already."""


def install() -> None:
    """Put the finder first on ``sys.meta_path`` (once): an old package's modules must not load a second time
    through the package's new directory."""
    if not any(isinstance(finder, _MovedFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _MovedFinder())
