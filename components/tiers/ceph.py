"""Ceph: the settings of the Ceph cluster Rook runs, their durability rules, and the custom resources they
become (pure functions, checked against Rook's CRD schemas). ``RookCeph`` creates them.

``storage.useAllDevices`` is always false: Ceph only takes the devices the settings name, never the NVMe
disks meant for TopoLVM. Values that can lose or destroy data are refused unless the stack opts in by name.
The module is longer than 350 lines because the cluster's settings, their durability rules and the specs
built from them are one system that reads best in one place (``cluster_spec`` beside the settings it reads).
"""

from __future__ import annotations

import operator
from functools import reduce
from typing import Any, Literal

from pydantic import Field, model_validator

from ..common import versions
from ..common.kube import gib_text, quantity_bytes
from ..common.sections import DnsLabel, Problem, Regex, Resources, Section
from .backend import Group
from .ceph_toolbox import ToolboxSettings

NEARFULL_RATIO = 0.85
"""Ceph's ``mon_osd_nearfull_ratio`` (default): past it the cluster is in HEALTH_WARN; at 0.95 writes stop."""

OPT_IN = {
    "accept_data_loss_risk": "set rookCeph.acceptDataLossRisk: true to accept the risk (dev only)",
    "allow_even_mon_count": "set rookCeph.allowEvenMonCount: true to accept the quorum-loss risk",
    "accept_data_destruction_on_delete": "set rookCeph.acceptDataDestructionOnDelete: true to accept the "
    "data-destruction risk",
}
"""The setting that accepts each kind of risk, and how the hint names it."""


class CephResources(Section):
    """Requests and limits of the Rook operator and the Ceph daemons (defaults from Rook's chart values)."""

    operator: Resources = Resources(cpu_request="200m", memory_request="128Mi", memory_limit="512Mi")
    """The Rook operator."""
    mon: Resources = Resources(cpu_request="1000m", memory_request="1Gi", memory_limit="2Gi")
    """Each Ceph monitor."""
    mgr: Resources = Resources(cpu_request="500m", memory_request="512Mi", memory_limit="1Gi")
    """Each Ceph manager."""
    osd: Resources = Resources(cpu_request="1000m", memory_request="4Gi", memory_limit="4Gi")
    """Each OSD (one per disk)."""
    mds: Resources = Resources(cpu_request="1000m", memory_request="4Gi", memory_limit="4Gi")
    """Each CephFS metadata server."""
    rgw: Resources = Resources(cpu_request="500m", memory_request="512Mi", memory_limit="2Gi")
    """Each RGW object gateway (objectStore backend `ceph-rgw`)."""


class CephDevice(Section):
    """A disk that becomes an OSD, with the device class its OSD gets."""

    name: str = Field(pattern=r"^\S+$")
    """Device name (`sdb`) or stable path (`/dev/disk/by-id/...`)."""
    device_class: DnsLabel | None = None
    """CRUSH device class of this disk's OSD (e.g. `checkpoint`); unset: the one Ceph sets from the hardware
    (`hdd`, `ssd` or `nvme`)."""

    @model_validator(mode="before")
    @classmethod
    def _from_name(cls, data: Any) -> Any:
        """A bare device name is a device with the class Ceph sets."""
        return {"name": data} if isinstance(data, str) else data


ZONE = "topology.kubernetes.io/zone"
"""The node label the zones are read from (Kubernetes' well-known label)."""

NVME_PATHS = (
    "/dev/disk/by-id/nvme-Amazon_EC2_NVMe_Instance_Storage_AWS1A2B3C4D5E6F7",
    "/dev/disk/by-id/nvme-SAMSUNG_MZQL23T8HCLS-00A07_S64HNE0T123456",
    "/dev/disk/by-path/pci-0000:00:1f.0-nvme-1",
    "/dev/nvme1n1",
)
"""Paths of NVMe disks as Nitro and other servers name them (a path filter must miss them while TopoLVM owns them)."""


