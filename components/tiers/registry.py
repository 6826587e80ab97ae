"""The tier backends, registered once each: adding a backend is its module (with its ``Registration``) and its line
here. The names a tier may map to (``Backend``), which backends a stack enables, which backend may serve which
tier, the order the Platform builds them in and what holds their data all come from this list."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from . import efs, fsx_lustre, juicefs_volume, local_nvme, rook_ceph
from .backend import Registration, Tier

REGISTERED: tuple[Registration, ...] = (
    local_nvme.TOPOLVM,
    rook_ceph.CEPHFS,
    rook_ceph.RBD,
    juicefs_volume.JUICEFS,
    efs.EFS,
    fsx_lustre.FSX_LUSTRE,
)
"""Every tier backend, in the order the Platform builds them (within those built before or after the object
store)."""
NONE = "none"
"""The tier map's value of a tier left without a StorageClass."""

if TYPE_CHECKING:
    Backend = str
else:
    Backend = Literal[(*(r.name for r in REGISTERED), NONE)]
"""A tier map value: a registered backend's name, or ``none``."""


def get(name: str) -> Registration:
    """The registration of the backend called ``name``."""
    (found,) = [r for r in REGISTERED if r.name == name]
    return found


def serving(tier: Tier) -> list[str]:
    """The backends that may serve ``tier``."""
    return [r.name for r in REGISTERED if tier in r.serves]


def enabled(settings: Any) -> dict[str, bool]:
    """Which backends the stack (its settings tree) enables, by name."""
    return {r.name: r.is_on(settings) for r in REGISTERED}
