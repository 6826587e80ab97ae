"""JuiceFS: the JuiceFS CSI driver, the volume Secret, and the cold tier's mount options.

The chart is a Helm release (not ``helm.v4.Chart``, which skips hook resources) with
``csidriver.disableHooks`` on, so the CSIDriver is an ordinary release object that upgrades never delete.
Mount options go in the StorageClass ``mountOptions`` list: the driver has no mount-options parameter.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import pulumi
import pulumi_kubernetes as k8s
from pydantic import Field

from ..backends.object_stores.bucket import ROLE_ANNOTATION, ScopedAccess, role_account
from ..common import kube, versions
from ..common.sections import DnsLabel, Section
from ..protection import metadata_backup as backup
from ..protection.metadata_backup import BackupSettings
from .backend import Tier, TierClass
from .node_cache import CACHE_PATH
from .node_storage import default_tolerations, with_node_tolerations

DRIVER = "csi.juicefs.com"
SECRET_NAME = "juicefs-volume"
CLIENT_ENV_SECRET = "juicefs-client-env"
"""Secret with one key per variable of the client's environment (for the backup, which is no CSI client)."""
BACKUP_KEYS_SECRET = "juicefs-metadata-backup-keys"
"""The metadata backup's keys (they reach only the backup prefix)."""
MOUNT_ACCOUNT_PARAMETER = "juicefs/mount-service-account"
"""StorageClass parameter (or PV volume attribute) naming the mount pods' ServiceAccount."""
MOUNT_ACCOUNT = "juicefs-mount"
"""ServiceAccount of the mount pods with IAM roles for service accounts (it carries the volume's role)."""
CHART_ACCOUNTS = {"controller": "juicefs-csi-controller-sa", "node": "juicefs-csi-node-sa"}
"""The chart's ServiceAccounts (its `serviceAccount.<part>.name` defaults)."""


class CacheSettings(Section):
    """The JuiceFS client cache on each node (mount options of the cold tier)."""

    cache_dir: str = Field(f"{CACHE_PATH}/juicefs", pattern=r"^/[^,\s]*$")
    """Node directory of the local block cache: on the node cache volume (`localNvme.cacheVolume`, the node's
    NVMe); `a:b` spreads it over several directories."""
    cache_size_mib: int = Field(102400, ge=0, le=100 * 1024 * 1024)
    """Local cache capacity in MiB."""
    free_space_ratio: float = Field(0.1, ge=0.0, lt=1.0)
    """Share of the cache disk JuiceFS keeps free."""
    buffer_size_mib: int = Field(1024, ge=32, le=65536)
    """Read/write buffer in MiB; bounds read-ahead and prefetch."""
    prefetch: int = Field(3, ge=0, le=64)
    """Blocks fetched concurrently ahead of a sequential reader."""
    max_uploads: int = Field(20, ge=1, le=512)
    """Concurrent uploads to the object store."""
    max_downloads: int = Field(200, ge=1, le=1024)
    """Concurrent downloads from the object store."""
    max_fuse_io: Literal["128K", "256K", "512K", "1M"] = "1M"
    """Largest FUSE request; 1M moves 1 MiB per request once the mount's kernel read-ahead is >= 1 MiB."""
    fuse_read_ahead_kib: int = Field(4096, ge=0, le=262144)
    """Kernel read-ahead of each JuiceFS FUSE mount in KiB, set by the mount pod once mounted (0 keeps the kernel's
    128 KiB); with `maxFuseIo: 1M`, 1024 or more makes FUSE reads 1 MiB."""
    verify_cache_checksum: Literal["none", "full", "shrink", "extend"] = "shrink"
    """How cached blocks are checked on read: `shrink` checks the part of the block each read covers (a flipped
    byte is caught and re-fetched; warm reads as fast as `none`), `extend` widens each check (slower), `full`
    checks whole-block reads only and `none` nothing (both miss the flipped byte). See docs/datapath.md."""
    writeback: bool = False
    """Upload asynchronously from the local cache (faster writes, data at risk until uploaded)."""
    open_cache_seconds: int = Field(0, ge=0, le=86400)
    """Seconds open files keep cached metadata (read-mostly datasets benefit)."""
    attr_cache_seconds: int = Field(1, ge=0, le=86400)
    """Seconds file attributes are cached by the kernel."""
    entry_cache_seconds: int = Field(1, ge=0, le=86400)
    """Seconds file entries are cached by the kernel."""
    extra_mount_options: list[str] = []
    """Further `juicefs mount` options, each `name` or `name=value` without the leading `--`."""