class CephNode(Section):
    """One storage node and the exact disks Ceph may use on it."""

    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
    """Kubernetes node name (the `kubernetes.io/hostname` label)."""
    devices: list[CephDevice] = Field(min_length=1)
    """Disks Ceph turns into OSDs: a device name (`sdb`), a stable path (`/dev/disk/by-id/...`), or
    `{name, deviceClass}` to set the OSD's device class."""


class CephStorageSettings(Section):
    """Which disks become OSDs; Rook's `useAllDevices` is always false."""

    device_filter: Regex | None = "^sd[b-z]$"
    """Regular expression of device names Ceph may use on every node (the default never matches `nvme*`)."""
    device_path_filter: Regex | None = None
    """Regular expression of stable device paths, used instead of `deviceFilter` (Rook would ignore it beside a
    name filter). On AWS Nitro every disk is `nvme*`: `^/dev/disk/by-id/nvme-Amazon_EC2_NVMe_Instance_Storage_`
    selects the instance-store disks, never EBS volumes."""
    nodes: list[CephNode] = []
    """Per-node device lists; when set, only these nodes and disks are used and `deviceFilter` is ignored."""
    osd_node_selector: dict[str, str] = {}
    """Labels of the nodes whose disks become OSDs (unset: every node); keeps Ceph off the TopoLVM nodes' NVMe."""
    zones: list[DnsLabel] = []
    """The zones (`topology.kubernetes.io/zone`) the storage nodes span: `failureDomain: zone` needs at least
    `replicaSize` of them, and three for the monitors, which are then spread one per zone."""

    def filter_in_effect(self) -> tuple[str, str | None, tuple[str, ...]]:
        """The key of the filter Rook applies, its pattern, and NVMe devices it must miss while TopoLVM owns them."""
        if self.device_path_filter:
            return "devicePathFilter", self.device_path_filter, NVME_PATHS
        return "deviceFilter", self.device_filter, ("nvme0n1", "nvme1n1", "nvme0n1p1")


class CleanupPolicySettings(Section):
    """What Rook does to hosts and disks when the CephCluster is deleted (every option here destroys data)."""

    confirmation: Literal["", "yes-really-destroy-data"] = ""
    """`yes-really-destroy-data` wipes dataDirHostPath and every OSD disk on delete and stops orchestration."""
    allow_uninstall_with_volumes: bool = False
    """Let the CephCluster be deleted while PersistentVolumes still use it."""
    wipe_devices_from_other_clusters: bool = False
    """Wipe OSD disks that belong to another Ceph cluster."""

    def destructive(self) -> dict[str, Any]:
        """The options that are set to something that destroys data, by camelCase key."""
        chosen = self.model_dump(by_alias=True)
        return {key: value for key, value in chosen.items() if value}


class RgwSettings(Section):
    """The Ceph RGW object store (built when `objectStore.backend` is `ceph-rgw`)."""

    name: DnsLabel = "ai-objects"
    """CephObjectStore name; the gateway Service is `rook-ceph-rgw-<name>`."""
    instances: int = Field(2, ge=1, le=16)
    """RGW gateway pods."""
    port: int = Field(80, ge=1, le=65535)
    """HTTP port of the gateway Service."""


class MdsSettings(Section):
    """The metadata servers of a CephFS filesystem."""

    active_count: int = Field(1, ge=1, le=16)
    """Active metadata servers (ranks, Ceph's `max_mds`): each caches the metadata of its part of the tree; sized by
    the tier's decision record (`fileCount`, about 2 KiB of MDS cache per file) against each server's cache (Rook
    sets `mds_cache_memory_limit` to half of `resources.mds.memoryLimit`)."""
    active_standby: bool = True
    """A standby-replay server beside each active one, following its journal: failover in seconds, not minutes."""


