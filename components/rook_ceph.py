"""RookCeph: the Rook operator, the Ceph-CSI drivers, and the Ceph cluster with its pools and filesystems.

Three steps, in order: the ``rook-ceph`` chart (operator, Rook CRDs, and the ceph-csi-operator subchart that
installs the ``csi.ceph.io`` CRDs), the ``ceph-csi-drivers`` chart that Rook v1.20 needs for any CSI pod to
start (installed with Rook's recommended values), then the CephCluster, CephBlockPool and CephFilesystems as
custom resources this package owns, so each is checked against the upstream CRD schema and guarded by
``protect``. ``storage.useAllDevices`` is always false: Ceph only takes the devices the settings name, never
the NVMe disks meant for TopoLVM.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

import pulumi
import pulumi_kubernetes as k8s
from pydantic import Field, field_validator
from pydantic_core import PydanticCustomError

from . import kube, versions
from .settings import DnsLabel, Problem, Resources, Section
from .storage_tiers import Tier, TierClass

API = "ceph.rook.io/v1"
PROVISIONER_SECRET = "rook-csi-cephfs-provisioner"
NODE_SECRET = "rook-csi-cephfs-node"
CSI_SUBVOLUME_GROUP = "csi"
WARM_MOUNT_OPTIONS = ("noatime", "nodiratime")
"""CephFS kernel mounts take these (mount.ceph turns them into MS_NOATIME/MS_NODIRATIME)."""


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


class CephNode(Section):
    """One storage node and the exact disks Ceph may use on it."""

    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
    """Kubernetes node name (the `kubernetes.io/hostname` label)."""
    devices: list[str] = Field(min_length=1)
    """Device names (`sdb`) or stable paths (`/dev/disk/by-id/...`) Ceph turns into OSDs."""


class CephStorageSettings(Section):
    """Which disks become OSDs; Rook's `useAllDevices` is always false."""

    device_filter: str | None = "^sd[b-z]$"
    """Regular expression of device names Ceph may use on every node (the default never matches `nvme*`)."""
    nodes: list[CephNode] = []
    """Per-node device lists; when set, only these nodes and disks are used and `deviceFilter` is ignored."""

    @field_validator("device_filter")
    @classmethod
    def _regex(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise PydanticCustomError("regex", "expected a regular expression ({error})", {"error": exc}) from None
        return value


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
        found: dict[str, Any] = {}
        if self.confirmation:
            found["confirmation"] = self.confirmation
        if self.allow_uninstall_with_volumes:
            found["allowUninstallWithVolumes"] = True
        if self.wipe_devices_from_other_clusters:
            found["wipeDevicesFromOtherClusters"] = True
        return found


class RgwSettings(Section):
    """The Ceph RGW object store (built when `objectStore.backend` is `ceph-rgw`)."""

    name: DnsLabel = "ai-objects"
    """CephObjectStore name; the gateway Service is `rook-ceph-rgw-<name>`."""
    instances: int = Field(2, ge=1, le=16)
    """RGW gateway pods."""
    port: int = Field(80, ge=1, le=65535)
    """HTTP port of the gateway Service."""


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
    rgw: RgwSettings = RgwSettings()
    """Ceph RGW object store (objectStore backend `ceph-rgw`)."""
    cleanup_policy: CleanupPolicySettings = CleanupPolicySettings()
    """What deleting the CephCluster does to hosts and disks."""
    resources: CephResources = CephResources()
    """Requests and limits of the operator and the Ceph daemons."""
    accept_data_loss_risk: bool = False
    """Allow fewer than 3 replicas, minSize below 2, fewer than 3 mons or failureDomain `osd` (dev only)."""
    allow_even_mon_count: bool = False
    """Allow an even monitor count (no extra fault tolerance; a split can leave no quorum)."""
    accept_data_destruction_on_delete: bool = False
    """Allow a cleanupPolicy that wipes hosts and disks when the CephCluster is deleted."""

    def problems(self) -> list[Problem]:
        """Durability rules: risky values are rejected unless the stack opts in by name."""
        found = []
        loss = "set rookCeph.acceptDataLossRisk: true to accept the risk (dev only)"
        if self.replica_size < 3 and not self.accept_data_loss_risk:
            found.append(
                Problem(
                    "rookCeph.replicaSize",
                    "expected at least 3 copies of every object",
                    self.replica_size,
                    f"with fewer than 3 replicas one failed disk or host can lose data; {loss}",
                )
            )
        if self.min_size < 2 and not self.accept_data_loss_risk:
            found.append(
                Problem(
                    "rookCeph.minSize",
                    "expected at least 2 copies written before a write is acknowledged",
                    self.min_size,
                    f"with minSize 1 a write held by one copy is lost if that disk fails; {loss}",
                )
            )
        if self.min_size > self.replica_size:
            found.append(
                Problem(
                    "rookCeph.minSize",
                    f"expected at most replicaSize ({self.replica_size})",
                    self.min_size,
                    "pools with minSize above size never accept writes",
                )
            )
        if self.mon_count < 3 and not self.accept_data_loss_risk:
            found.append(
                Problem(
                    "rookCeph.monCount",
                    "expected at least 3 monitors",
                    self.mon_count,
                    f"a single monitor is a single point of failure for the cluster maps; {loss}",
                )
            )
        if self.mon_count % 2 == 0 and not self.allow_even_mon_count:
            found.append(
                Problem(
                    "rookCeph.monCount",
                    "expected an odd number of monitors",
                    self.mon_count,
                    "an even count tolerates no more failures than one fewer mon and a network split can leave "
                    "no quorum (all I/O stops); set rookCeph.allowEvenMonCount: true to accept the quorum-loss risk",
                )
            )
        if self.failure_domain == "osd" and not self.accept_data_loss_risk:
            found.append(
                Problem(
                    "rookCeph.failureDomain",
                    "expected host, zone or rack",
                    self.failure_domain,
                    f"with failureDomain osd all copies can sit on one host and be lost with it; {loss}",
                )
            )
        if not self.accept_data_destruction_on_delete:
            for key, value in self.cleanup_policy.destructive().items():
                found.append(
                    Problem(
                        f"rookCeph.cleanupPolicy.{key}",
                        "expected no destructive cleanup (the default)",
                        value,
                        "this wipes Ceph data on hosts and disks when the CephCluster is deleted; set "
                        "rookCeph.acceptDataDestructionOnDelete: true to accept the data-destruction risk",
                    )
                )
        if not self.storage.nodes and not self.storage.device_filter:
            found.append(
                Problem(
                    "rookCeph.storage",
                    "expected a deviceFilter or a per-node device list",
                    None,
                    "useAllDevices is always false, so without either Ceph creates no OSDs",
                )
            )
        return found


@dataclass(frozen=True)
class RgwGateway:
    """What an object store backend needs from the RGW that RookCeph runs."""

    namespace: str
    store: str
    endpoint: str
    depends_on: list[pulumi.Resource]
    """The CephObjectStore and the release installing its CRDs."""


def chart_values(s: RookCephSettings) -> dict[str, Any]:
    """Helm values of the rook-ceph (operator) release."""
    return {
        "crds": {"enabled": True},
        "resources": s.resources.operator.spec(),
        # The subchart installs ceph-csi-operator and the csi.ceph.io CRDs the drivers chart needs.
        "csi": {"installCsiOperator": True},
        "enableDiscoveryDaemon": False,
        "monitoring": {"enabled": False},
    }


def csi_drivers_values(s: RookCephSettings) -> dict[str, Any]:
    """Helm values of the ceph-csi-drivers release: Rook's recommended values for the operator namespace."""
    ns = s.namespace
    return {
        "operatorConfig": {
            "namespace": ns,
            "driverSpecDefaults": {
                "imageSet": {"name": "rook-csi-operator-image-set-configmap"},
                "nodePlugin": {"priorityClassName": "system-node-critical"},
                "controllerPlugin": {"priorityClassName": "system-cluster-critical"},
            },
        },
        "drivers": {
            "rbd": {"enabled": True, "name": f"{ns}.rbd.csi.ceph.com"},
            "cephfs": {"enabled": True, "name": f"{ns}.cephfs.csi.ceph.com"},
            "nfs": {"enabled": False, "name": f"{ns}.nfs.csi.ceph.com"},
            "nvmeof": {"enabled": False, "name": f"{ns}.nvmeof.csi.ceph.com"},
        },
    }


def cluster_spec(s: RookCephSettings) -> dict[str, Any]:
    """The CephCluster spec."""
    storage: dict[str, Any] = {"useAllDevices": False, "useAllNodes": not s.storage.nodes}
    if s.storage.nodes:
        storage["nodes"] = [{"name": n.name, "devices": [{"name": d} for d in n.devices]} for n in s.storage.nodes]
    else:
        storage["deviceFilter"] = s.storage.device_filter
    cleanup = s.cleanup_policy
    return {
        "cephVersion": {"image": versions.CEPH_IMAGE, "allowUnsupported": False},
        "dataDirHostPath": s.data_dir_host_path,
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


def pool_spec(s: RookCephSettings) -> dict[str, Any]:
    """A replicated pool as the settings say: size, min_size and failure domain."""
    return {
        "failureDomain": s.failure_domain,
        # Rook refuses size 1 unless requireSafeReplicaSize is off.
        "replicated": {"size": s.replica_size, "requireSafeReplicaSize": s.replica_size > 1},
        "parameters": {"min_size": str(s.min_size)},
    }


def filesystem_spec(s: RookCephSettings) -> dict[str, Any]:
    """A CephFilesystem with one replicated data pool named `data` (Ceph pool `<fs>-data`)."""
    return {
        "metadataPool": pool_spec(s),
        "dataPools": [{"name": "data", **pool_spec(s)}],
        "preserveFilesystemOnDelete": True,
        "preservePoolsOnDelete": True,
        "metadataServer": {
            "activeCount": 1,
            "activeStandby": True,
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


@dataclass
class RookCephArgs:
    """Inputs of RookCeph."""

    settings: RookCephSettings
    protect: bool = False
    """Protect and retain the CephCluster, pools and filesystems."""
    rgw: bool = False
    """Run a CephObjectStore (when the object store backend is `ceph-rgw`)."""


class RookCeph(pulumi.ComponentResource):
    """Rook operator, Ceph-CSI drivers, CephCluster, block pool, warm and checkpoint filesystems, optional RGW."""

    cluster_name: pulumi.Output[str]
    """CephCluster name (also the CSI clusterID: the cluster namespace)."""
    filesystems: dict[str, pulumi.Output[str]]
    """CephFilesystem name by role (`warm`, `checkpoint`)."""
    rgw: RgwGateway | None
    """The RGW gateway, when the object store runs on Ceph."""

    def __init__(self, name: str, args: RookCephArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("ai-storage:rook_ceph:RookCeph", name, None, opts)
        s = args.settings
        self._settings = s
        ns = kube.namespace(f"{name}-ns", s.namespace, "privileged", self)
        operator = self._release(name, "operator", versions.ROOK_CEPH, "rook-ceph", ns, chart_values(s), [])
        self._csi = self._release(
            name, "csi-drivers", versions.CEPH_CSI_DRIVERS, "ceph-csi-drivers", ns, csi_drivers_values(s), [operator]
        )
        cluster = self._custom(
            name, "cluster", "CephCluster", s.namespace, cluster_spec(s), args.protect, [operator, self._csi]
        )
        after_cluster = [operator, cluster]
        self._custom(name, "block-pool", "CephBlockPool", s.block_pool, pool_spec(s), args.protect, after_cluster)
        self._fs: dict[str, list[pulumi.Resource]] = {}
        self.filesystems = {}
        for role, fs_name in (("warm", s.warm_filesystem), ("checkpoint", s.checkpoint_filesystem)):
            fs = self._custom(
                name, f"{role}-fs", "CephFilesystem", fs_name, filesystem_spec(s), args.protect, after_cluster
            )
            group = self._custom(
                name,
                f"{role}-fs-csi-group",
                "CephFilesystemSubVolumeGroup",
                f"{fs_name}-csi",
                {"name": CSI_SUBVOLUME_GROUP, "filesystemName": fs_name},
                args.protect,
                [operator, fs],
            )
            self._fs[role] = [self._csi, fs, group]
            self.filesystems[role] = fs.metadata["name"]
        self.rgw = None
        if args.rgw:
            store = self._custom(
                name, "object-store", "CephObjectStore", s.rgw.name, object_store_spec(s), args.protect, after_cluster
            )
            self.rgw = RgwGateway(
                namespace=s.namespace,
                store=s.rgw.name,
                endpoint=f"http://rook-ceph-rgw-{s.rgw.name}.{s.namespace}.svc:{s.rgw.port}",
                depends_on=[operator, store],
            )
        self.cluster_name = cluster.metadata["name"]
        self.register_outputs({"cluster_name": self.cluster_name, "filesystems": self.filesystems})

    def _release(
        self,
        name: str,
        role: str,
        pin: versions.ChartPin,
        release: str,
        ns: k8s.core.v1.Namespace,
        values: dict[str, Any],
        after: list[pulumi.Resource],
    ) -> k8s.helm.v3.Release:
        return kube.release(
            f"{name}-{role}", pin, ns.metadata.name, values, self, release_name=release, depends_on=after
        )

    def _custom(
        self,
        name: str,
        role: str,
        kind: str,
        cr_name: str,
        spec: dict[str, Any],
        protect: bool,
        after: list[pulumi.Resource],
    ) -> k8s.apiextensions.CustomResource:
        return k8s.apiextensions.CustomResource(
            f"{name}-{role}",
            api_version=API,
            kind=kind,
            metadata={"name": cr_name, "namespace": self._settings.namespace, "labels": kube.labels("rook-ceph", role)},
            spec=spec,
            opts=kube.stateful(self, protect, depends_on=after),
        )

    def tier_class(self, tier: Tier) -> TierClass:
        """CephFS, shared (RWX): the checkpoint filesystem for `checkpoint`, the warm filesystem otherwise."""
        s = self._settings
        role = "checkpoint" if tier == "checkpoint" else "warm"
        fs_name = s.checkpoint_filesystem if role == "checkpoint" else s.warm_filesystem
        ns = s.namespace
        return TierClass(
            provisioner=f"{ns}.cephfs.csi.ceph.com",
            parameters={
                "clusterID": ns,
                "fsName": fs_name,
                "pool": f"{fs_name}-data",
                "csi.storage.k8s.io/provisioner-secret-name": PROVISIONER_SECRET,
                "csi.storage.k8s.io/provisioner-secret-namespace": ns,
                "csi.storage.k8s.io/controller-expand-secret-name": PROVISIONER_SECRET,
                "csi.storage.k8s.io/controller-expand-secret-namespace": ns,
                "csi.storage.k8s.io/controller-publish-secret-name": PROVISIONER_SECRET,
                "csi.storage.k8s.io/controller-publish-secret-namespace": ns,
                "csi.storage.k8s.io/node-stage-secret-name": NODE_SECRET,
                "csi.storage.k8s.io/node-stage-secret-namespace": ns,
            },
            access_mode="ReadWriteMany",
            mount_options=WARM_MOUNT_OPTIONS if role == "warm" else (),
            depends_on=self._fs[role],
        )