class JuiceFSSettings(Section):
    """The JuiceFS CSI driver and the platform's JuiceFS volume."""

    enabled: bool = True
    """Install the JuiceFS CSI driver and serve the tiers mapped to `juicefs`."""
    namespace: DnsLabel = "juicefs-csi"
    """Namespace of the CSI driver and the volume Secret."""
    volume_name: DnsLabel = "ai-datasets"
    """JuiceFS file system name (`juicefs format` name)."""
    cache: CacheSettings = CacheSettings()
    """Client cache and transfer tuning."""
    metadata_backup: BackupSettings = BackupSettings()
    """Scheduled metadata dumps to the object store."""


def mount_options(cache: CacheSettings) -> list[str]:
    """The cold tier's mount options: the mount pod runs ``mount.juicefs META PATH -o <options>``, which turns
    each entry that is a client flag into ``--<entry>`` and hands the rest to FUSE."""
    options = [
        f"cache-dir={cache.cache_dir}",
        f"cache-size={cache.cache_size_mib}",
        f"free-space-ratio={cache.free_space_ratio}",
        f"buffer-size={cache.buffer_size_mib}",
        f"prefetch={cache.prefetch}",
        f"max-uploads={cache.max_uploads}",
        f"max-downloads={cache.max_downloads}",
        f"open-cache={cache.open_cache_seconds}",
        f"attr-cache={cache.attr_cache_seconds}",
        f"entry-cache={cache.entry_cache_seconds}",
        f"max-fuse-io={cache.max_fuse_io}",
        f"verify-cache-checksum={cache.verify_cache_checksum}",
    ]
    if cache.writeback:
        options.append("writeback")
    return options + list(cache.extra_mount_options)


def read_ahead_script(kib: int) -> str:
    """Shell that raises the kernel read-ahead of the FUSE mount at ${MOUNT_POINT} (the CSI driver fills it in)
    to ``kib``: it waits for the mount to appear in /proc/self/mountinfo, writes its bdi's read_ahead_kb (mount
    pods are privileged), and always exits 0 (a failing postStart would kill the mount pod)."""
    return "\n".join(
        [
            "mp='${MOUNT_POINT}'",
            "i=0",
            'while [ "$i" -lt 120 ]; do',
            "  while read -r _ _ dev _ point _; do",
            '    if [ "$point" = "$mp" ] && [ -w "/sys/class/bdi/$dev/read_ahead_kb" ]; then',
            f'      echo {kib} > "/sys/class/bdi/$dev/read_ahead_kb" && echo "read_ahead_kb of $mp ($dev): {kib}"',
            "      exit 0",
            "    fi",
            "  done < /proc/self/mountinfo",
            "  i=$((i + 1)); sleep 1",
            "done",
            'echo "read_ahead_kb of $mp not set: the mount did not appear"',
            "exit 0",
            "",
        ]
    )


def mount_pod_patch(cache: CacheSettings) -> list[dict[str, Any]]:
    """The driver's global mount pod patch (every mount pod): a postStart hook that raises the FUSE mount's
    read-ahead. A patched lifecycle replaces the driver's own, which sets no postStart in mountpod mode and no
    preStop for mount images that pass the FUSE fd on smooth upgrades (as the pinned one does)."""
    if not cache.fuse_read_ahead_kib:
        return []
    command = ["sh", "-c", read_ahead_script(cache.fuse_read_ahead_kib)]
    return [{"lifecycle": {"postStart": {"exec": {"command": command}}}}]


def chart_values(
    cache: CacheSettings | None = None,
    role_arn: pulumi.Input[str] | None = None,
    tolerations: Sequence[dict[str, Any]] = (),
) -> dict[str, object]:
    """Helm values of the juicefs-csi-driver release; with ``role_arn`` (IAM roles for service accounts) the
    controller's and node's ServiceAccounts carry the volume's role (the controller mounts the volume to make
    and remove a claim's directory); the node plugin tolerates ``tolerations`` (``nodeStorage``)."""
    values: dict[str, Any] = {
        "mountMode": "mountpod",
        "csidriver": {"disableHooks": True},
        # The admission webhook only exists in sidecar mode; keep cert-manager out of a mountpod install.
        "webhook": {"certManager": {"enabled": False}},
        # Mount pods run the client version the data-path tests prove, not the chart's default.
        "defaultMountImage": {"ce": versions.JUICEFS_IMAGE},
    }
    patch = mount_pod_patch(cache or CacheSettings())
    if patch:
        values["globalConfig"] = {"mountPodPatch": patch}
    if role_arn is not None:
        values["serviceAccount"] = {part: {"annotations": {ROLE_ANNOTATION: role_arn}} for part in CHART_ACCOUNTS}
    return with_node_tolerations(versions.JUICEFS_CSI.chart, values, tolerations)


