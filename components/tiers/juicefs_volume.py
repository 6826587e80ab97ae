"""The JuiceFS tier backend: how the Platform builds it (the metadata engine, the volume's scoped access to the
object store, the CSI driver) and what holds its data (the object store)."""

from __future__ import annotations

from typing import Any

import pulumi

from ..common.kube import quantity_bytes
from ..protection.metadata_backup import BACKUP_ACCOUNT, BACKUP_PREFIX
from .backend import BuildContext, Group, Registration, Tier
from .ceph import held_on_ceph
from .juicefs import CHART_ACCOUNTS, MOUNT_ACCOUNT, JuiceFS, JuiceFSArgs, JuiceFSSource
from .metadata_engine import MetadataEngine, MetadataEngineArgs, previous_engine, previous_flavor
from .object_store import ObjectStore, ScopedAccess


def _build(ctx: BuildContext) -> JuiceFS:
    """The metadata engine, the volume on the object store and the JuiceFS CSI driver; the engine and the volume
    are left in ``ctx.shared`` (``metadata``, ``juicefs_source``, ``juicefs``) for the parts that use them."""
    s, child = ctx.settings, pulumi.ResourceOptions(parent=ctx.parent)
    m = s.monitoring
    outputs = pulumi.Output.from_input(ctx.previous_outputs)
    engine = outputs.apply(lambda o: previous_engine(o or {}))
    flavor = outputs.apply(lambda o: previous_flavor(o or {}))
    exporter = m.exporter_resources if m.enabled else None
    protect = s.cluster.protect_stateful_resources
    metadata = MetadataEngine(
        f"{ctx.name}-metadata", MetadataEngineArgs(s.metadata, protect, engine, flavor, exporter), child
    )
    store = ctx.object_store
    volume = _volume_access(s, store)
    source = JuiceFSSource(
        s.juicefs.volume_name,
        metadata.url,
        store.storage_type,
        store.bucket_url,
        volume.access_key,
        volume.secret_key,
        metadata.client_env,
        volume.role_arn,
    )
    backup = None
    if s.juicefs.metadata_backup.enabled:
        account = (s.juicefs.namespace, BACKUP_ACCOUNT)
        backup = store.scoped_access("metadata-backup", BACKUP_PREFIX, account)
    juicefs = JuiceFS(f"{ctx.name}-juicefs", JuiceFSArgs(s.juicefs, source, backup, s.node_storage.specs()), child)
    ctx.shared.update(metadata=metadata, juicefs_source=source, juicefs=juicefs)
    return juicefs


def _volume_access(s: Any, store: ObjectStore) -> ScopedAccess:
    """The JuiceFS volume's access: only its data prefix (`juicefs format` stores a volume under
    `<volume name>/`); with IAM roles, a role for the mount pods and the CSI controller and node."""
    ns = s.juicefs.namespace
    trusted = [(ns, account) for account in CHART_ACCOUNTS.values()]
    for extra in s.object_store.s3.service_accounts:  # `namespace:name`
        namespace, account = extra.split(":", 1)
        if (namespace, account) not in trusted:
            trusted.append((namespace, account))
    volume = s.juicefs.volume_name
    return store.scoped_access("juicefs-volume", f"{volume}/", (ns, MOUNT_ACCOUNT), also_trusted=trusted)


def _held(settings: Any, tier: Tier) -> Group:
    """The object store under the volume: Ceph RGW's pools on the warm tier's OSDs, MinIO its volume, S3 no bound."""
    store = settings.object_store.backend
    if store == "ceph-rgw":
        return held_on_ceph(settings, "warm")
    if store == "minio":
        size = settings.object_store.minio.storage_size
        return Group("MinIO", float(quantity_bytes(size)), f"its volume, {size}", "objectStore.minio.storageSize")
    return Group(f"object store ({store})", None, "no bound", "objectStore.backend")


def _node_local(settings: Any) -> bool:
    """when its cache is on the node cache volume (`localNvme.cacheVolume.enabled`)"""
    nvme = settings.local_nvme
    return bool(nvme.enabled and nvme.cache_volume.enabled)


JUICEFS = Registration(
    "juicefs",
    "juicefs",
    ("hot", "warm", "cold", "checkpoint"),
    _build,
    _held,
    after_object_store=True,
    node_local=_node_local,
)
"""Object-backed POSIX (RWX) with a local cache, built after the object store it keeps its data in."""
