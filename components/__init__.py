"""ai-storage-platform's component library, installed as ``ai_storage_platform``.

Layout, from the top down (``lint-imports`` checks the contract in pyproject.toml):

- ``toolchain/``: the offline renderer, mock engine, plan diff and command line (``python -m components``);
  it imports the components, nothing here imports it.
- ``platform``: the Platform component, the whole stack; ``settings/``: the stack settings tree (with the
  profiles, upstream sources, the design's values and what each setting does to data).
- ``teams/``: many teams on one platform (the tenants, their quotas, keys and team stacks).
- ``observability/``: monitoring, alert rules and levels, dashboards, GPU metrics.
- ``training/``: Kubeflow Trainer, Volcano, the job specs, Fluid datasets.
- ``tiers/``: the storage tiers and what serves them (Rook-Ceph, TopoLVM, JuiceFS, the object store).
- ``protection/``: checkpoint protection, restore tests, metadata backups.
- ``backends/``: what the components run on: ``object_stores`` (MinIO, S3, Ceph RGW) and
  ``metadata_engines`` (Redis, Sentinel, ElastiCache).
- ``common/``: Kubernetes building blocks, every pinned chart version and image, the settings machinery
  (``sections``) and the 0.2.0 module paths kept until 0.4.0 (``moved``).

Each package lists what to read first. The names below are importable from the package itself
(``from ai_storage_platform import Platform``); each loads its module on first use, so importing the package
alone stays cheap.
"""

from __future__ import annotations

import ast
import importlib
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .common import moved

moved.install()

# The exports, declared once: type checkers read this block, ``__getattr__`` loads each name from its module on
# first use (``_exports`` reads the block).
if TYPE_CHECKING:
    from .backends.metadata_engines.elasticache import ElastiCacheSettings
    from .backends.metadata_engines.redis import RedisSettings
    from .backends.metadata_engines.redis_sentinel import SentinelSettings
    from .backends.object_stores.minio import MinioSettings
    from .backends.object_stores.s3 import S3Settings
    from .common.sections import Problem, SettingsError
    from .observability.monitoring import Monitoring, MonitoringArgs, MonitoringSettings
    from .platform import Platform, PlatformArgs
    from .settings import PlatformSettings, load_profile, load_settings, stack_config
    from .teams.network_policies import NetworkPolicies, NetworkPoliciesArgs, NetworkPolicySettings
    from .teams.team import TeamSettings, TeamWorkspace, TeamWorkspaceArgs, load_team_settings
    from .teams.tenants import Teams, TeamsArgs, TeamsSettings
    from .tiers.acceptance import AcceptanceSettings, StorageAcceptance, StorageAcceptanceArgs
    from .tiers.ceph import RookCephSettings
    from .tiers.juicefs import JuiceFS, JuiceFSArgs, JuiceFSSettings, JuiceFSSource
    from .tiers.local_nvme import DeviceClassSettings, LocalNVMe, LocalNVMeArgs, LocalNVMeSettings
    from .tiers.metadata_engine import MetadataEngine, MetadataEngineArgs, MetadataSettings
    from .tiers.object_store import ObjectStore, ObjectStoreArgs, ObjectStoreSettings
    from .tiers.rook_ceph import RookCeph, RookCephArgs
    from .tiers.storage_tiers import StorageTiers, StorageTiersArgs, TiersSettings
    from .training.fluid import BucketSource, Fluid, FluidArgs, FluidSettings
    from .training.fluid_dataset import DatasetSettings
    from .training.trainer import RuntimeSettings, Training, TrainingArgs, TrainingSettings
    from .training.volcano import QueueSettings, Volcano, VolcanoArgs, VolcanoSettings


@cache
def _exports() -> dict[str, str]:
    """Each exported name -> its module (relative), read from the ``TYPE_CHECKING`` block above."""
    tree = ast.parse(Path(__file__).read_text())
    block = next(node for node in tree.body if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING")
    imports = [node for node in block.body if isinstance(node, ast.ImportFrom)]
    return {alias.name: "." * node.level + str(node.module) for node in imports for alias in node.names}


def __getattr__(name: str) -> Any:
    """Load an exported name from its module on first use (``__all__``: every exported name)."""
    if name == "__all__":
        return sorted(_exports())
    module = _exports().get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_exports()})