@dataclass
class JuiceFSSource:
    """The platform's JuiceFS volume: what a client (the CSI driver, a Fluid JuiceFSRuntime) needs to reach it."""

    volume_name: str
    metaurl: pulumi.Input[str]
    """Metadata engine URL (secret)."""
    storage: str
    """JuiceFS storage type (`minio`, `s3`)."""
    bucket_url: pulumi.Input[str]
    access_key: pulumi.Input[str]
    secret_key: pulumi.Input[str]
    envs: Mapping[str, pulumi.Input[str]] = dataclasses.field(default_factory=dict)
    """Environment the client needs besides the URL (secret values; SENTINEL_PASSWORD with Sentinels)."""
    role_arn: pulumi.Input[str] | None = None
    """The volume's IAM role (AWS S3 with `oidcProviderArn`; the keys are empty then): the mount pods, the CSI
    controller and node run under ServiceAccounts that carry it."""


def volume_secret(v: JuiceFSSource) -> dict[str, pulumi.Input[str]]:
    """The JuiceFS CSI volume Secret's keys; the client's environment goes in ``envs``, a JSON object."""
    data: dict[str, pulumi.Input[str]] = {
        "name": v.volume_name,
        "metaurl": v.metaurl,
        "storage": v.storage,
        "bucket": v.bucket_url,
        "access-key": v.access_key,
        "secret-key": v.secret_key,
    }
    if v.envs:
        data["envs"] = pulumi.Output.all(**v.envs).apply(lambda env: json.dumps(env, sort_keys=True))
    return data


@dataclass
class JuiceFSArgs:
    """Inputs of JuiceFS."""

    settings: JuiceFSSettings
    volume: JuiceFSSource
    """The volume the driver's Secret and StorageClasses point at."""
    backup: ScopedAccess | None = None
    """What the metadata backup uploads with (its prefix only); required with `metadataBackup.enabled`."""
    node_tolerations: list[dict[str, Any]] = dataclasses.field(default_factory=default_tolerations)
    """Taints the CSI node plugin tolerates (`nodeStorage.tolerations`)."""