class CheckpointDevicesSettings(Section):
    """Which OSDs hold the checkpoint filesystem's pools."""

    device_class: DnsLabel | None = None
    """CRUSH device class of the checkpoint filesystem's metadata and data pools (e.g. `ssd`); unset: every OSD.
    Apart from the warm tier only when `rookCeph.deviceClass` is set to another class."""
    share_warm_devices: bool = False
    """Let a protected stack keep the checkpoint pools on the warm tier's OSDs (write the reason next to it): a
    checkpoint burst then competes with training reads for the same disks."""
    mds: MdsSettings = MdsSettings()
    """The checkpoint filesystem's metadata servers."""


class RookCephSettings(Section):
    """Rook-Ceph: operator, CSI drivers, cluster, block pool and the warm and checkpoint filesystems."""

    enabled: bool = True
    """Install Rook-Ceph and serve the tiers mapped to `cephfs`."""
    namespace: DnsLabel = "rook-ceph"
    """Namespace of the operator, the CSI drivers and the cluster (privileged: OSDs, mons and CSI node plugins)."""
    data_dir_host_path: str = Field("/var/lib/rook", pattern=r"^/[^\s,]+$")
    """Host directory for Ceph configuration and mon data; delete it before reinstalling a cluster."""
    mon_count: int = Field(3, ge=1, le=9)
    """Ceph monitors; an odd number keeps a majority through a network split."""
    mgr_count: int = Field(2, ge=1, le=5)
    """Ceph managers (one active, the others standby)."""
    replica_size: int = Field(3, ge=1, le=7)
    """Copies of every object in each pool."""
    min_size: int = Field(2, ge=1, le=7)
    """Copies that must be written before a write is acknowledged."""
    failure_domain: Literal["host", "zone", "rack", "osd"] = "host"
    """CRUSH level across which the copies are spread."""
    storage: CephStorageSettings = CephStorageSettings()
    """Disks that become OSDs."""
    block_pool: DnsLabel = "replicapool"
    """CephBlockPool name (RBD)."""
    warm_filesystem: DnsLabel = "ai-warm"
    """CephFilesystem of the warm tier; its data pool is `<name>-data`."""
    checkpoint_filesystem: DnsLabel = "ai-checkpoint"
    """Separate CephFilesystem of the checkpoint tier (own pools and MDS, apart from training reads)."""
    device_class: DnsLabel | None = None
    """CRUSH device class of the block pool, the warm filesystem's pools and RGW's pools (e.g. `hdd`); unset:
    every OSD, the checkpoint class's included."""
    checkpoint: CheckpointDevicesSettings = CheckpointDevicesSettings()
    """The checkpoint filesystem's own devices (`deviceClass`), or the opt-in to share the warm tier's."""
    mds: MdsSettings = MdsSettings()
    """The warm filesystem's metadata servers."""
    mclock_profile: Literal["balanced", "high_client_ops", "high_recovery_ops"] = "balanced"
    """How the OSDs' mClock scheduler shares each disk between clients and recovery (`osd_mclock_profile`):
    `balanced` (Ceph's default), `high_client_ops` (training reads first; recovery after a lost disk takes longer,
    so the data stays with fewer copies longer), `high_recovery_ops` (back to full copies first)."""
    rgw: RgwSettings = RgwSettings()
    """Ceph RGW object store (objectStore backend `ceph-rgw`)."""
    cleanup_policy: CleanupPolicySettings = CleanupPolicySettings()
    """What deleting the CephCluster does to hosts and disks."""
    resources: CephResources = CephResources()
    """Requests and limits of the operator and the Ceph daemons."""
    toolbox: ToolboxSettings = ToolboxSettings()
    """The Ceph toolbox Deployment (`rook-ceph-tools`) the docs' and runbooks' `ceph` commands run in."""
    snapshot_classes: bool = True
    """Make a VolumeSnapshotClass for the RBD and for the CephFS driver (each its driver's default), so claims on
    Ceph tiers can be snapshotted."""
    snapshot_controller: Literal["install", "existing"] = "install"
    """`install` the CSI snapshot CRDs and snapshot-controller (external-snapshotter, pinned), or use the
    cluster's `existing` ones (EKS and GKE offer them as add-ons)."""
    accept_data_loss_risk: bool = False
    """Allow fewer than 3 replicas, minSize below 2, fewer than 3 mons or failureDomain `osd` (dev only)."""
    allow_even_mon_count: bool = False
    """Allow an even monitor count (no extra fault tolerance; a split can leave no quorum)."""
    accept_data_destruction_on_delete: bool = False
    """Allow a cleanupPolicy that wipes hosts and disks when the CephCluster is deleted."""

    def problems(self) -> list[Problem]:
        """Durability rules: risky values are rejected unless the stack opts in by name."""
        if not self.enabled:
            return []
        values = self.model_dump(by_alias=True)
        found = [
            Problem(key, expected, reduce(operator.getitem, key.split("."), values), f"{why}; {OPT_IN[flag]}")
            for key, broken, flag, expected, why in self._risks()
            if broken and not getattr(self, flag)
        ]
        if self.min_size > self.replica_size:
            expected = f"expected at most replicaSize ({self.replica_size})"
            found.append(
                Problem("minSize", expected, self.min_size, "pools with minSize above size never accept writes")
            )
        zones_needed = max(self.replica_size, 3)
        if self.failure_domain == "zone" and len(set(self.storage.zones)) < zones_needed:
            found.append(
                Problem(
                    "storage.zones",
                    f"expected at least {zones_needed} zones the storage nodes span with failureDomain zone (one copy "
                    "of each object per zone, one monitor per zone)",
                    self.storage.zones,
                    "name them (`kubectl get nodes -L topology.kubernetes.io/zone`); with fewer zones than copies "
                    "the pools' placement groups never become active and their I/O stops; or use failureDomain host",
                )
            )
        if not (self.storage.nodes or self.storage.device_filter or self.storage.device_path_filter):
            hint = "useAllDevices is always false, so without one Ceph creates no OSDs"
            expected = "expected a deviceFilter, a devicePathFilter or a per-node device list"
            found.append(Problem("storage", expected, None, hint))
        return found

    def checkpoint_devices_apart(self) -> bool:
        """The checkpoint pools sit on OSDs of a class that no other pool uses."""
        warm, checkpoint = self.device_class, self.checkpoint.device_class
        return bool(warm and checkpoint and warm != checkpoint)

    def shared_devices_problem(self) -> Problem | None:
        """A protected stack's checkpoint pools on the warm tier's OSDs without the opt-in."""
        if not self.enabled or self.checkpoint_devices_apart() or self.checkpoint.share_warm_devices:
            return None
        warm = self.device_class
        return Problem(
            "rookCeph.checkpoint.deviceClass",
            f"expected a device class other than rookCeph.deviceClass ({warm or 'unset: every OSD'}), with "
            "rookCeph.deviceClass set",
            self.checkpoint.device_class,
            "every rank's checkpoint burst would compete with training reads for the same OSDs; set both classes, "
            "or rookCeph.checkpoint.shareWarmDevices: true with the reason next to it",
        )

    def _risks(self) -> list[tuple[str, bool, str, str, str]]:
        """(key, broken, opt-in flag, expected, why) of each rule a stack may break only by opting in."""
        return [
            (
                "replicaSize",
                self.replica_size < 3,
                "accept_data_loss_risk",
                "expected at least 3 copies of every object",
                "with fewer than 3 replicas one failed disk or host can lose data",
            ),
            (
                "minSize",
                self.min_size < 2,
                "accept_data_loss_risk",
                "expected at least 2 copies written before a write is acknowledged",
                "with minSize 1 a write held by one copy is lost if that disk fails",
            ),
            (
                "monCount",
                self.mon_count < 3,
                "accept_data_loss_risk",
                "expected at least 3 monitors",
                "a single monitor is a single point of failure for the cluster maps",
            ),
            (
                "monCount",
                self.mon_count % 2 == 0,
                "allow_even_mon_count",
                "expected an odd number of monitors",
                "an even count tolerates no more failures than one fewer mon and a network split can leave no "
                "quorum (all I/O stops)",
            ),
            (
                "failureDomain",
                self.failure_domain == "osd",
                "accept_data_loss_risk",
                "expected host, zone or rack",
                "with failureDomain osd all copies can sit on one host and be lost with it",
            ),
            *(
                (
                    f"cleanupPolicy.{key}",
                    True,
                    "accept_data_destruction_on_delete",
                    "expected no destructive cleanup (the default)",
                    "this wipes Ceph data on hosts and disks when the CephCluster is deleted",
                )
                for key in self.cleanup_policy.destructive()
            ),
        ]


