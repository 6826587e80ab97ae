"""Capacity: what the stack promises on each tier against what its disks hold, refused when it does not add up.

Promised on a tier: every vended team's quota of it (``teams.workspaces[].quota``), the training checkpoint claim
(checkpoint tier) and an acceptance claim per tested tier. Held, per backend, from the hardware the stack states
(``capacity``): a Ceph pool keeps ``replicaSize`` copies on the OSDs of its device class, and Ceph warns at its
``mon_osd_nearfull_ratio`` (0.85) and stops writes at 0.95, so a class holds raw / replicaSize x 0.85 (pools on
every OSD share the sum of all classes); the hot tier is TopoLVM's volume group on each NVMe node less the node
cache volume carved from it; an object store on S3 has no bound, MinIO its volume, Ceph RGW the Ceph class its
pools use. A backend whose hardware the stack does not state is shown, not checked. docs/tiers.md shows each stack's
table (``capacity_rows``).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from ..common.kube import gib_text, quantity_bytes
from ..common.sections import DnsLabel, Problem, Quantity, Section
from . import registry
from .backend import TIERS, Group, Tier


class CapacitySettings(Section):
    """What the cluster's disks hold, for the capacity arithmetic; a backend left unset is not checked."""

    ceph_raw: dict[DnsLabel, Quantity] = {}
    """Raw capacity of the Ceph OSDs of each device class (`ssd: 92Ti`, `nvme: 42Ti`)."""
    nvme_nodes: int | None = Field(None, ge=1, le=100_000)
    """Nodes with the hot tier's TopoLVM volume group (`localNvme.nodeSelector`'s)."""
    volume_group_gib: int | None = Field(None, ge=1, le=10_000_000)
    """Size of that volume group on each of them, GiB (the node cache volume is carved from it)."""


def promised(s: Any) -> dict[Tier, list[tuple[str, float]]]:
    """What the stack promises on each tier: (what, bytes)."""
    out: dict[Tier, list[tuple[str, float]]] = {tier: [] for tier in TIERS}
    for team in s.teams.workspaces:
        for tier, quota in team.quota.tiers.items():
            if quota.storage is not None:
                out[tier].append((f"team {team.name}'s quota", float(quantity_bytes(quota.storage))))
    if s.training.enabled:
        out["checkpoint"].append(("training.checkpointSize", float(quantity_bytes(s.training.checkpoint_size))))
    if s.acceptance.enabled:
        for tier in TIERS:
            out[tier].append(("acceptance.volumeSize", float(quantity_bytes(s.acceptance.volume_size))))
    return out


def groups(s: Any) -> dict[str, Group]:
    """Each store of the stack's tiers, with the tiers' promises added up."""
    out: dict[str, Group] = {}
    for tier, things in promised(s).items():
        backend = getattr(s.tiers, tier)
        if backend == "none":
            continue
        group = registry.get(backend).held(s, tier)
        out.setdefault(group.name, group).promised.extend((f"{tier}: {what}", size) for what, size in things)
    return out


def capacity_problems(s: Any) -> list[Problem]:
    """Each store holds what the stack promises on it, and the node cache volume fits its volume group."""
    found = []
    for group in groups(s).values():
        total = sum(size for _, size in group.promised)
        if group.capacity is None or total <= group.capacity:
            continue
        held = gib_text(group.capacity)
        parts = " + ".join(f"{gib_text(size)} ({what})" for what, size in group.promised)
        expected = f"expected {group.name} to hold {parts} = {gib_text(total)}: {group.held} = {held}"
        hint = "add disks (and say so here), lower the teams' quotas (teams.quota) or the claims, or move a tier"
        found.append(Problem(group.key, expected, held, hint))
    nvme, group_gib = s.local_nvme, s.capacity.volume_group_gib
    home = nvme.cache_volume if nvme.enabled and nvme.cache_volume.enabled else None
    if home is not None and group_gib is not None and home.size_gib >= group_gib:
        hint = "the hot tier's volumes come out of the same volume group: shrink the cache volume"
        expected = f"expected less than the volume group (capacity.volumeGroupGib {group_gib})"
        found.append(Problem("localNvme.cacheVolume.sizeGib", expected, home.size_gib, hint))
    return found


def capacity_rows(s: Any) -> list[str]:
    """The stack's capacity table (markdown rows: store, promised, held, left)."""
    rows = []
    for group in groups(s).values():
        total = sum(size for _, size in group.promised)
        parts = "; ".join(f"{what} {gib_text(size)}" for what, size in group.promised) or "nothing"
        held = f"{group.held} = {gib_text(group.capacity)}" if group.capacity is not None else group.held
        left = gib_text(group.capacity - total) if group.capacity is not None else "not checked"
        rows.append(f"| {group.name} | {parts} (total {gib_text(total)}) | {held} | {left} |")
    return rows
