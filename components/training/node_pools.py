"""Node pools: groups of nodes a team job asks for by name (a GPU product, a spot pool), defined once by the platform.

The platform stack lists its pools (``cluster.nodePools``: the labels every node of a pool has, the tolerations
of its taints) and exports them (``nodePools``); a team stack copies the output (``workspace.nodePools``) and its
job names one (``job.nodePool``): the pods get the labels as their ``nodeSelector`` and the tolerations. A pool's
taints must be tolerated by the storage drivers' node plugins too (``nodeStorage.tolerations``), or its pods could
mount no tier.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any

from pydantic import Field, StringConstraints

from ..common.sections import DnsLabel, Problem, Section
from ..tiers.node_storage import LABEL_VALUE, QUALIFIED_NAME, Toleration

LabelKey = Annotated[str, StringConstraints(pattern=QUALIFIED_NAME)]
LabelValue = Annotated[str, StringConstraints(pattern=LABEL_VALUE)]


class NodePool(Section):
    """A group of nodes team jobs may ask for by name."""

    labels: dict[LabelKey, LabelValue] = Field(min_length=1)
    """Labels every node of the pool has, the pods' `nodeSelector` (e.g. `nvidia.com/gpu.product:
    NVIDIA-H100-80GB-HBM3`, or the node group's label on EKS)."""
    tolerations: list[Toleration] = []
    """Tolerations of the pool's taints, which its pods get (e.g. a spot pool's `spot=true:NoSchedule`)."""

    def spec(self) -> dict[str, Any]:
        """The pool as the platform exports it and a team stack copies it."""
        return self.model_dump(by_alias=True, exclude_none=True)


def covers(given: Toleration, needed: Toleration) -> bool:
    """``given`` tolerates every taint ``needed`` tolerates (core/v1 ``Toleration.ToleratesTaint``, per taint)."""
    effect = given.effect is None or given.effect == needed.effect
    if given.key is None:
        return given.operator == "Exists" and effect
    same_key = given.key == needed.key
    value = given.operator == "Exists" or (needed.operator == "Equal" and given.value == needed.value)
    return same_key and value and effect


def untolerated_pools(pools: Mapping[str, NodePool], node_plugins: Sequence[Toleration]) -> list[Problem]:
    """Pools with a taint the storage drivers' node plugins do not tolerate."""
    found = []
    for name, pool in pools.items():
        for i, needed in enumerate(pool.tolerations):
            if not any(covers(given, needed) for given in node_plugins):
                hint = (
                    "the CSI node plugins (JuiceFS, TopoLVM, Ceph) would not run on the pool's nodes, and its pods "
                    "could mount no tier: add the toleration to nodeStorage.tolerations"
                )
                expected = "expected a taint nodeStorage.tolerations tolerates"
                found.append(Problem(f"cluster.nodePools.{name}.tolerations[{i}]", expected, needed.spec(), hint))
    return found


def pool_problem(name: DnsLabel | None, pools: Mapping[str, NodePool]) -> Problem | None:
    """A job's pool that the platform does not have."""
    if name is None or name in pools:
        return None
    hint = "copy the platform stack's output nodePools into workspace.nodePools (the platform's cluster.nodePools)"
    return Problem("job.nodePool", f"expected one of the platform's pools ({', '.join(pools) or 'none'})", name, hint)