class JuiceFS(pulumi.ComponentResource):
    """The JuiceFS CSI driver and the platform volume's credentials."""

    secret_name: pulumi.Output[str]
    """Name of the volume Secret the StorageClasses reference."""

    def __init__(self, name: str, args: JuiceFSArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("ai-storage:juicefs:JuiceFS", name, None, opts)
        s, v = args.settings, args.volume
        self._settings = s
        ns = kube.namespace(f"{name}-ns", s.namespace, "privileged", self)
        pin = versions.JUICEFS_CSI
        values = chart_values(s.cache, v.role_arn, args.node_tolerations)
        self._driver = kube.release(f"{name}-csi-driver", pin, ns.metadata.name, values, self)
        self._mount_account = None
        if v.role_arn is not None:
            self._mount_account = role_account(f"{name}-mount-account", MOUNT_ACCOUNT, ns, v.role_arn, self)
        secret = k8s.core.v1.Secret(
            f"{name}-volume",
            metadata={"name": SECRET_NAME, "namespace": ns.metadata.name},
            type="Opaque",
            string_data={key: pulumi.Output.secret(value) for key, value in volume_secret(v).items()},
            opts=pulumi.ResourceOptions(parent=self),
        )
        if v.envs:
            k8s.core.v1.Secret(
                f"{name}-client-env",
                metadata={"name": CLIENT_ENV_SECRET, "namespace": ns.metadata.name},
                type="Opaque",
                string_data={key: pulumi.Output.secret(value) for key, value in v.envs.items()},
                opts=pulumi.ResourceOptions(parent=self),
            )
        self._secret = secret
        self.secret_name = secret.metadata.name
        if s.metadata_backup.enabled:
            self._backup(name, s, v, ns, args.backup, secret)
        self.register_outputs({"secret_name": self.secret_name})

    def _backup(
        self,
        name: str,
        s: JuiceFSSettings,
        v: JuiceFSSource,
        ns: k8s.core.v1.Namespace,
        access: ScopedAccess | None,
        volume: k8s.core.v1.Secret,
    ) -> None:
        """The metadata backup CronJob, uploading with ``access`` (keys in a Secret, or an account with a role)."""
        if access is None:
            raise TypeError("JuiceFSArgs.backup is required with juicefs.metadataBackup.enabled")
        child = pulumi.ResourceOptions(parent=self)
        after: list[pulumi.Resource] = [volume]
        account = backup.BACKUP_ACCOUNT if (role := access.role_arn) is not None else None
        if role is not None:
            after.append(role_account(f"{name}-metadata-backup-account", backup.BACKUP_ACCOUNT, ns, role, self))
        else:
            after.append(
                k8s.core.v1.Secret(
                    f"{name}-metadata-backup-keys",
                    metadata={"name": BACKUP_KEYS_SECRET, "namespace": ns.metadata.name},
                    type="Opaque",
                    string_data={"access-key": access.access_key, "secret-key": access.secret_key},
                    opts=child,
                )
            )
        secrets = backup.BackupSecrets(SECRET_NAME, CLIENT_ENV_SECRET, BACKUP_KEYS_SECRET)
        target = pulumi.Output.from_input(v.bucket_url).apply(lambda url: backup.backup_destination(v.storage, url))
        backup.metadata_backup(
            f"{name}-metadata-backup",
            s.metadata_backup,
            s.namespace,
            v.volume_name,
            target,
            secrets,
            after,
            self,
            account,
        )

    @property
    def ready(self) -> list[pulumi.Resource]:
        """The driver and the volume Secret: what a PersistentVolume of the volume waits for."""
        return [self._driver, self._secret, *([self._mount_account] if self._mount_account else [])]

    @property
    def cache_dir(self) -> str:
        """The cold tier's cache directories (``juicefs.cache.cacheDir``)."""
        return self._settings.cache.cache_dir

    def static_volume(self, handle: str, subdir: str, read_only: bool, own: Sequence[str] = ()) -> dict[str, Any]:
        """A static PersistentVolume's ``csi`` and ``mountOptions`` that mount only ``subdir`` of the volume (the
        mount pod runs `juicefs mount --subdir`; read-only mounts also get `ro` from the driver), ``own`` options
        over the cold tier's by name; the volume Secret stays in the driver's namespace (``nodePublishSecretRef``)."""
        secret = {"name": SECRET_NAME, "namespace": self._settings.namespace}
        csi: dict[str, Any] = {
            "driver": DRIVER,
            "volumeHandle": handle,
            "fsType": "juicefs",
            "readOnly": read_only,
            "nodePublishSecretRef": secret,
        }
        if self._mount_account is not None:  # IAM roles: the mount pod runs as the account with the volume's role
            csi["volumeAttributes"] = {MOUNT_ACCOUNT_PARAMETER: MOUNT_ACCOUNT}
        options = {o.split("=", 1)[0]: o for o in [*mount_options(self._settings.cache), *own]}
        return {"csi": csi, "mountOptions": [*options.values(), f"subdir={subdir}"]}

    def tier_class(self, tier: Tier) -> TierClass:
        """Any tier on JuiceFS: shared (RWX), object-backed, with the cache mount options (and, with IAM roles
        for service accounts, the mount pods' ServiceAccount)."""
        ns = self._settings.namespace
        parameters = {
            "csi.storage.k8s.io/provisioner-secret-name": SECRET_NAME,
            "csi.storage.k8s.io/provisioner-secret-namespace": ns,
            "csi.storage.k8s.io/node-publish-secret-name": SECRET_NAME,
            "csi.storage.k8s.io/node-publish-secret-namespace": ns,
        }
        after: list[pulumi.Resource] = [self._driver, self._secret]
        if self._mount_account is not None:
            parameters[MOUNT_ACCOUNT_PARAMETER] = MOUNT_ACCOUNT
            after.append(self._mount_account)
        return TierClass(
            provisioner=DRIVER,
            parameters=parameters,
            access_mode="ReadWriteMany",
            mount_options=mount_options(self._settings.cache),
            depends_on=after,
        )
