"""Node storage: the tolerations every storage driver's node plugin needs to reach tainted nodes.

GPU nodes usually carry a taint (GKE puts ``nvidia.com/gpu=present:NoSchedule`` on every GPU node; many EKS and
AKS GPU pools do too). A node plugin that does not tolerate it runs on no GPU node, and training pods there
cannot mount the tiers it serves. One setting (``nodeStorage.tolerations``) goes to every node plugin the
platform installs, each at the key its chart's values.yaml names (``NODE_PLUGIN_KEYS``), after the tolerations
the chart has there by default (so they are kept). Fluid's CSI node plugin tolerates every taint by default;
its FUSE pods take their tolerations from each Dataset (``spec.tolerations``, set by ``fluid_dataset``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from pydantic import Field

from ..common.sections import Problem, Section

_SUBDOMAIN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
QUALIFIED_NAME = rf"^({_SUBDOMAIN}/)?[A-Za-z0-9]([-A-Za-z0-9_.]{{0,61}}[A-Za-z0-9])?$"
"""A taint key: a label key, optionally prefixed by a DNS subdomain and '/' (e.g. ``nvidia.com/gpu``)."""
LABEL_VALUE = r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$"

NODE_PLUGIN_KEYS: dict[str, tuple[str, ...]] = {
    "juicefs-csi-driver": ("node.tolerations",),
    "topolvm": ("node.tolerations", "lvmd.tolerations"),
    "ceph-csi-drivers": (
        "operatorConfig.driverSpecDefaults.nodePlugin.tolerations",
        *(f"drivers.{driver}.nodePlugin.tolerations" for driver in ("rbd", "cephfs", "nfs", "nvmeof")),
    ),
}
"""Per chart, the values keys of its node plugins' tolerations (Ceph: each driver's, whose values.yaml sets `[]`,
and the defaults the operator fills in)."""
CHART_DEFAULTS: dict[tuple[str, str], list[dict[str, Any]]] = {
    ("juicefs-csi-driver", "node.tolerations"): [{"key": "CriticalAddonsOnly", "operator": "Exists"}],
}
"""Tolerations a chart's values.yaml sets at one of those keys, kept before the platform's."""


class Toleration(Section):
    """A Kubernetes toleration (core/v1 Toleration)."""

    key: str | None = Field(None, pattern=QUALIFIED_NAME)
    """Taint key to tolerate (e.g. `nvidia.com/gpu`); unset with `operator: Exists` tolerates every taint."""
    operator: Literal["Exists", "Equal"] = "Equal"
    """`Exists` matches any value of the key; `Equal` only `value`."""
    value: str | None = Field(None, pattern=LABEL_VALUE)
    """Taint value to match (`operator: Equal` only)."""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    """Taint effect to tolerate; unset tolerates every effect."""
    toleration_seconds: int | None = Field(None, ge=0)
    """How long a pod stays on a node that gets the taint (`effect: NoExecute` only); unset: forever."""

    def problems(self) -> list[Problem]:
        """The combinations the API server refuses (core/v1 validation of a toleration)."""
        found = []
        if self.operator == "Exists" and self.value:
            found.append(Problem("value", "expected no value with operator: Exists", self.value, "drop the value"))
        if self.operator == "Equal" and not self.key:
            hint = "set the taint's key, or use operator: Exists without a key to tolerate every taint"
            found.append(Problem("key", "expected a key with operator: Equal", self.key, hint))
        if self.toleration_seconds is not None and self.effect != "NoExecute":
            hint = "only a NoExecute taint evicts pods; drop tolerationSeconds or set effect: NoExecute"
            found.append(Problem("tolerationSeconds", "expected effect: NoExecute", self.effect, hint))
        return found

    def spec(self) -> dict[str, Any]:
        """The toleration as a pod spec carries it."""
        return self.model_dump(by_alias=True, exclude_none=True)


GPU_TOLERATION = Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")
"""Tolerates the taint GPU nodes usually carry (GKE's `nvidia.com/gpu=present:NoSchedule`, and many EKS/AKS pools)."""


class NodeStorageSettings(Section):
    """What the node plugins of the storage drivers (JuiceFS CSI, TopoLVM, Ceph CSI, Fluid) run with on nodes."""

    tolerations: list[Toleration] = [GPU_TOLERATION]
    """Taints the node plugins tolerate, so every tier mounts on tainted (GPU) nodes; default: `nvidia.com/gpu`."""

    def specs(self) -> list[dict[str, Any]]:
        """The tolerations as pod specs carry them."""
        return [t.spec() for t in self.tolerations]


def default_tolerations() -> list[dict[str, Any]]:
    """The default of ``nodeStorage.tolerations``, for components built without the platform's settings."""
    return NodeStorageSettings().specs()


def with_node_tolerations(chart: str, values: dict[str, Any], tolerations: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """``values`` with ``tolerations`` at each of ``chart``'s node plugin keys (after the chart's own defaults);
    none leaves the chart's."""
    if not tolerations:
        return values
    for key in NODE_PLUGIN_KEYS[chart]:
        *parents, leaf = key.split(".")
        at = values
        for part in parents:
            at = at.setdefault(part, {})
        at[leaf] = [*CHART_DEFAULTS.get((chart, key), []), *tolerations]
    return values
