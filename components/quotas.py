"""Quotas: how much of each storage tier a team's namespace may claim, and the defaults its pods get.

A ResourceQuota per tier limits the requested storage and the number of claims of that tier's StorageClass
(the per-class quota resources ``<class>.storageclass.storage.k8s.io/requests.storage`` and
``.../persistentvolumeclaims``); a LimitRange gives containers that set no requests or limits the defaults.
The platform's environment profiles give every team the same defaults (``teams.quota``); a team's own
settings override them, and a workspace whose own claims exceed its quota is refused before anything is
created.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from . import kube
from .section import Problem, Quantity, Resources, Section
from .storage_tiers import TIERS, Tier

STORAGE_CLASS_QUOTA = "{cls}.storageclass.storage.k8s.io/{resource}"


class TierQuota(Section):
    """What a namespace may claim from one tier."""

    storage: Quantity | None = None
    """Total storage the tier's claims may request; unset for no limit."""
    claims: int | None = Field(None, ge=0, le=10000)
    """Number of claims of the tier; unset for no limit (0 forbids the tier)."""


class QuotaSettings(Section):
    """Storage quotas per tier, and the container defaults of the namespace."""

    tiers: dict[Tier, TierQuota] = {
        "hot": TierQuota(storage="2Ti", claims=16),
        "warm": TierQuota(storage="10Ti", claims=16),
        "cold": TierQuota(storage="50Ti", claims=8),
        "checkpoint": TierQuota(storage="10Ti", claims=8),
        "block": TierQuota(storage="1Ti", claims=8),
    }
    """Quota per tier (`hot`, `warm`, `cold`, `checkpoint`, `block`); a tier not listed has none."""
    container_defaults: Resources = Resources(cpu_request="500m", memory_request="1Gi", memory_limit="4Gi")
    """Requests and limits a container that sets none gets (LimitRange)."""


def quantity(value: str) -> float:
    """A storage quantity in bytes, for comparisons."""
    return float(kube.quantity_bytes(value))


def quota_spec(quota: QuotaSettings, prefix: str) -> dict[str, Any]:
    """The ResourceQuota ``spec``: per tier, the StorageClass `<prefix><tier>`'s requested storage and claims."""
    hard: dict[str, str] = {}
    for tier in TIERS:
        q = quota.tiers.get(tier)
        if q is None:
            continue
        cls = f"{prefix}{tier}"
        if q.storage is not None:
            hard[STORAGE_CLASS_QUOTA.format(cls=cls, resource="requests.storage")] = q.storage
        if q.claims is not None:
            hard[STORAGE_CLASS_QUOTA.format(cls=cls, resource="persistentvolumeclaims")] = str(q.claims)
    return {"hard": hard}


def limit_range_spec(quota: QuotaSettings) -> dict[str, Any]:
    """The LimitRange ``spec``: default requests and limits of containers that set none."""
    resources = quota.container_defaults.spec()
    return {"limits": [{"type": "Container", "default": resources["limits"], "defaultRequest": resources["requests"]}]}


def over_quota(quota: QuotaSettings, claims: dict[Tier, list[tuple[str, str]]]) -> list[Problem]:
    """The tiers whose ``claims`` (key, size) exceed their quota, named by the first claim's key."""
    found = []
    for tier, tier_claims in claims.items():
        q = quota.tiers.get(tier)
        if q is None or not tier_claims:
            continue
        key = tier_claims[0][0]
        hint = f"raise quota.tiers.{tier} or request less"
        if q.claims is not None and len(tier_claims) > q.claims:
            expected = f"at most {q.claims} claim(s) on the {tier} tier (quota.tiers.{tier}.claims)"
            found.append(Problem(key, f"expected {expected}", len(tier_claims), hint))
        total = sum(quantity(size) for _, size in tier_claims)
        if q.storage is not None and total > quantity(q.storage):
            sizes = " + ".join(size for _, size in tier_claims)
            expected = f"expected at most {q.storage} on the {tier} tier (quota.tiers.{tier}.storage)"
            found.append(Problem(key, expected, sizes, hint))
    return found