def filesystem_class(s: RookCephSettings, role: str) -> str | None:
    """The device class of the ``warm`` or ``checkpoint`` filesystem's pools (None: every OSD)."""
    return (s.checkpoint.device_class if role == "checkpoint" else None) or s.device_class


def filesystem_devices(s: RookCephSettings, role: str, fs_name: str) -> str:
    """Which OSDs hold a filesystem's pools, in words (the StorageClass's `devices` annotation)."""
    chosen = filesystem_class(s, role)
    where = f"OSDs of Ceph device class {chosen}" if chosen else "every OSD of the Ceph cluster"
    if role == "checkpoint":
        apart = "apart from" if s.checkpoint_devices_apart() else "shared with"
        return f"CephFilesystem {fs_name} on {where} ({apart} the warm tier's)"
    return f"CephFilesystem {fs_name} on {where}"


def held_on_ceph(settings: Any, role: str) -> Group:
    """What the OSDs under the ``warm`` or ``checkpoint`` pools hold (``capacity.cephRaw``): raw / replicaSize x
    the nearfull ratio, of the pools' device class (every class's sum when they use every OSD)."""
    ceph, raw_by_class = settings.rook_ceph, settings.capacity.ceph_raw
    cls = filesystem_class(ceph, role)
    sizes = [quantity_bytes(v) for k, v in raw_by_class.items() if cls is None or k == cls]
    raw = sum(sizes) if sizes else None
    where = f"Ceph OSDs of class {cls}" if cls else "every Ceph OSD"
    usable = raw / ceph.replica_size * NEARFULL_RATIO if raw else None
    held = f"{gib_text(raw)} raw / {ceph.replica_size} copies x {NEARFULL_RATIO}" if raw else "not stated"
    return Group(where, usable, held, f"capacity.cephRaw.{cls}" if cls else "capacity.cephRaw")


