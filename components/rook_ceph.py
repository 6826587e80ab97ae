"""RookCeph: the Rook operator, the Ceph-CSI drivers, and the Ceph cluster with its pools and filesystems.

Three steps, in order: the ``rook-ceph`` chart (operator, Rook CRDs, and the ceph-csi-operator subchart that
installs the ``csi.ceph.io`` CRDs), the ``ceph-csi-drivers`` chart that Rook v1.20 needs for any CSI pod to
start (installed with Rook's recommended values), then the CephCluster, CephBlockPool and CephFilesystems as
custom resources this package owns (their specs and settings are in ``ceph``), so each is checked against
the upstream CRD schema and guarded by ``protect``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from . import kube, versions
from .ceph import RookCephSettings, cluster_spec, filesystem_spec, object_store_spec, pool_spec
from .storage_tiers import Tier, TierClass

API = "ceph.rook.io/v1"
PROVISIONER_SECRET = "rook-csi-cephfs-provisioner"
NODE_SECRET = "rook-csi-cephfs-node"
CSI_SUBVOLUME_GROUP = "csi"
WARM_MOUNT_OPTIONS = ("noatime", "nodiratime")
"""CephFS kernel mounts take these (mount.ceph turns them into MS_NOATIME/MS_NODIRATIME)."""


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


def cephfs_parameters(namespace: str, fs_name: str) -> dict[str, str]:
    """StorageClass parameters of a CephFS volume in ``fs_name``, with the CSI secrets Rook creates."""
    secrets = {
        "provisioner": PROVISIONER_SECRET,
        "controller-expand": PROVISIONER_SECRET,
        "controller-publish": PROVISIONER_SECRET,
        "node-stage": NODE_SECRET,
    }
    parameters = {"clusterID": namespace, "fsName": fs_name, "pool": f"{fs_name}-data"}
    for role, secret in secrets.items():
        parameters[f"csi.storage.k8s.io/{role}-secret-name"] = secret
        parameters[f"csi.storage.k8s.io/{role}-secret-namespace"] = namespace
    return parameters


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
        self._settings, self._name, self._protect_data = s, name, args.protect
        ns = kube.namespace(f"{name}-ns", s.namespace, "privileged", self)
        operator = kube.release(
            f"{name}-operator", versions.ROOK_CEPH, ns.metadata.name, chart_values(s), self, release_name="rook-ceph"
        )
        csi = kube.release(
            f"{name}-csi-drivers",
            versions.CEPH_CSI_DRIVERS,
            ns.metadata.name,
            csi_drivers_values(s),
            self,
            release_name="ceph-csi-drivers",
            depends_on=[operator],
        )
        cluster = self._custom("cluster", "CephCluster", s.namespace, cluster_spec(s), [operator, csi])
        after_cluster = [operator, cluster]
        self._custom("block-pool", "CephBlockPool", s.block_pool, pool_spec(s), after_cluster)
        self._fs: dict[str, list[pulumi.Resource]] = {}
        self.filesystems = {}
        for role, fs_name in (("warm", s.warm_filesystem), ("checkpoint", s.checkpoint_filesystem)):
            fs = self._custom(f"{role}-fs", "CephFilesystem", fs_name, filesystem_spec(s), after_cluster)
            group_spec = {"name": CSI_SUBVOLUME_GROUP, "filesystemName": fs_name}
            group = self._custom(
                f"{role}-fs-csi-group", "CephFilesystemSubVolumeGroup", f"{fs_name}-csi", group_spec, [operator, fs]
            )
            self._fs[role] = [csi, fs, group]
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
            depends_on=self._fs[role],
        )
