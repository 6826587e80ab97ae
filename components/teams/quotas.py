"""Quotas: how much of each storage tier a team's namespace may claim, and the defaults its pods get.

A ResourceQuota per tier limits the requested storage and the number of claims of that tier's StorageClass
(the per-class quota resources ``<class>.storageclass.storage.k8s.io/requests.storage`` and
``.../persistentvolumeclaims``); a LimitRange gives containers that set no requests the default requests.
A per-class quota counts nothing of a claim with no class, an empty one or a class outside the tiers: the
platform's ValidatingAdmissionPolicy (``claim_class_policy``) refuses those in every team namespace. A
namespace-wide ``requests.storage`` total would count them too, but Fluid creates each dataset's claim
requesting 100Pi (class ``fluid``), which no such total admits.
The platform's environment profiles give every team the same defaults (``teams.quota``); a team's own
settings override them, and a workspace whose own claims exceed its quota is refused before anything is
created.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
from pydantic import Field

from ..common import kube
from ..common.sections import Problem, Quantity, Section
from ..tiers.storage_tiers import TIERS, Tier

STORAGE_CLASS_QUOTA = "{cls}.storageclass.storage.k8s.io/{resource}"
TEAM_LABEL = "ai-storage-platform/team"
"""Label of every team namespace (its value is the team's name): the claim policy and NetworkPolicies select by it."""
FLUID_CLASS = "fluid"
"""StorageClass name of the claims Fluid's controllers create for a dataset (their PV is Fluid's, pre-bound)."""
CLAIM_POLICY = "ai-storage-platform-team-claims"


class TierQuota(Section):
    """What a namespace may claim from one tier."""

    storage: Quantity | None = None
    """Total storage the tier's claims may request; unset for no limit."""
    claims: int | None = Field(None, ge=0, le=10000)
    """Number of claims of the tier; unset for no limit (0 forbids the tier)."""


class ContainerDefaults(Section):
    """What the LimitRange gives a container that sets no requests (or no memory limit)."""

    cpu_request: Quantity = "500m"
    """CPU request of a container that sets none."""
    memory_request: Quantity = "1Gi"
    """Memory request of a container that sets none."""
    memory_limit: Quantity | None = None
    """Memory limit of a container that sets none; unset for none (one requesting more would be refused)."""

    def problems(self) -> list[Problem]:
        """The default request fits under the default limit (the API server refuses such a LimitRange)."""
        if self.memory_limit and quantity(self.memory_request) > quantity(self.memory_limit):
            return [
                Problem(
                    "memoryLimit",
                    f"expected at least memoryRequest ({self.memory_request})",
                    self.memory_limit,
                    "raise memoryLimit, lower memoryRequest, or leave memoryLimit unset",
                )
            ]
        return []

    def spec(self) -> dict[str, Any]:
        """The LimitRange's Container item."""
        item: dict[str, Any] = {
            "type": "Container",
            "defaultRequest": {"cpu": self.cpu_request, "memory": self.memory_request},
        }
        if self.memory_limit:
            item["default"] = {"memory": self.memory_limit}
        return item


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
    container_defaults: ContainerDefaults = ContainerDefaults()
    """Requests (and an optional memory limit) a container that sets none gets (LimitRange)."""


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
    """The LimitRange ``spec``: default requests (and memory limit) of containers that set none."""
    return {"limits": [quota.container_defaults.spec()]}


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


def quota_left(quota: QuotaSettings, claims: dict[Tier, list[tuple[str, str]]]) -> dict[str, dict[str, Any]]:
    """Each tier's quota less ``claims`` (key, size): what a team's own stack may still claim (its
    ``workspace.storageQuota``; the platform's stack output ``teamQuotaLeft``)."""
    left: dict[str, dict[str, Any]] = {}
    for tier, q in quota.tiers.items():
        taken, entry = claims.get(tier, []), dict[str, Any]()
        if q.storage is not None:
            rest = max(0, int(quantity(q.storage) - sum(quantity(size) for _, size in taken)))
            entry["storage"] = f"{rest // 2**30}Gi" if rest % 2**30 == 0 else f"{rest // 2**20}Mi"
        if q.claims is not None:
            entry["claims"] = max(0, q.claims - len(taken))
        left[tier] = entry
    return left


def claim_rule(classes: Sequence[str], fluid_namespace: str | None) -> str:
    """The CEL rule a claim in a team namespace must pass: it names one of the tier ``classes`` (after the
    DefaultStorageClass admission plugin gave a claim without one the cluster's default class, if any), or it is
    a Fluid dataset's claim made by Fluid's controllers (service accounts of ``fluid_namespace``)."""
    listed = ", ".join(f"'{c}'" for c in classes)
    rule = f"object.spec.storageClassName in [{listed}]"
    if fluid_namespace:
        by_fluid = f"request.userInfo.username.startsWith('system:serviceaccount:{fluid_namespace}:')"
        rule += f" || (object.spec.storageClassName == '{FLUID_CLASS}' && {by_fluid})"
    return f"has(object.spec.storageClassName) && ({rule})"


def claim_policy_spec(classes: Sequence[str], fluid_namespace: str | None) -> dict[str, Any]:
    """The ValidatingAdmissionPolicy ``spec``: new claims pass ``claim_rule`` or are refused."""
    message = f"a claim in a team namespace must name a tier StorageClass ({', '.join(classes) or 'none'})"
    return {
        "failurePolicy": "Fail",
        "matchConstraints": {
            "resourceRules": [
                {
                    "apiGroups": [""],
                    "apiVersions": ["v1"],
                    "operations": ["CREATE"],
                    "resources": ["persistentvolumeclaims"],
                }
            ]
        },
        "validations": [
            {"expression": claim_rule(classes, fluid_namespace), "message": message, "reason": "Forbidden"}
        ],
    }


def claim_binding_spec() -> dict[str, Any]:
    """The binding ``spec``: the claim policy denies in every namespace that carries the team label."""
    team = {"matchExpressions": [{"key": TEAM_LABEL, "operator": "Exists"}]}
    return {"policyName": CLAIM_POLICY, "validationActions": ["Deny"], "matchResources": {"namespaceSelector": team}}


def claim_class_policy(
    name: str, classes: Sequence[str], fluid_namespace: str | None, parent: pulumi.Resource
) -> k8s.admissionregistration.v1.ValidatingAdmissionPolicyBinding:
    """The ValidatingAdmissionPolicy (GA in Kubernetes 1.30) refusing, in team namespaces, claims that no tier's
    quota counts, and its binding."""
    meta = {"name": CLAIM_POLICY, "labels": kube.labels("team-claims", "quota")}
    policy = k8s.admissionregistration.v1.ValidatingAdmissionPolicy(
        f"{name}-claim-policy",
        metadata=meta,
        spec=claim_policy_spec(classes, fluid_namespace),
        opts=pulumi.ResourceOptions(parent=parent),
    )
    return k8s.admissionregistration.v1.ValidatingAdmissionPolicyBinding(
        f"{name}-claim-policy-binding",
        metadata=meta,
        spec=claim_binding_spec(),
        opts=pulumi.ResourceOptions(parent=parent, depends_on=[policy]),
    )