def pool_spec(s: RookCephSettings, device_class: str | None = None) -> dict[str, Any]:
    """A replicated pool as the settings say: size, min_size and failure domain, on the OSDs of
    ``device_class`` (default: the warm tier's ``deviceClass``; unset: every OSD)."""
    spec: dict[str, Any] = {
        "failureDomain": s.failure_domain,
        # Rook refuses size 1 unless requireSafeReplicaSize is off.
        "replicated": {"size": s.replica_size, "requireSafeReplicaSize": s.replica_size > 1},
        "parameters": {"min_size": str(s.min_size)},
    }
    chosen = device_class or s.device_class
    if chosen:
        spec["deviceClass"] = chosen
    return spec


def device_spec(device: CephDevice) -> dict[str, Any]:
    """One entry of a node's ``devices`` in the CephCluster (the class goes in Rook's per-device ``config``)."""
    if device.device_class is None:
        return {"name": device.name}
    return {"name": device.name, "config": {"deviceClass": device.device_class}}


def cluster_spec(s: RookCephSettings) -> dict[str, Any]:
    """The CephCluster spec."""
    storage: dict[str, Any] = {"useAllDevices": False, "useAllNodes": not s.storage.nodes}
    if s.storage.nodes:
        storage["nodes"] = [{"name": n.name, "devices": [device_spec(d) for d in n.devices]} for n in s.storage.nodes]
    elif s.storage.device_path_filter:
        storage["devicePathFilter"] = s.storage.device_path_filter
    else:
        storage["deviceFilter"] = s.storage.device_filter
    cleanup = s.cleanup_policy
    terms = [
        {
            "matchExpressions": [
                {"key": k, "operator": "In", "values": [v]} for k, v in s.storage.osd_node_selector.items()
            ]
        }
    ]
    on = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}
    placement: dict[str, Any] = {"osd": on, "prepareosd": on} if s.storage.osd_node_selector else {}
    if s.failure_domain == "zone":  # a zone lost keeps a majority of the monitors (Rook labels them app=...)
        spread = {"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule"}
        spread["labelSelector"] = {"matchLabels": {"app": "rook-ceph-mon"}}
        placement["mon"] = {"topologySpreadConstraints": [spread]}
    return {
        **({"placement": placement} if placement else {}),
        "cephVersion": {"image": versions.CEPH_IMAGE, "allowUnsupported": False},
        "dataDirHostPath": s.data_dir_host_path,
        "cephConfig": {"osd": {"osd_mclock_profile": s.mclock_profile}},
        # Ceph-CSI keys the kernel clients of Linux < 7.0 understand (Rook's v1.20 default).
        "security": {"cephx": {"csi": {"keyType": "aes"}}},
        "mon": {"count": s.mon_count, "allowMultiplePerNode": False},
        "mgr": {"count": s.mgr_count, "allowMultiplePerNode": False},
        "dashboard": {"enabled": True, "ssl": True},
        "crashCollector": {"disable": False},
        "storage": storage,
        "resources": {
            "mon": s.resources.mon.spec(),
            "mgr": s.resources.mgr.spec(),
            "osd": s.resources.osd.spec(),
        },
        "priorityClassNames": {
            "mon": "system-node-critical",
            "osd": "system-node-critical",
            "mgr": "system-cluster-critical",
        },
        "disruptionManagement": {"managePodBudgets": True},
        "cleanupPolicy": {
            "confirmation": cleanup.confirmation,
            "allowUninstallWithVolumes": cleanup.allow_uninstall_with_volumes,
            "wipeDevicesFromOtherClusters": cleanup.wipe_devices_from_other_clusters,
        },
    }


