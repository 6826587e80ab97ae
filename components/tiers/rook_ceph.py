"""RookCeph: the Rook operator, the Ceph-CSI drivers, and the Ceph cluster with its pools and filesystems.

Three steps, in order: the ``rook-ceph`` chart (operator, Rook CRDs, and the ceph-csi-operator subchart that
installs the ``csi.ceph.io`` CRDs), the ``ceph-csi-drivers`` chart that Rook v1.20 needs for any CSI pod to
start (installed with Rook's recommended values), then the CephCluster, CephBlockPool and CephFilesystems as
custom resources this package owns (their specs and settings are in ``ceph``), so each is checked against
the upstream CRD schema and guarded by ``protect``. It serves two tier backends (``CEPHFS``, ``RBD``) and builds
the CephFilesystems the tier map asks for (``filesystem_roles``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from ..backends.object_stores.ceph_rgw import API, RgwGateway
from ..common import kube, versions
from .backend import TIERS, BuildContext, Registration, Tier, TierClass
from .ceph import (
    RookCephSettings,
    cluster_spec,
    filesystem_devices,
    filesystem_spec,
    held_on_ceph,
    object_store_spec,
    pool_spec,
)
from .ceph_toolbox import toolbox
from .node_storage import default_tolerations, with_node_tolerations

PROVISIONER_SECRET = "rook-csi-cephfs-provisioner"
NODE_SECRET = "rook-csi-cephfs-node"
RBD_PROVISIONER_SECRET = "rook-csi-rbd-provisioner"
RBD_NODE_SECRET = "rook-csi-rbd-node"
SNAPSHOT_CLASSES = {"rbd": "ceph-block", "cephfs": "ceph-filesystem"}
"""The VolumeSnapshotClass of each Ceph CSI driver (each its driver's default)."""
CSI_SUBVOLUME_GROUP = "csi"
WARM_MOUNT_OPTIONS = ("noatime", "nodiratime")
"""CephFS kernel mounts take these (mount.ceph turns them into MS_NOATIME/MS_NODIRATIME)."""


OBC_FIELDS = "maxObjects,maxSize,bucketPolicy,bucketOwner"
"""ObjectBucketClaim fields the operator honours with the RGW backend: the defaults, and the bucket policy and
owner of the platform's own claim (the claim lives in the operator's namespace, which teams cannot write)."""


def chart_values(s: RookCephSettings, monitoring: bool = False, rgw: bool = False) -> dict[str, Any]:
    """Helm values of the rook-ceph (operator) release (``monitoring``: the operator may create ServiceMonitors;
    ``rgw``: it applies the bucket policy and owner of an ObjectBucketClaim)."""
    values: dict[str, Any] = {
        "crds": {"enabled": True},
        "resources": s.resources.operator.spec(),
        # The subchart installs ceph-csi-operator and the csi.ceph.io CRDs the drivers chart needs.
        "csi": {"installCsiOperator": True},
        "enableDiscoveryDaemon": False,
        "monitoring": {"enabled": monitoring},
    }
    if rgw:
        values["obcAllowAdditionalConfigFields"] = OBC_FIELDS
    return values


def csi_drivers_values(s: RookCephSettings, tolerations: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    """Helm values of the ceph-csi-drivers release: Rook's recommended values for the operator namespace; every
    driver's node plugin tolerates ``tolerations`` (``nodeStorage``)."""
    ns = s.namespace
    values = {
        "operatorConfig": {
            "namespace": ns,
            "driverSpecDefaults": {
                "imageSet": {"name": "rook-csi-operator-image-set-configmap"},
                "nodePlugin": {"priorityClassName": "system-node-critical"},
                "controllerPlugin": {"priorityClassName": "system-cluster-critical"},
            },
        },
        "drivers": {
            # The chart leaves the RBD snapshot sidecar out by default (snapshotPolicy none; CephFS has it):
            # without it no RBD VolumeSnapshot ever becomes ready (rook/rook#18156).
            "rbd": {
                "enabled": True,
                "name": f"{ns}.rbd.csi.ceph.com",
                **({"snapshotPolicy": "volumeSnapshot"} if s.snapshot_classes else {}),
            },
            "cephfs": {"enabled": True, "name": f"{ns}.cephfs.csi.ceph.com"},
            "nfs": {"enabled": False, "name": f"{ns}.nfs.csi.ceph.com"},
            "nvmeof": {"enabled": False, "name": f"{ns}.nvmeof.csi.ceph.com"},
        },
    }
    return with_node_tolerations(versions.CEPH_CSI_DRIVERS.chart, values, tolerations)


def _secret_parameters(namespace: str, secrets: dict[str, str]) -> dict[str, str]:
    """The CSI secret parameters (name and namespace) for each role in ``secrets``."""
    parameters = {}
    for role, secret in secrets.items():
        parameters[f"csi.storage.k8s.io/{role}-secret-name"] = secret
        parameters[f"csi.storage.k8s.io/{role}-secret-namespace"] = namespace
    return parameters


def cephfs_parameters(namespace: str, fs_name: str) -> dict[str, str]:
    """StorageClass parameters of a CephFS volume in ``fs_name``, with the CSI secrets Rook creates."""
    secrets = {
        "provisioner": PROVISIONER_SECRET,
        "controller-expand": PROVISIONER_SECRET,
        "controller-publish": PROVISIONER_SECRET,
        "node-stage": NODE_SECRET,
    }
    return {
        "clusterID": namespace,
        "fsName": fs_name,
        "pool": f"{fs_name}-data",
        **_secret_parameters(namespace, secrets),
    }


def rbd_parameters(namespace: str, pool: str) -> dict[str, str]:
    """StorageClass parameters of an RBD image in ``pool`` (Rook's example class: image format 2, layering, ext4)."""
    secrets = {
        "provisioner": RBD_PROVISIONER_SECRET,
        "controller-expand": RBD_PROVISIONER_SECRET,
        "node-stage": RBD_NODE_SECRET,
    }
    return {
        "clusterID": namespace,
        "pool": pool,
        "imageFormat": "2",
        "imageFeatures": "layering",
        "csi.storage.k8s.io/fstype": "ext4",
        **_secret_parameters(namespace, secrets),
    }


def snapshot_class_spec(namespace: str, driver: str) -> dict[str, Any]:
    """A VolumeSnapshotClass of a Ceph CSI driver (Rook's example: the provisioner secret, snapshots deleted with
    their VolumeSnapshot), marked as the driver's default so a VolumeSnapshot needs not name it."""
    secret = RBD_PROVISIONER_SECRET if driver == "rbd" else PROVISIONER_SECRET
    return {
        "driver": f"{namespace}.{driver}.csi.ceph.com",
        "deletionPolicy": "Delete",
        "parameters": {"clusterID": namespace, **_secret_parameters(namespace, {"snapshotter": secret})},
    }


@dataclass(frozen=True)
class CephBlock:
    """The RBD backend of a tier: block volumes (RWO) from the CephBlockPool."""

    namespace: str
    pool: str
    snapshot_class: str | None
    depends_on: list[pulumi.Resource]
    """The CSI drivers and the pool."""

    def tier_class(self, tier: Tier) -> TierClass:
        """RBD images, one writer at a time, expandable."""
        return TierClass(
            provisioner=f"{self.namespace}.rbd.csi.ceph.com",
            parameters=rbd_parameters(self.namespace, self.pool),
            access_mode="ReadWriteOnce",
            allow_expansion=True,
            snapshot_class=self.snapshot_class,
            depends_on=self.depends_on,
        )


@dataclass
class RookCephArgs:
    """Inputs of RookCeph."""

    settings: RookCephSettings
    protect: bool = False
    """Protect and retain the CephCluster, pools and filesystems."""
    rgw: bool = False
    """Run a CephObjectStore (when the object store backend is `ceph-rgw`)."""
    monitoring_labels: dict[str, str] | None = None
    """Let Rook create the mgr's ServiceMonitor with these labels (the Prometheus Operator's selection)."""
    node_tolerations: list[dict[str, Any]] = field(default_factory=default_tolerations)
    """Taints the Ceph CSI node plugins tolerate (`nodeStorage.tolerations`)."""
    filesystems: Sequence[str] = ("warm", "checkpoint")
    """The CephFilesystems to build, by role (the Platform passes ``filesystem_roles`` of its tier map)."""


class RookCeph(pulumi.ComponentResource):
    """Rook operator, Ceph-CSI drivers, CephCluster, block pool, the warm and checkpoint filesystems asked for,
    optional RGW."""

    cluster_name: pulumi.Output[str]
    """CephCluster name (also the CSI clusterID: the cluster namespace)."""
    filesystems: dict[str, pulumi.Output[str]]
    """CephFilesystem name by role (`warm`, `checkpoint`)."""
    rgw: RgwGateway | None
    """The RGW gateway, when the object store runs on Ceph."""
    block: CephBlock
    """The RBD backend (tiers mapped to `rbd`)."""

    def __init__(self, name: str, args: RookCephArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("ai-storage:rook_ceph:RookCeph", name, None, opts)
        s = args.settings
        self._settings, self._name, self._protect_data = s, name, args.protect
        ns = kube.namespace(f"{name}-ns", s.namespace, "privileged", self)
        monitoring = args.monitoring_labels is not None
        values = chart_values(s, monitoring, args.rgw)
        operator = kube.release(
            f"{name}-operator", versions.ROOK_CEPH, ns.metadata.name, values, self, release_name="rook-ceph"
        )
        csi = kube.release(
            f"{name}-csi-drivers",
            versions.CEPH_CSI_DRIVERS,
            ns.metadata.name,
            csi_drivers_values(s, args.node_tolerations),
            self,
            release_name="ceph-csi-drivers",
            depends_on=[operator],
        )
        spec = cluster_spec(s)
        if args.monitoring_labels is not None:
            spec.update(monitoring={"enabled": True}, labels={"monitoring": args.monitoring_labels})
        cluster = self._custom("cluster", "CephCluster", s.namespace, spec, [operator, csi])
        after_cluster = [operator, cluster]
        pool = self._custom("block-pool", "CephBlockPool", s.block_pool, pool_spec(s), after_cluster)
        self._snapshot_classes = self._snapshots(s, [csi]) if s.snapshot_classes else {}
        rbd_snapshots = SNAPSHOT_CLASSES["rbd"] if s.snapshot_classes else None
        self.block = CephBlock(s.namespace, s.block_pool, rbd_snapshots, [csi, pool, *self._snapshot_classes.values()])
        self._fs: dict[str, list[pulumi.Resource]] = {}
        self.filesystems = {}
        for role in args.filesystems:
            fs_name = s.checkpoint_filesystem if role == "checkpoint" else s.warm_filesystem
            spec = filesystem_spec(s, role)
            fs = self._custom(f"{role}-fs", "CephFilesystem", fs_name, spec, after_cluster)
            group_spec = {"name": CSI_SUBVOLUME_GROUP, "filesystemName": fs_name}
            group = self._custom(
                f"{role}-fs-csi-group", "CephFilesystemSubVolumeGroup", f"{fs_name}-csi", group_spec, [operator, fs]
            )
            self._fs[role] = [csi, fs, group, *self._snapshot_classes.values()]
            self.filesystems[role] = fs.metadata["name"]
        self.rgw = None
        if args.rgw:
            store = self._custom("object-store", "CephObjectStore", s.rgw.name, object_store_spec(s), after_cluster)
            self.rgw = RgwGateway(
                namespace=s.namespace,
                store=s.rgw.name,
                endpoint=f"http://rook-ceph-rgw-{s.rgw.name}.{s.namespace}.svc:{s.rgw.port}",
                depends_on=[operator, store],
            )
        if s.toolbox.enabled:
            toolbox(f"{name}-toolbox", ns.metadata.name, s.toolbox, self, [cluster])
        self.cluster_name = cluster.metadata["name"]
        self.register_outputs({"cluster_name": self.cluster_name, "filesystems": self.filesystems})

    def _custom(
        self, role: str, kind: str, cr_name: str, spec: dict[str, Any], after: list[pulumi.Resource]
    ) -> k8s.apiextensions.CustomResource:
        """A Rook custom resource in the cluster namespace, protected as the stack says."""
        return k8s.apiextensions.CustomResource(
            f"{self._name}-{role}",
            api_version=API,
            kind=kind,
            metadata={"name": cr_name, "namespace": self._settings.namespace, "labels": kube.labels("rook-ceph", role)},
            spec=spec,
            opts=kube.stateful(self, self._protect_data, depends_on=after),
        )

    def _snapshots(self, s: RookCephSettings, after: list[pulumi.Resource]) -> dict[str, pulumi.Resource]:
        """The CSI snapshot CRDs and controller (unless the cluster has its own), then a VolumeSnapshotClass per
        Ceph CSI driver."""
        if s.snapshot_controller == "install":
            opts = pulumi.ResourceOptions(parent=self)
            crds = k8s.kustomize.v2.Directory(
                f"{self._name}-snapshot-crds", directory=versions.kustomize("snapshotCrds"), opts=opts
            )
            controller = k8s.kustomize.v2.Directory(
                f"{self._name}-snapshot-controller",
                directory=versions.kustomize("snapshotController"),
                opts=pulumi.ResourceOptions(parent=self, depends_on=[crds]),
            )
            after = [*after, crds, controller]
        return {
            driver: kube.CustomObject(
                f"{self._name}-{driver}-snapshot-class",
                "snapshot.storage.k8s.io/v1",
                "VolumeSnapshotClass",
                {
                    "name": name,
                    "labels": kube.labels("rook-ceph", "snapshots"),
                    "annotations": {"snapshot.storage.kubernetes.io/is-default-class": "true"},
                },
                snapshot_class_spec(s.namespace, driver),
                pulumi.ResourceOptions(parent=self, depends_on=after),
            )
            for driver, name in SNAPSHOT_CLASSES.items()
        }

    def tier_class(self, tier: Tier) -> TierClass:
        """CephFS, shared (RWX): the checkpoint filesystem for `checkpoint`, the warm filesystem otherwise."""
        s = self._settings
        role = "checkpoint" if tier == "checkpoint" else "warm"
        fs_name = s.checkpoint_filesystem if role == "checkpoint" else s.warm_filesystem
        return TierClass(
            provisioner=f"{s.namespace}.cephfs.csi.ceph.com",
            parameters=cephfs_parameters(s.namespace, fs_name),
            access_mode="ReadWriteMany",
            mount_options=WARM_MOUNT_OPTIONS if role == "warm" else (),
            snapshot_class=SNAPSHOT_CLASSES["cephfs"] if self._snapshot_classes else None,
            devices=filesystem_devices(s, role, fs_name),
            depends_on=self._fs[role],
        )


def filesystem_roles(tiers: Any) -> tuple[str, ...]:
    """The CephFilesystems a tier map needs: ``checkpoint`` for a checkpoint tier on cephfs, ``warm`` for any other
    tier on it (none when no tier is)."""
    mapped = {"checkpoint" if tier == "checkpoint" else "warm" for tier in TIERS if getattr(tiers, tier) == "cephfs"}
    return tuple(role for role in ("warm", "checkpoint") if role in mapped)


def _rook_ceph(ctx: BuildContext) -> RookCeph:
    """The Rook-Ceph system, built once for both of its backends (first: Ceph RGW may be the object store)."""
    if "rook_ceph" not in ctx.shared:
        s = ctx.settings
        rgw, protect = s.object_store.backend == "ceph-rgw", s.cluster.protect_stateful_resources
        roles = filesystem_roles(s.tiers)
        args = RookCephArgs(s.rook_ceph, protect, rgw, ctx.monitoring_labels, s.node_storage.specs(), roles)
        ctx.shared["rook_ceph"] = RookCeph(f"{ctx.name}-rook-ceph", args, pulumi.ResourceOptions(parent=ctx.parent))
    return ctx.shared["rook_ceph"]


CEPHFS = Registration(
    "cephfs",
    "rook_ceph",
    ("hot", "warm", "cold", "checkpoint"),
    _rook_ceph,
    lambda settings, tier: held_on_ceph(settings, "checkpoint" if tier == "checkpoint" else "warm"),
)
"""CephFS (RWX): its own filesystem for the checkpoint tier, the warm one for any other."""
RBD = Registration(
    "rbd", "rook_ceph", ("hot", "block"), lambda ctx: _rook_ceph(ctx).block, lambda s, tier: held_on_ceph(s, "warm")
)
"""RBD images (RWO) from the block pool, on the warm tier's device class."""
