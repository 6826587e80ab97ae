"""Namespaces no team may be given: the ones Kubernetes reserves and the ones the platform uses or trusts.

Kubernetes keeps ``default`` and every ``kube-*`` namespace (``kube-system``, ``kube-public``,
``kube-node-lease``) for the cluster itself. The platform's own namespaces hold its keys and controllers, and
its NetworkPolicies admit some namespaces by name (the Prometheus namespace reaches the metadata engine's
exporters and MinIO): a team placed in one of them would be inside the walls meant to keep it out. The same
rule holds for a platform stack's teams (``teams.workspaces``, against that stack's settings) and for a team's
own project (``workspace.namespace``, against the platform's defaults, since it does not read the platform's
stack).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from ..common.sections import Problem, Section
from ..observability.monitoring import MonitoringSettings
from ..tiers.acceptance import AcceptanceSettings
from ..tiers.ceph import RookCephSettings
from ..tiers.juicefs import JuiceFSSettings
from ..tiers.local_nvme import LocalNVMeSettings
from ..tiers.metadata_engine import MetadataSettings
from ..tiers.object_store import ObjectStoreSettings
from ..training.fluid import FluidSettings
from ..training.trainer import TrainingSettings
from ..training.volcano import VolcanoSettings
from .network_policies import NetworkPolicySettings

KUBERNETES_RESERVED = ("default", "kube-system", "kube-public", "kube-node-lease")
"""Namespaces every cluster has; any other ``kube-`` name is reserved for Kubernetes too."""


def namespace_settings(settings: Section, at: str = "") -> dict[str, str]:
    """Every namespace a settings tree names (keys ending in ``namespace``), namespace -> its key path, the
    first key naming it; the team workspaces (``teams``) are left out."""
    found: dict[str, str] = {}
    for name, info in type(settings).model_fields.items():
        key = f"{at}{info.alias or name}"
        value: Any = getattr(settings, name)
        if key == "teams":
            continue
        if key.lower().endswith("namespace") and isinstance(value, str):
            found.setdefault(value, key)
        items = value if isinstance(value, list) else [value]
        for i, item in enumerate(items):
            if isinstance(item, Section):
                inner = namespace_settings(item, f"{key}[{i}]." if isinstance(value, list) else f"{key}.")
                found = {**inner, **found}
    return found


PLATFORM_SECTIONS: dict[str, type[Section]] = {
    "objectStore": ObjectStoreSettings,
    "metadata": MetadataSettings,
    "juicefs": JuiceFSSettings,
    "rookCeph": RookCephSettings,
    "localNvme": LocalNVMeSettings,
    "acceptance": AcceptanceSettings,
    "volcano": VolcanoSettings,
    "training": TrainingSettings,
    "fluid": FluidSettings,
    "monitoring": MonitoringSettings,
    "networkPolicies": NetworkPolicySettings,
}
"""The sections of a platform stack's settings that name namespaces (the settings tree sits above this module)."""


@functools.cache
def platform_defaults() -> dict[str, str]:
    """The namespaces a platform stack uses or trusts with its default settings, each with its key."""
    found: dict[str, str] = {}
    for key, section in PLATFORM_SECTIONS.items():
        found = {**namespace_settings(section(), f"{key}."), **found}
    return found


def namespace_problem(key: str, namespace: str, platform: Mapping[str, str]) -> Problem | None:
    """Why a team may not have ``namespace`` (at settings ``key``), given the platform's namespaces (namespace ->
    the key that names it); None when it may."""
    if namespace in KUBERNETES_RESERVED or namespace.startswith("kube-"):
        return Problem(
            key,
            "expected a namespace Kubernetes does not reserve (not default, not kube-*)",
            namespace,
            "those hold the cluster's own components; give the team a namespace of its own (e.g. its name)",
        )
    if namespace in platform:
        return Problem(
            key,
            f"expected a namespace the platform does not use or trust (it is {platform[namespace]})",
            namespace,
            "the platform's controllers, keys and network rules live there; give the team a namespace of its own",
        )
    return None


def team_namespace_problems(platform: Any) -> list[Problem]:
    """The teams of a platform stack (``PlatformSettings``) given a namespace Kubernetes reserves or the stack uses
    or trusts; one the stack's components create is left to the rule against namespaces used twice."""
    named = namespace_settings(platform)
    created = {ns for key, ns in platform.namespaces().items() if not key.startswith("teams.")}
    found = []
    for i, team in enumerate(platform.teams.workspaces):
        key = f"teams.workspaces[{i}].{'namespace' if team.namespace else 'name'}"
        problem = None if team.namespace_name in created else namespace_problem(key, team.namespace_name, named)
        found += [problem] if problem else []
    return found