def filesystem_spec(s: RookCephSettings, role: str) -> dict[str, Any]:
    """The ``warm`` or ``checkpoint`` CephFilesystem: one replicated data pool named `data` (Ceph pool
    `<fs>-data`), its pools on the OSDs of the role's device class (see :func:`pool_spec`), its metadata servers."""
    device_class, mds = filesystem_class(s, role), s.checkpoint.mds if role == "checkpoint" else s.mds
    return {
        "metadataPool": pool_spec(s, device_class),
        "dataPools": [{"name": "data", **pool_spec(s, device_class)}],
        "preserveFilesystemOnDelete": True,
        "preservePoolsOnDelete": True,
        "metadataServer": {
            "activeCount": mds.active_count,
            "activeStandby": mds.active_standby,
            "resources": s.resources.mds.spec(),
            "priorityClassName": "system-cluster-critical",
        },
    }


def object_store_spec(s: RookCephSettings) -> dict[str, Any]:
    """A CephObjectStore with replicated pools and an HTTP gateway."""
    return {
        "metadataPool": pool_spec(s),
        "dataPool": pool_spec(s),
        "preservePoolsOnDelete": True,
        "gateway": {
            "port": s.rgw.port,
            "instances": s.rgw.instances,
            "resources": s.resources.rgw.spec(),
            "priorityClassName": "system-cluster-critical",
        },
    }
