"""LocalNVMe: TopoLVM logical volumes on each node's NVMe volume groups, for the hot tier.

TopoLVM needs an LVM volume group on every node that runs lvmd: the node selector keeps lvmd (and the node
plugin) on the nodes that have one. Scheduling uses CSI storage capacity tracking, so neither the
topolvm-scheduler extender nor the pod-mutating webhook is needed; cert-manager, which only issues that
webhook's certificate, is installed only when the webhook is turned on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi
from pydantic import Field

from ..common import kube, versions
from ..common.sections import DnsLabel, Problem, Section
from .backend import BuildContext, Group, Registration, Tier, TierClass
from .node_cache import CacheVolumeSettings, node_cache
from .node_storage import default_tolerations, with_node_tolerations

DRIVER = "topolvm.io"


class ThinPoolSettings(Section):
    """An LVM thin pool inside the volume group (created by the node's administrator, not by TopoLVM)."""

    name: str = Field(pattern=r"^[A-Za-z0-9+_.][A-Za-z0-9+_.-]*$")
    """Thin pool logical volume name."""
    overprovision_ratio: float = Field(10.0, ge=1.0, le=100.0)
    """How many times the pool's size may be promised to volumes."""


class DeviceClassSettings(Section):
    """A TopoLVM device class: volumes of this class come from one LVM volume group on each node."""

    name: DnsLabel
    """Device class name (the StorageClass parameter `topolvm.io/device-class`)."""
    volume_group: str = Field(pattern=r"^[A-Za-z0-9+_.][A-Za-z0-9+_.-]*$")
    """LVM volume group on every lvmd node."""
    spare_gb: int = Field(10, ge=0, le=100000)
    """GiB of the volume group TopoLVM never hands out."""
    default: bool = False
    """Class used when a claim names none (exactly one class is the default)."""
    thin_pool: ThinPoolSettings | None = None
    """Thin-provision volumes from this pool; unset gives thick volumes."""

    def lvmd(self) -> dict[str, Any]:
        """The lvmd.yaml entry (lvmd's kebab-case keys)."""
        entry: dict[str, Any] = {
            "name": self.name,
            "volume-group": self.volume_group,
            "spare-gb": self.spare_gb,
            "default": self.default,
        }
        if self.thin_pool:
            entry["type"] = "thin"
            entry["thin-pool"] = {
                "name": self.thin_pool.name,
                "overprovision-ratio": self.thin_pool.overprovision_ratio,
            }
        return entry


class LocalNVMeSettings(Section):
    """TopoLVM: node-local NVMe volumes from LVM volume groups."""

    enabled: bool = True
    """Install TopoLVM and serve the tiers mapped to `topolvm`."""
    namespace: DnsLabel = "topolvm-system"
    """Namespace of TopoLVM (privileged: lvmd and the node plugin manage LVM on the host)."""
    device_classes: list[DeviceClassSettings] = Field(
        [DeviceClassSettings(name="nvme", volume_group="nvme-vg", default=True)], min_length=1
    )
    """Device classes; the default one backs the hot tier."""
    node_selector: dict[str, str] = {"ai-storage-platform/local-nvme": "true"}
    """Labels of the nodes that have the volume groups (lvmd and the node plugin run only there)."""
    controller_replicas: int = Field(2, ge=1, le=5)
    """TopoLVM controller replicas."""
    pod_mutating_webhook: bool = False
    """Turn on TopoLVM's pod-mutating webhook (only for the scheduler extender; installs cert-manager)."""
    cert_manager_namespace: DnsLabel = "cert-manager"
    """Namespace of cert-manager (only with `podMutatingWebhook`)."""
    cache_volume: CacheVolumeSettings = CacheVolumeSettings()
    """A volume of its own on each node for the JuiceFS and Fluid caches (`node_cache.py`)."""

    def problems(self) -> list[Problem]:
        """Device class names are unique, exactly one class is the default, the cache volume's class exists."""
        names = [c.name for c in self.device_classes]
        found = []
        if len(set(names)) != len(names):
            found.append(Problem("deviceClasses", "expected unique device class names", names, "rename one"))
        defaults = [c.name for c in self.device_classes if c.default]
        if len(defaults) != 1:
            hint = "the default class backs the hot tier and claims that name none"
            found.append(
                Problem("deviceClasses", "expected exactly one device class with default: true", defaults, hint)
            )
        wanted = self.cache_volume.device_class
        if self.cache_volume.enabled and wanted is not None and wanted not in names:
            expected = f"expected one of the device classes ({', '.join(names)})"
            found.append(
                Problem("cacheVolume.deviceClass", expected, wanted, "name a class of localNvme.deviceClasses")
            )
        return found

    def cache_volume_group(self) -> str:
        """The volume group the node cache volume comes from."""
        wanted = self.cache_volume.device_class
        return next((c for c in self.device_classes if c.name == wanted), self.default_class()).volume_group

    def default_class(self) -> DeviceClassSettings:
        """The default device class."""
        return next(c for c in self.device_classes if c.default)


def chart_values(
    s: LocalNVMeSettings,
    monitoring_labels: dict[str, str] | None = None,
    tolerations: Sequence[dict[str, Any]] = (),
) -> dict[str, Any]:
    """Helm values of the topolvm release (with ``monitoring_labels``, the chart's PodMonitors, so labelled); the
    node and lvmd DaemonSets tolerate ``tolerations`` (``nodeStorage``)."""
    monitors: dict[str, Any] = {}
    if monitoring_labels is not None:
        monitors = {"prometheus": {"podMonitor": {"enabled": True, "additionalLabels": dict(monitoring_labels)}}}
    values = {
        "lvmd": {
            "managed": True,
            "deviceClasses": [c.lvmd() for c in s.device_classes],
            "nodeSelector": dict(s.node_selector),
            **monitors,
        },
        "node": {"nodeSelector": dict(s.node_selector), **monitors},
        "controller": {
            "replicaCount": s.controller_replicas,
            "storageCapacityTracking": {"enabled": True},
            **monitors,
        },
        "scheduler": {"enabled": False},
        "webhook": {
            "podMutatingWebhook": {"enabled": s.pod_mutating_webhook, "ignoreNamespaces": ["kube-system", s.namespace]}
        },
        # cert-manager, when needed, is its own pinned release, not the chart's older subchart.
        "cert-manager": {"enabled": False},
        # The tier StorageClasses are the platform's; the chart's default class is not created.
        "storageClasses": [],
    }
    return with_node_tolerations(versions.TOPOLVM.chart, values, tolerations)


def cert_manager_values() -> dict[str, Any]:
    """Helm values of the cert-manager release."""
    return {"crds": {"enabled": True}}


@dataclass
class LocalNVMeArgs:
    """Inputs of LocalNVMe."""

    settings: LocalNVMeSettings
    monitoring_labels: dict[str, str] | None = None
    """Turn on the chart's PodMonitors (lvmd, node, controller) with these labels."""
    node_tolerations: list[dict[str, Any]] = field(default_factory=default_tolerations)
    """Taints the node and lvmd DaemonSets tolerate (`nodeStorage.tolerations`)."""


class LocalNVMe(pulumi.ComponentResource):
    """TopoLVM (and cert-manager when its webhook is on)."""

    device_classes: list[str]
    """Device class names."""

    def __init__(self, name: str, args: LocalNVMeArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("ai-storage:local_nvme:LocalNVMe", name, None, opts)
        s = args.settings
        self._settings = s
        after: list[pulumi.Resource] = []
        if s.pod_mutating_webhook:
            cm_ns = kube.namespace(f"{name}-cert-manager-ns", s.cert_manager_namespace, "restricted", self)
            pin = versions.CERT_MANAGER
            after.append(kube.release(f"{name}-cert-manager", pin, cm_ns.metadata.name, cert_manager_values(), self))
        ns = kube.namespace(f"{name}-ns", s.namespace, "privileged", self)
        pin = versions.TOPOLVM
        values = chart_values(s, args.monitoring_labels, args.node_tolerations)
        self._topolvm = kube.release(f"{name}-topolvm", pin, ns.metadata.name, values, self, depends_on=after)
        if s.cache_volume.enabled:
            tolerations = list(args.node_tolerations)
            node_cache(
                name, s.cache_volume_group(), s.cache_volume, ns.metadata.name, s.node_selector, tolerations, self
            )
        self.device_classes = [c.name for c in s.device_classes]
        self.register_outputs({"device_classes": self.device_classes})

    def tier_class(self, tier: Tier) -> TierClass:
        """Node-local (RWO) xfs volumes of the default device class, bound where the pod is scheduled."""
        return TierClass(
            provisioner=DRIVER,
            parameters={
                "csi.storage.k8s.io/fstype": "xfs",
                f"{DRIVER}/device-class": self._settings.default_class().name,
            },
            access_mode="ReadWriteOnce",
            binding_mode="WaitForFirstConsumer",
            allow_expansion=True,
            depends_on=[self._topolvm],
        )


def _build(ctx: BuildContext) -> LocalNVMe:
    s = ctx.settings
    args = LocalNVMeArgs(s.local_nvme, ctx.monitoring_labels, s.node_storage.specs())
    return LocalNVMe(f"{ctx.name}-local-nvme", args, pulumi.ResourceOptions(parent=ctx.parent))


def _held(settings: Any, tier: Tier) -> Group:
    """TopoLVM's volume group on each NVMe node less the node cache volume carved from it."""
    c, nvme = settings.capacity, settings.local_nvme
    cache = nvme.cache_volume.size_gib if nvme.cache_volume.enabled else 0
    if c.nvme_nodes is None or c.volume_group_gib is None:
        return Group("TopoLVM volume groups", None, "not stated", "capacity.volumeGroupGib")
    usable = c.nvme_nodes * (c.volume_group_gib - cache) * 2.0**30
    held = f"{c.nvme_nodes} nodes x ({c.volume_group_gib} GiB - the {cache} GiB node cache volume)"
    return Group("TopoLVM volume groups", usable, held, "capacity.volumeGroupGib")


def _node_local(settings: Any) -> bool:
    """always"""
    return True


TOPOLVM = Registration("topolvm", "local_nvme", ("hot", "block"), _build, _held, node_local=_node_local)
"""Node-local (RWO) volumes, only on `localNvme.nodeSelector`'s nodes."""
