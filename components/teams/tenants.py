"""Teams: the namespaces the platform vends to its teams, and what each gets in it.

Quotas and credentials are the platform's controls: a team that creates its own namespace sets its own quota,
and creating object-store credentials needs rights on the bucket that no team may hold. So the platform stack
creates, for each team in ``teams.workspaces``:

- the namespace, with Pod Security labels and ``ai-storage-platform/team: <name>``, its ResourceQuota and
  LimitRange (``quotas``) and the team's Volcano Queue (cluster-scoped: a team cannot create it);
- for offsite checkpoint copies: the ServiceAccount ``offsite`` (with the IAM role annotation under IRSA), the
  ConfigMap ``offsite-target`` (where copies go) and the Secret ``offsite-credentials`` with keys that reach
  only ``checkpoints/<namespace>/`` of the bucket; for trained models the same three (``artifacts``) for
  ``artifacts/<team>/``, and read-only ones in each of its ``artifactReaders`` (``artifacts``);
- read-only claims on the shared datasets it may read: static JuiceFS PersistentVolumes that mount only
  ``/datasets/<name>``, or Fluid reference Datasets (``dataset://``) of the platform's Fluid datasets; and its
  writable space, a claim on ``/teams/<name>``, each with the team's cache share and limits (``team_io``). The
  JuiceFS volume Secret (metadata URL, bucket keys) stays in the CSI driver's namespace.

The team's own project (``team.TeamWorkspace``) then works inside the namespace; see docs/security.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
from pydantic import Field, model_validator

from ..common import kube
from ..common.sections import DnsLabel, Problem, Quantity, Section, merge
from ..protection.checkpoints import OFFSITE_PREFIX
from ..tiers.juicefs import JuiceFS
from ..tiers.object_store import ObjectStore
from ..tiers.storage_tiers import Tier
from ..training import fluid_dataset, volcano
from . import artifacts
from .quotas import TEAM_LABEL, QuotaSettings, limit_range_spec, over_quota, quota_spec
from .team_io import TeamIoSettings

OFFSITE_ACCOUNT = "offsite"
"""ServiceAccount the team's offsite copies run as (annotated with the team's IAM role under IRSA)."""
OFFSITE_TARGET = "offsite-target"
"""ConfigMap with `url` (the team's prefix of the bucket, as `juicefs sync` names it) and `sync-flags`."""
OFFSITE_CREDENTIALS = "offsite-credentials"
"""Secret with `access-key` and `secret-key` that reach only the team's prefix (none under IRSA)."""
SPACE_CLAIM = "space"
"""Claim of the team's writable directory `/teams/<name>`."""
DATASETS_DIR = "/datasets"
TEAMS_DIR = "/teams"
STATIC_REQUEST = "1Gi"
"""What a read-only dataset claim requests: JuiceFS enforces no size on a static volume; the claim counts
against the team's cold-tier quota (one claim, this much)."""


class TeamNamespace(Section):
    """A team the platform vends a namespace to."""

    name: DnsLabel = Field(max_length=58)
    """Team name (at most 58 characters): its Queue, its namespace label and its directory `/teams/<name>`."""
    namespace: DnsLabel | None = None
    """Namespace vended to the team; unset: the team's name."""
    pod_security: kube.PodSecurity = "restricted"
    """Pod Security Standard the namespace enforces."""
    quota: QuotaSettings = QuotaSettings()
    """The team's storage quotas and container defaults: what it sets overrides `teams.quota` key by key."""
    queue: volcano.QueueShare = volcano.QueueShare()
    """Weight, capability, guarantee and deserved share of the team's Volcano Queue (named after the team;
    created when `volcano.enabled`)."""
    datasets: list[DnsLabel] = []
    """Shared datasets the team may read: each `<name>` is a read-only claim `<name>` that mounts only
    `/datasets/<name>` of the JuiceFS volume."""
    fluid_datasets: list[DnsLabel] = []
    """Platform Fluid datasets (`fluid.datasets` names) the team may read: each is a read-only reference Dataset
    (`dataset://`) whose claim carries the dataset's name."""
    space: Quantity | None = None
    """Size of the team's writable claim `space` on `/teams/<name>` of the JuiceFS volume (counted against the
    cold-tier quota); unset: none."""
    offsite: bool = True
    """Vend what offsite checkpoint copies need: the `offsite` ServiceAccount, the `offsite-target` ConfigMap and
    credentials that reach only `checkpoints/<namespace>/`."""
    artifacts: bool = True
    """Vend keys that write only `artifacts/<name>/` of the bucket, where the team publishes trained models
    (ServiceAccount `artifacts`, Secret `artifacts-credentials`, ConfigMap `artifacts-target`)."""
    artifact_readers: list[DnsLabel] = []
    """Namespaces of the services that serve the team's models: each gets read-only keys to `artifacts/<name>/`
    (`artifacts-<name>-credentials`). Each must exist, or be another team's namespace."""
    io: TeamIoSettings = TeamIoSettings()
    """The team's share of the nodes' JuiceFS cache and its bandwidth limits on its datasets and space."""

    @property
    def namespace_name(self) -> str:
        """The namespace vended to the team."""
        return self.namespace or self.name

    def claims(self) -> list[str]:
        """The claims the platform creates in the namespace."""
        return [*self.datasets, *self.fluid_datasets, *([SPACE_CLAIM] if self.space else [])]

    def problems(self) -> list[Problem]:
        """Claim names used twice, and vended claims over the team's cold-tier quota."""
        found = []
        seen: set[str] = set()
        for claim in self.claims():
            if claim in seen:
                hint = f"a claim name is unique in a namespace ('{SPACE_CLAIM}' is the writable space's)"
                found.append(Problem("datasets", "expected each dataset once", claim, hint))
            seen.add(claim)
        readers = self.artifact_readers
        if len(set(readers)) < len(readers) or (readers and not self.artifacts):
            expected = "distinct namespaces, with artifacts: true" if readers else "no readers"
            hint = "readers read what the team publishes: name each serving namespace once and keep artifacts on"
            found.append(Problem("artifactReaders", f"expected {expected}", readers, hint))
        return found + over_quota(self.quota, self.vended_requests())

    def vended_requests(self) -> dict[Tier, list[tuple[str, str]]]:
        """What the platform's claims in the namespace request, by tier (settings key, size)."""
        cold = [("space", self.space)] if self.space else []
        return {"cold": cold + [(f"datasets[{i}]", STATIC_REQUEST) for i in range(len(self.datasets))]}


class TeamsSettings(Section):
    """The team namespaces the platform vends, and the defaults they start from."""

    quota: QuotaSettings = QuotaSettings()
    """Default storage quotas per tier and container defaults of a team's namespace."""
    workspaces: list[TeamNamespace] = []
    """Teams the platform vends a namespace to, each with its keys (see docs/components/tenants.md)."""

    @model_validator(mode="before")
    @classmethod
    def _team_quotas(cls, data: Any) -> Any:
        """Each workspace's `quota` starts from `teams.quota` (and the code defaults), merged key by key."""
        if not isinstance(data, Mapping) or not isinstance(data.get("workspaces"), list):
            return data
        base = data.get("quota", {})
        if not isinstance(base, Mapping):
            return data  # reported at teams.quota
        base = merge(QuotaSettings().model_dump(by_alias=True), base)
        workspaces = [
            {**w, "quota": merge(base, w.get("quota", {}))}
            if isinstance(w, Mapping) and isinstance(w.get("quota", {}), Mapping)
            else w
            for w in data["workspaces"]
        ]
        return {**data, "workspaces": workspaces}


def team_problems(
    teams: TeamsSettings,
    volcano_queues: Sequence[str],
    volumes: bool,
    fluid: Sequence[fluid_dataset.DatasetSettings] | None,
) -> list[Problem]:
    """Team names used twice, queues Volcano or the platform already own, datasets without JuiceFS and a cold
    tier (``volumes``), Fluid datasets the platform does not have (``fluid``: its datasets, None when Fluid is
    off)."""
    found = []
    seen: set[str] = set()
    for i, t in enumerate(teams.workspaces):
        key = f"teams.workspaces[{i}]"
        if t.name in seen:
            found.append(Problem(f"{key}.name", "expected a team name used once", t.name, "merge the two entries"))
        seen.add(t.name)
        if t.name in (*volcano.RESERVED_QUEUES, *volcano_queues):
            hint = "the team's Queue carries its name: Volcano owns default and root, volcano.queues the others"
            found.append(Problem(f"{key}.name", "expected a name no other Queue has", t.name, hint))
        if (t.datasets or t.space) and not volumes:
            hint = "the datasets and the writable space are directories of the JuiceFS volume, claimed on the cold tier"
            expected = "expected juicefs.enabled: true and a backend for tiers.cold"
            found.append(Problem(f"{key}.datasets", expected, t.datasets, hint))
        names = [d.name for d in fluid or []]
        for j, d in enumerate(t.fluid_datasets):
            if names.count(d) != 1:
                expected = f"expected the name of one of fluid.datasets ({', '.join(names) or 'none'})"
                hint = "a team reads a Fluid dataset the platform caches; enable fluid and add the dataset there"
                found.append(Problem(f"{key}.fluidDatasets[{j}]", expected, d, hint))
    return found


@dataclass
class TeamsArgs:
    """Inputs of Teams."""

    settings: TeamsSettings
    tier_prefix: str
    """The platform's `tiers.namePrefix` (the quotas and the static claims use the `<prefix><tier>` classes)."""
    object_store: ObjectStore
    juicefs: JuiceFS | None = None
    """The JuiceFS volume the datasets and writable spaces are directories of."""
    volcano: pulumi.Resource | None = None
    """The Volcano release (installs the Queue CRD); None: no Queues."""
    fluid: pulumi.Resource | None = None
    """The Fluid component (its release and the datasets teams reference)."""
    fluid_datasets: Sequence[fluid_dataset.DatasetSettings] = ()
    """The platform's Fluid datasets."""
    protect: bool = False
    """Protect and retain the vended volumes and claims (`cluster.protectStatefulResources`)."""


class Teams(pulumi.ComponentResource):
    """The team namespaces, each with its quotas, Queue, offsite access, dataset claims and writable space."""

    namespaces: dict[str, pulumi.Output[str]]
    """The namespace vended to each team, by team name."""

    def __init__(self, name: str, args: TeamsArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("ai-storage:tenants:Teams", name, None, opts)
        self.namespaces = {}
        self._made: dict[str, pulumi.Resource] = {}
        for team in args.settings.workspaces:
            self.namespaces[team.name] = self._team(f"{name}-{team.name}", team, args)
        after = {ns: pulumi.ResourceOptions(parent=self, depends_on=[made]) for ns, made in self._made.items()}
        for team in args.settings.workspaces:  # once every vended namespace exists: readers may be teams
            if team.artifacts:
                child = after[team.namespace_name]
                artifacts.vend(
                    f"{name}-{team.name}",
                    team.name,
                    team.namespace_name,
                    team.artifact_readers,
                    args.object_store,
                    child,
                    after,
                )
        self.register_outputs({"namespaces": self.namespaces})

    def _team(self, name: str, t: TeamNamespace, args: TeamsArgs) -> pulumi.Output[str]:
        ns_name = t.namespace_name
        # Protected with the stack's data: removing a team must not delete its claims with its namespace
        # (docs/runbook.md#retire-a-team).
        ns = kube.namespace(f"{name}-ns", ns_name, t.pod_security, self, {TEAM_LABEL: t.name}, args.protect)
        self._made[ns_name] = ns
        child = pulumi.ResourceOptions(parent=self, depends_on=[ns])
        labels = {**kube.labels("team", "quota"), TEAM_LABEL: t.name}
        meta = {"name": "storage", "namespace": ns_name, "labels": labels}
        k8s.core.v1.ResourceQuota(
            f"{name}-quota", metadata=meta, spec=quota_spec(t.quota, args.tier_prefix), opts=child
        )
        meta = {"name": "defaults", "namespace": ns_name, "labels": labels}
        k8s.core.v1.LimitRange(f"{name}-limits", metadata=meta, spec=limit_range_spec(t.quota), opts=child)
        if args.volcano is not None:
            queue = volcano.QueueSettings(name=t.name, **dict(t.queue))
            volcano.queue(f"{name}-queue", queue, pulumi.ResourceOptions(parent=self, depends_on=[args.volcano]))
        if t.offsite:
            self._offsite(name, t, args.object_store, child)
        if args.juicefs is not None:
            self._volumes(name, t, args, args.juicefs, ns)
        physical = {d.name: d for d in args.fluid_datasets}
        for dataset in t.fluid_datasets:
            self._reference(f"{name}-{dataset}", physical[dataset], ns_name, t.name, args.fluid, ns)
        return ns.metadata.name

    def _offsite(self, name: str, t: TeamNamespace, store: ObjectStore, opts: pulumi.ResourceOptions) -> None:
        """Access to the team's prefix of the bucket only (``ObjectStore.scoped_access``), delivered into the
        namespace (``ObjectStore.deliver``)."""
        ns_name = t.namespace_name
        access = store.scoped_access(f"team-{t.name}", f"{OFFSITE_PREFIX}{ns_name}/", (ns_name, OFFSITE_ACCOUNT))
        labels = {**kube.labels("checkpoint-offsite", t.name), TEAM_LABEL: t.name}
        names = (OFFSITE_ACCOUNT, OFFSITE_CREDENTIALS, OFFSITE_TARGET)
        store.deliver(f"{name}-offsite", access, ns_name, names, labels, opts)

    def _volumes(self, name: str, t: TeamNamespace, args: TeamsArgs, juicefs: JuiceFS, ns: pulumi.Resource) -> None:
        """Read-only claims on `/datasets/<name>`, and the writable claim on `/teams/<team>`."""
        for dataset in t.datasets:
            path = f"{DATASETS_DIR}/{dataset}"
            self._static(f"{name}-dataset-{dataset}", t, dataset, path, STATIC_REQUEST, True, args, juicefs, ns)
        if t.space:
            path = f"{TEAMS_DIR}/{t.name}"
            self._static(f"{name}-space", t, SPACE_CLAIM, path, t.space, False, args, juicefs, ns)

    def _static(
        self,
        name: str,
        t: TeamNamespace,
        claim: str,
        path: str,
        size: str,
        read_only: bool,
        args: TeamsArgs,
        juicefs: JuiceFS,
        ns: pulumi.Resource,
    ) -> None:
        """A static PersistentVolume of ``path`` on the JuiceFS volume bound to ``claim`` in the team's namespace,
        and the claim (cold-tier class: the quota counts it; ``volumeName`` keeps the provisioner away)."""
        ns_name = t.namespace_name
        volume = f"team.{ns_name}.{claim}"
        labels = {**kube.labels("team", "dataset" if read_only else "space"), TEAM_LABEL: t.name}
        mode = "ReadOnlyMany" if read_only else "ReadWriteMany"
        cls = f"{args.tier_prefix}cold"
        own = t.io.mount_options(juicefs.cache_dir, t.name, claim, len(t.datasets) + bool(t.space))
        k8s.core.v1.PersistentVolume(
            f"{name}-volume",
            metadata={"name": volume, "labels": labels},
            spec={
                "capacity": {"storage": size},
                "accessModes": [mode],
                "persistentVolumeReclaimPolicy": "Retain",
                "storageClassName": cls,
                "claimRef": {"namespace": ns_name, "name": claim},
                **juicefs.static_volume(volume, path, read_only, own),
            },
            opts=kube.stateful(self, args.protect, depends_on=juicefs.ready),
        )
        k8s.core.v1.PersistentVolumeClaim(
            f"{name}-claim",
            metadata={"name": claim, "namespace": ns_name, "labels": labels},
            spec={
                "accessModes": [mode],
                "storageClassName": cls,
                "volumeName": volume,
                "resources": {"requests": {"storage": size}},
            },
            opts=kube.stateful(self, args.protect, depends_on=[ns]),
        )

    def _reference(
        self,
        name: str,
        physical: fluid_dataset.DatasetSettings,
        ns_name: str,
        team: str,
        fluid: pulumi.Resource | None,
        ns: pulumi.Resource,
    ) -> None:
        """A reference Dataset of a platform Fluid dataset and the ThinRuntime it binds to: Fluid creates the
        read-only claim (named after the Dataset) in the team's namespace; the physical dataset's runtime, its
        FUSE pods and its credentials Secret stay in the platform's dataset namespace."""
        labels = {**kube.labels("fluid", "dataset-reference"), TEAM_LABEL: team}
        meta = {"name": physical.name, "namespace": ns_name, "labels": labels}
        after = pulumi.ResourceOptions(parent=self, depends_on=[ns, *([fluid] if fluid else [])])
        mount = {"name": physical.name, "mountPoint": f"dataset://{physical.namespace}/{physical.name}"}
        dataset = k8s.apiextensions.CustomResource(
            f"{name}-reference",
            api_version=fluid_dataset.API,
            kind="Dataset",
            metadata=meta,
            spec={"accessModes": ["ReadOnlyMany"], "mounts": [mount]},
            opts=after,
        )
        k8s.apiextensions.CustomResource(
            f"{name}-thin-runtime",
            api_version=fluid_dataset.API,
            kind="ThinRuntime",
            metadata=meta,
            spec={},
            opts=pulumi.ResourceOptions.merge(after, pulumi.ResourceOptions(depends_on=[dataset])),
        )
