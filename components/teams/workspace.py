"""The namespace the platform vended to a team, as the team's own project sees it: what it copies from the
platform stack's outputs (job kinds, queue capability, vended claims, the quota left) and how its pods run.
"""

from __future__ import annotations

from pydantic import Field

from ..common import kube
from ..common.sections import DnsLabel, Problem, Section
from ..tiers.storage_tiers import NAME_PREFIX, Tier
from ..training.jobs import Kind
from ..training.node_pools import NodePool
from ..training.volcano import QueueResources
from .namespace_rules import namespace_problem, platform_defaults
from .quotas import TierQuota


class WorkspaceSettings(Section):
    """The namespace the platform vended to the team, and how its pods and claims are guarded."""

    namespace: DnsLabel = "team"
    """Namespace the platform vended to the team (`teams.workspaces`): the claims, snapshots and job go there."""
    run_as_user: int = Field(kube.UID, ge=1, le=2147483647)
    """UID, GID and fsGroup the training pods run as (non-root, for the restricted standard)."""
    tier_prefix: str = Field("", pattern=NAME_PREFIX)
    """The platform's `tiers.namePrefix`: the claims use the `<prefix>cold`, `<prefix>checkpoint` and `<prefix>hot`
    classes."""
    protect: bool = False
    """Protect and retain the dataset and checkpoint claims (a `pulumi destroy` keeps the data)."""
    job_kinds: list[Kind] = ["trainjob", "volcano"]
    """The job kinds the platform runs: its stack output `jobKinds` (from `training.operators` and `volcano`)."""
    queue_capability: QueueResources | None = None
    """The capability of the team's Queue (the platform's `teams.workspaces[].queue.capability`, stack output
    `teamQueues`): a gang that asks for more is refused; unset: not checked."""
    kubernetes_version: str = Field("1.33", pattern=r"^1\.(2[5-9]|3[0-7])$")
    """The cluster's Kubernetes minor version (the platform's `cluster.kubernetesVersion`): image volumes need 1.33."""
    image_volumes: bool = False
    """The cluster's `ImageVolume` feature gate is on (off by default on 1.33 and 1.34, where an API server without it
    silently drops image volumes; on from 1.35)."""
    runtimes: list[DnsLabel] | None = None
    """The platform's ClusterTrainingRuntimes (its stack output `trainingRuntimes`): what a TrainJob's `job.runtime`
    may name; unset: not checked."""
    node_pools: dict[DnsLabel, NodePool] = {}
    """The platform's node pools (its stack output `nodePools`): what `job.nodePool` may name."""
    vended_claims: list[DnsLabel] = []
    """The claims the platform vended into the namespace (its stack output `teamClaims.<team>`: shared datasets,
    `space`): what a job volume's `claim` may name."""
    storage_quota: dict[Tier, TierQuota] = {}
    """What the namespace's quota leaves to this stack on each tier (the platform's output `teamQuotaLeft.<team>`:
    its quota less the claims it vended); the stack's claims and its pods' per-pod claims must fit; a tier not
    listed is not checked."""

    def problems(self) -> list[Problem]:
        """A namespace of the team's own: not one Kubernetes reserves, nor one a platform stack uses or trusts
        with its default settings (this project does not read the platform's stack)."""
        problem = namespace_problem("namespace", self.namespace, platform_defaults())
        return [problem] if problem else []

    def runtime_problem(self, runtime: str) -> Problem | None:
        """A TrainJob's runtime the platform does not have (its pods would never be created)."""
        if self.runtimes is None or runtime in self.runtimes:
            return None
        hint = (
            "the Trainer refuses a TrainJob whose runtime does not exist: copy the platform stack's output "
            "trainingRuntimes into workspace.runtimes, and name one of them (the platform's training.runtimes)"
        )
        listed = ", ".join(self.runtimes) or "none"
        return Problem("job.runtime", f"expected one of the platform's runtimes ({listed})", runtime, hint)
