"""What a tier backend is: the tiers (``Tier``), the StorageClass shape a backend gives one (``TierClass``), the
component that gives it (``TierBackend``) and the one registration each backend module makes (``Registration``:
its name, its settings section, the tiers it may serve, whether it is on, how it is built, what it holds).
``registry`` lists the registrations; everything that depends on the set of backends reads it there."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import pulumi

Tier = Literal["hot", "warm", "cold", "checkpoint", "block"]
TIERS: tuple[Tier, ...] = ("hot", "warm", "cold", "checkpoint", "block")


@dataclass(frozen=True)
class TierClass:
    """What a backend contributes to one tier's StorageClass."""

    provisioner: str
    parameters: Mapping[str, pulumi.Input[str]]
    access_mode: Literal["ReadWriteOnce", "ReadWriteMany"]
    binding_mode: Literal["Immediate", "WaitForFirstConsumer"] = "Immediate"
    allow_expansion: bool = True
    mount_options: Sequence[str] = ()
    snapshot_class: str | None = None
    """The VolumeSnapshotClass of the class's CSI driver, when the platform makes one."""
    devices: str | None = None
    """Which devices hold the tier's data, in words (annotated on the StorageClass), when the backend says."""
    depends_on: Sequence[pulumi.Resource] = field(default_factory=list)
    """Resources the class needs first (the CSI driver, the pool or filesystem it names)."""


class TierBackend(Protocol):
    """A component that can serve tiers."""

    def tier_class(self, tier: Tier) -> TierClass:
        """The StorageClass shape this backend gives ``tier``."""
        ...


@dataclass
class Group:
    """Tiers that share one store, what they are promised and what the store holds (``capacity``)."""

    name: str
    capacity: float | None
    """Usable bytes; None: not stated (or no bound)."""
    held: str
    """How ``capacity`` follows from the settings, in words."""
    key: str
    """The setting that states the store's size (named by a refusal)."""
    promised: list[tuple[str, float]] = field(default_factory=list)


@dataclass
class BuildContext:
    """What the Platform hands a backend's ``build``: the stack's settings tree (``PlatformSettings``; this package
    sits below it), the Platform as parent, and what the backends need from the rest of the stack."""

    name: str
    """The Platform's name: a backend's resources are named ``<name>-<backend>``."""
    settings: Any
    parent: pulumi.Resource
    monitoring_labels: dict[str, str] | None
    """The Prometheus Operator's selection labels, when monitoring is on."""
    built: dict[str, TierBackend] = field(default_factory=dict)
    """The backends built so far, by name."""
    object_store: Any = None
    """The ObjectStore component, for the backends built after it (``after_object_store``)."""
    previous_outputs: pulumi.Input[Mapping[str, Any]] | None = None
    """The stack's outputs of its previous update (the metadata engine a JuiceFS volume was formatted on)."""
    shared: dict[str, Any] = field(default_factory=dict)
    """What a build leaves for the rest of the Platform (JuiceFS: its metadata engine and volume source)."""


@dataclass(frozen=True)
class Registration:
    """One tier backend, registered once by its module and listed in ``registry.REGISTERED``."""

    name: str
    """The backend's name in the tier map (``tiers.<tier>``)."""
    section: str
    """The settings tree's section of the backend (its attribute on ``PlatformSettings``, e.g. ``rook_ceph``)."""
    serves: tuple[Tier, ...]
    """The tiers it may serve (a tier mapped to it otherwise is refused)."""
    build: Callable[[BuildContext], TierBackend]
    """How the Platform builds it (once, when on)."""
    held: Callable[[Any, Tier], Group]
    """What holds a tier's data on it (the capacity arithmetic), from the settings tree."""
    after_object_store: bool = False
    """Built after the object store (it keeps its data there); otherwise before it (Ceph RGW runs on Rook-Ceph)."""
    node_local: Callable[[Any], bool] = lambda settings: False
    """Its volumes live only on `localNvme.nodeSelector`'s nodes (a pod measuring the tier must run there)."""

    def is_on(self, settings: Any) -> bool:
        """Whether the stack enables it (its section's ``enabled``)."""
        return bool(getattr(settings, self.section).enabled)
