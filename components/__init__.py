"""ai-storage-platform's component library, installed as ``ai_storage_platform``.

Layout, from the top down (``lint-imports`` checks the contract in pyproject.toml):

- ``toolchain/``: the offline renderer, mock engine, plan diff and command line (``python -m components``);
  it imports the components, nothing here imports it.
- the modules at this level: one Pulumi component per system (``platform``, ``team``, ``tenants``,
  ``object_store``, ``metadata_engine``, ``juicefs``, ...) and ``settings``, the stack settings tree.
- ``backends/``: what the components run on: ``object_stores`` (MinIO, S3, Ceph RGW) and
  ``metadata_engines`` (Redis, Sentinel, ElastiCache).
- ``common/``: Kubernetes building blocks and every pinned chart version and image.
- ``sections/``: the settings machinery (base section, field types, problems, validation, reference).

The names below are importable from the package itself (``from ai_storage_platform import Platform``); each
loads its module on first use, so importing the package alone stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# The exports, for type checkers; each loads lazily (``__getattr__``). tests/unit/test_package.py checks that
# this block and _EXPORTS name the same things.
if TYPE_CHECKING:
    from .acceptance import AcceptanceSettings, StorageAcceptance, StorageAcceptanceArgs  # noqa: F401
    from .backends.metadata_engines.elasticache import ElastiCacheSettings  # noqa: F401
    from .backends.metadata_engines.redis import RedisSettings  # noqa: F401
    from .backends.metadata_engines.redis_sentinel import SentinelSettings  # noqa: F401
    from .backends.object_stores.minio import MinioSettings  # noqa: F401
    from .backends.object_stores.s3 import S3Settings  # noqa: F401
    from .ceph import RookCephSettings  # noqa: F401
    from .fluid import BucketSource, Fluid, FluidArgs, FluidSettings  # noqa: F401
    from .fluid_dataset import DatasetSettings  # noqa: F401
    from .juicefs import JuiceFS, JuiceFSArgs, JuiceFSSettings, JuiceFSSource  # noqa: F401
    from .local_nvme import DeviceClassSettings, LocalNVMe, LocalNVMeArgs, LocalNVMeSettings  # noqa: F401
    from .metadata_engine import MetadataEngine, MetadataEngineArgs, MetadataSettings  # noqa: F401
    from .monitoring import Monitoring, MonitoringArgs, MonitoringSettings  # noqa: F401
    from .network_policies import NetworkPolicies, NetworkPoliciesArgs, NetworkPolicySettings  # noqa: F401
    from .object_store import ObjectStore, ObjectStoreArgs, ObjectStoreSettings  # noqa: F401
    from .platform import Platform, PlatformArgs  # noqa: F401
    from .rook_ceph import RookCeph, RookCephArgs  # noqa: F401
    from .sections import Problem, SettingsError  # noqa: F401
    from .settings import PlatformSettings, load_profile, load_settings, stack_config  # noqa: F401
    from .storage_tiers import StorageTiers, StorageTiersArgs, TiersSettings  # noqa: F401
    from .team import TeamSettings, TeamWorkspace, TeamWorkspaceArgs, load_team_settings  # noqa: F401
    from .tenants import Teams, TeamsArgs, TeamsSettings  # noqa: F401
    from .training import RuntimeSettings, Training, TrainingArgs, TrainingSettings  # noqa: F401
    from .volcano import QueueSettings, Volcano, VolcanoArgs, VolcanoSettings  # noqa: F401

_EXPORTS = {
    "platform": ("Platform", "PlatformArgs"),
    "settings": ("PlatformSettings", "load_profile", "load_settings", "stack_config"),
    "team": ("TeamSettings", "TeamWorkspace", "TeamWorkspaceArgs", "load_team_settings"),
    "tenants": ("Teams", "TeamsArgs", "TeamsSettings"),
    "object_store": ("ObjectStore", "ObjectStoreArgs", "ObjectStoreSettings"),
    "metadata_engine": ("MetadataEngine", "MetadataEngineArgs", "MetadataSettings"),
    "juicefs": ("JuiceFS", "JuiceFSArgs", "JuiceFSSettings", "JuiceFSSource"),
    "rook_ceph": ("RookCeph", "RookCephArgs"),
    "ceph": ("RookCephSettings",),
    "local_nvme": ("DeviceClassSettings", "LocalNVMe", "LocalNVMeArgs", "LocalNVMeSettings"),
    "storage_tiers": ("StorageTiers", "StorageTiersArgs", "TiersSettings"),
    "fluid": ("BucketSource", "Fluid", "FluidArgs", "FluidSettings"),
    "fluid_dataset": ("DatasetSettings",),
    "volcano": ("QueueSettings", "Volcano", "VolcanoArgs", "VolcanoSettings"),
    "training": ("RuntimeSettings", "Training", "TrainingArgs", "TrainingSettings"),
    "monitoring": ("Monitoring", "MonitoringArgs", "MonitoringSettings"),
    "network_policies": ("NetworkPolicies", "NetworkPoliciesArgs", "NetworkPolicySettings"),
    "acceptance": ("AcceptanceSettings", "StorageAcceptance", "StorageAcceptanceArgs"),
    "backends.object_stores.minio": ("MinioSettings",),
    "backends.object_stores.s3": ("S3Settings",),
    "backends.metadata_engines.redis": ("RedisSettings",),
    "backends.metadata_engines.redis_sentinel": ("SentinelSettings",),
    "backends.metadata_engines.elasticache": ("ElastiCacheSettings",),
    "sections": ("Problem", "SettingsError"),
}
"""The module of each name the package exports."""
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = sorted(_MODULE_OF)


def __getattr__(name: str) -> Any:
    """Load an exported name from its module on first use."""
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
