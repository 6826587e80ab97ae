"""JuiceFS: the CSI driver release, the volume Secret and the cold tier's StorageClass."""

import pulumi

from components.backends.object_stores.bucket import ScopedAccess
from components.common import versions
from components.platform import expirations
from components.protection.metadata_backup import BackupSettings, backup_destination
from components.settings import PlatformSettings
from components.tiers import juicefs
from components.tiers.juicefs import CacheSettings, JuiceFS, JuiceFSArgs, JuiceFSSettings, JuiceFSSource
from components.tiers.object_store import ObjectStore, ObjectStoreArgs, ObjectStoreSettings
from components.tiers.storage_tiers import StorageTiers, StorageTiersArgs, TiersSettings
from tests.conftest import by_name

MINIO_BUCKET = "http://minio.object-store.svc.cluster.local:9000/ai-datasets-dev"
VOLUME = JuiceFSSource("ai-datasets", "redis://meta", "minio", MINIO_BUCKET, "ak", "sk")
COLD_ONLY = TiersSettings(hot="none", warm="none", checkpoint="none", block="none")


def backup_keys() -> ScopedAccess:
    """What the platform's metadata backup uploads with: keys of its own prefix."""
    return ScopedAccess("meta-backups/", pulumi.Output.secret("bak"), pulumi.Output.secret("bsk"), None)


def juicefs_with_cold_tier(**settings: object) -> JuiceFS:
    built = JuiceFS("juicefs", JuiceFSArgs(JuiceFSSettings.model_validate(settings), VOLUME, backup_keys()))
    StorageTiers("tiers", StorageTiersArgs(COLD_ONLY, {"juicefs": built}))
    return built


def object_store_expiring_backups(backup: BackupSettings, **store: object) -> ObjectStore:
    """The bucket with the expiries the platform derives from the JuiceFS backup settings."""
    platform = PlatformSettings(juicefs=JuiceFSSettings(metadata_backup=backup))
    args = ObjectStoreArgs(ObjectStoreSettings.model_validate(store), expirations=expirations(platform))
    return ObjectStore("store", args)


def test_chart_creates_csidriver_without_hooks_and_needs_no_cert_manager(build):
    result, _ = build(juicefs_with_cold_tier)
    (chart,) = result.charts
    assert (chart["chart"], chart["version"]) == (versions.JUICEFS_CSI.chart, versions.JUICEFS_CSI.version)
    assert chart["values"]["csidriver"]["disableHooks"] is True
    assert chart["values"]["webhook"]["certManager"]["enabled"] is False
    assert chart["values"]["mountMode"] == "mountpod"


def test_volume_secret_has_every_field_and_each_is_secret(build):
    result, _ = build(juicefs_with_cold_tier)
    secret = by_name(result, "Secret", "juicefs-volume")
    assert secret["stringData"] == {
        k: "[secret]" for k in ("name", "metaurl", "storage", "bucket", "access-key", "secret-key")
    }


def test_cold_class_is_rwx_retained_with_cache_mount_options(build):
    result, _ = build(lambda: juicefs_with_cold_tier(cache={"cacheSizeMib": 4096, "prefetch": 5}))
    sc = by_name(result, "StorageClass", "cold")
    assert sc["provisioner"] == "csi.juicefs.com"
    assert sc["reclaimPolicy"] == "Retain"
    assert sc["metadata"]["annotations"]["ai-storage-platform/access-mode"] == "ReadWriteMany"
    assert "cache-size=4096" in sc["mountOptions"] and "prefetch=5" in sc["mountOptions"]
    assert "parameters" in sc and "juicefs/mount-options" not in sc["parameters"]
    assert sc["parameters"]["csi.storage.k8s.io/node-publish-secret-name"] == "juicefs-volume"


def test_mount_options_carry_every_cache_setting():
    options = juicefs.mount_options(CacheSettings(writeback=True, extra_mount_options=["no-bgjob"]))
    names = [o.split("=")[0] for o in options]
    assert names == [
        "cache-dir",
        "cache-size",
        "free-space-ratio",
        "buffer-size",
        "prefetch",
        "max-uploads",
        "max-downloads",
        "open-cache",
        "attr-cache",
        "entry-cache",
        "max-fuse-io",
        "verify-cache-checksum",
        "writeback",
        "no-bgjob",
    ]


def test_mount_pods_run_the_pinned_client():
    assert juicefs.chart_values()["defaultMountImage"]["ce"] == versions.JUICEFS_IMAGE


def test_metadata_backup_cronjob_dumps_to_the_object_store(build):
    schedule = {"schedule": "0 3 * * *", "retentionDays": 9}
    result, _ = build(lambda: juicefs_with_cold_tier(metadataBackup=schedule))
    cron = by_name(result, "CronJob", "juicefs-metadata-backup")
    assert cron["spec"]["schedule"] == "0 3 * * *"
    container = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e for e in container["env"]}
    assert (
        env["DESTINATION"]["value"] == "minio://minio.object-store.svc.cluster.local:9000/ai-datasets-dev/meta-backups/"
    )
    assert "METAURL" not in env  # credentials are files from the volume Secret, not environment variables
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["volumes"]}
    assert volumes[mounts[env["SECRETS"]["value"]]]["secret"]["secretName"] == "juicefs-volume"
    assert "juicefs dump" in container["command"][2] and "juicefs sync --no-https" in container["command"][2]


def test_backup_retention_expires_old_dumps_in_the_minio_bucket(build):
    backup = BackupSettings(retention_days=9)
    result, _ = build(lambda: object_store_expiring_backups(backup, bucket="ai-datasets-dev"))
    job = by_name(result, "Job", "minio-bucket-ai-datasets-dev")
    lifecycle = {e["name"]: e.get("value") for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert '"Expiration": {"Days": 9}' in lifecycle["LIFECYCLE"] and "meta-backups/" in lifecycle["LIFECYCLE"]


def test_backup_retention_is_an_s3_lifecycle_rule(build):
    _, monitor = build(lambda: object_store_expiring_backups(BackupSettings(), backend="s3"))
    rules = next(r.inputs["rules"] for r in monitor.registrations if r.type.endswith("BucketLifecycleConfiguration"))
    assert {
        "id": "expire-meta-backups",
        "status": "Enabled",
        "filter": {"prefix": "meta-backups/"},
        "expiration": {"days": 14},
    } in rules


def test_backup_destination_for_each_backend():
    assert backup_destination("s3", "https://b.s3.eu-west-1.amazonaws.com") == (
        "s3://b.s3.eu-west-1.amazonaws.com/meta-backups/",
        [],
    )
    assert backup_destination("minio", "http://m:9000/b") == ("minio://m:9000/b/meta-backups/", ["--no-https"])
