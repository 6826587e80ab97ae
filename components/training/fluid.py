"""Fluid: dataset caching close to the GPUs, over the platform's JuiceFS volume or its object store.

The fluid chart is a Helm release whose ``namespace`` value overrides the release namespace; the chart does
not create it, so it is created here. Each dataset (``fluid_dataset``) is a Dataset, its runtime with a tiered
cache, and a DataLoad when it is pre-warmed; the namespaces of the datasets are privileged, because Fluid
runs the runtime's FUSE pods there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import pulumi
import pulumi_kubernetes as k8s
import yaml

from ..common import kube, versions
from ..common.sections import ControllerSettings, DnsLabel, Problem, Section
from ..tiers.juicefs import JuiceFSSource
from ..tiers.node_storage import default_tolerations
from .fluid_dataset import BucketSource, DatasetSettings, credentials, dataset

REPLICATED = ("dataset-controller", "fluid-webhook", "fluidapp-controller")
"""The chart's Deployments that run `controllers.replicas` pods (each with a PodDisruptionBudget)."""
_AFFINITY_PREFERRED = [
    {"name": "fluid.io/node", "weight": 100},
    {"name": "topology.kubernetes.io/zone", "weight": 50},
    {"name": "topology.kubernetes.io/region", "weight": 20},
]


class FluidSettings(Section):
    """The Fluid controllers and the datasets they cache."""

    enabled: bool = False
    """Install Fluid and create the datasets."""
    namespace: DnsLabel = "fluid-system"
    """Namespace of the Fluid controllers, webhook and CSI plugin."""
    data_affinity: Literal["preferred", "required"] = "preferred"
    """Place dataset pods on the nodes caching it: `preferred`, or `required` (runtimes get the sched label)."""
    datasets: list[DatasetSettings] = []
    """Datasets to create."""
    controllers: ControllerSettings = ControllerSettings()
    """Replicas of the dataset controller, the webhook and the application controller, and resources of those and
    of the runtime controllers (Fluid runs one of each runtime controller: see docs/components/fluid.md)."""

    def enabled_datasets(self) -> list[DatasetSettings]:
        """The datasets the stack creates (none while Fluid is off)."""
        return self.datasets if self.enabled else []

    def problems(self) -> list[Problem]:
        """A dataset name is unique in its namespace (it names the Dataset, the runtime and the claim)."""
        seen: set[tuple[str, str]] = set()
        found = []
        for i, d in enumerate(self.enabled_datasets()):
            if (d.namespace, d.name) in seen:
                found.append(
                    Problem(f"datasets[{i}].name", "expected a name unique in its namespace", d.name, "rename it")
                )
            seen.add((d.namespace, d.name))
        return found


def chart_values(settings: FluidSettings) -> dict[str, Any]:
    """Helm values of the fluid release."""
    affinity: dict[str, Any] = {"preferred": _AFFINITY_PREFERRED}
    if settings.data_affinity == "required":
        affinity["required"] = ["fluid.io/node"]
    used = {d.runtime for d in settings.datasets}
    runtime: dict[str, Any] = {
        # Fluid starts a runtime controller on demand; run the ones our datasets use from the start.
        kind: {"enabled": True}
        for kind in sorted(used)
    }
    if "juicefs" in used:
        # The same JuiceFS client as the rest of the platform.
        repo, tag = versions.JUICEFS_IMAGE.rsplit(":", 1)
        prefix, image = repo.rsplit("/", 1)
        runtime["juicefs"]["fuse"] = {"ceimagePrefix": prefix, "ceimageName": image, "ceimageTag": tag}
    c = settings.controllers
    # The dataset controller, the webhook and the application controller scale with `replicas` (leader election
    # for the controllers). A runtime controller does not: Fluid scales it out on demand, and in chart 1.0.8 a
    # `runtime.<engine>.replicas` above 1 renders its annotation into spec.template.metadata itself
    # (templates/controller/<engine>runtime_controller.yaml), a Deployment the API server rejects. It gets
    # resources only and runs its one replica from the start (`enabled`).
    controllers: dict[str, Any] = {"dataset": {}, "webhook": {}, "fluidapp": {}}
    for values in controllers.values():
        if c.replicas > 1:
            values["replicas"] = c.replicas
    for values in (*controllers.values(), *runtime.values()):
        if c.resources:
            values["resources"] = c.resources.spec()
    return {
        **{k: v for k, v in controllers.items() if v},
        "namespace": settings.namespace,
        "runtime": runtime,
        "webhook": {
            **controllers["webhook"],
            # Apply the plugin profile below on upgrades too, not only when the ConfigMap is first created.
            "forceReplacePluginsProfile": True,
            "pluginsProfile": {
                "pluginConfig": [
                    # The plugin's args are a YAML document in a string.
                    {"name": "NodeAffinityWithCache", "args": yaml.safe_dump(affinity, sort_keys=False)},
                ]
            },
        },
    }


@dataclass
class FluidArgs:
    """Inputs of Fluid."""

    settings: FluidSettings
    bucket: Callable[[DatasetSettings], BucketSource] | None = None
    """The bucket as one Alluxio dataset reaches it, with keys that reach only the dataset's directory (None
    when there is no Alluxio dataset)."""
    juicefs: JuiceFSSource | None = None
    """The JuiceFS volume (None when JuiceFS is disabled: no JuiceFSRuntime then)."""
    node_tolerations: list[dict[str, Any]] = field(default_factory=default_tolerations)
    """Taints the datasets' FUSE pods tolerate (`nodeStorage.tolerations`; the chart's CSI node plugin tolerates
    every taint by itself)."""


class Fluid(pulumi.ComponentResource):
    """The fluid chart, and per dataset a Dataset, its runtime and its DataLoad."""

    namespaces: dict[str, k8s.core.v1.Namespace]
    """The dataset namespaces this component created, by name."""
    datasets: list[pulumi.Output[str]]
    """Names of the Datasets (and of their PVCs)."""

    def __init__(self, name: str, args: FluidArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("ai-storage:fluid:Fluid", name, None, opts)
        s = args.settings
        # privileged: the CSI plugin DaemonSet mounts FUSE file systems on the node (privileged, hostPath).
        ns = kube.namespace(f"{name}-ns", s.namespace, "privileged", self)
        pin = versions.FLUID
        release = kube.release(f"{name}-release", pin, ns.metadata.name, chart_values(s), self, wait=True)
        if s.controllers.replicas > 1:
            # The chart's own pod labels (templates/{controller,webhook}/*.yaml); it offers no anti-affinity value.
            for controller in REPLICATED:
                selector = {"control-plane": controller}
                kube.budget(f"{name}-{controller}-budget", controller, s.namespace, selector, self, [ns, release])
        self.namespaces = {}
        secrets: dict[tuple[str, str], k8s.core.v1.Secret] = {}
        self.datasets = []
        for d in s.datasets:
            if d.namespace not in self.namespaces:
                # privileged: Fluid runs each runtime's FUSE pods (privileged) in the dataset's namespace.
                ns_name = f"{name}-ns-{d.namespace}"
                self.namespaces[d.namespace] = kube.namespace(ns_name, d.namespace, "privileged", self)
            dns = self.namespaces[d.namespace]
            source = args.juicefs if d.runtime == "juicefs" else args.bucket(d) if args.bucket else None
            if source is None:
                raise TypeError(
                    f"FluidArgs.{'juicefs' if d.runtime == 'juicefs' else 'bucket'} is required for {d.name!r}"
                )
            # One Secret per namespace for the JuiceFS volume; each Alluxio dataset's keys reach its directory only.
            kind = d.runtime if d.runtime == "juicefs" else f"{d.runtime}-{d.name}"
            key = (d.namespace, kind)
            if key not in secrets:
                secrets[key] = credentials(
                    f"{name}-credentials-{d.namespace}-{kind}",
                    kind,
                    dns.metadata.name,
                    source,
                    pulumi.ResourceOptions(parent=self),
                )
            secret = secrets[key]
            after_release = pulumi.ResourceOptions(parent=self, depends_on=[release])
            suffix = f"{d.namespace}-{d.name}"
            ds = dataset(
                name, suffix, d, dns.metadata.name, secret.metadata.name, source, after_release, args.node_tolerations
            )
            self.datasets.append(ds.metadata["name"])
        self.register_outputs({"datasets": self.datasets})


def runtime_claim_problems(t: Any, fluid_datasets: list[Any]) -> list[Problem]:
    """Each runtime's dataset claim (``t``: the ``training`` section) is a Fluid dataset's in the workload
    namespace (``fluid_datasets``: the enabled Fluid datasets), unless the runtime says it is made outside the
    platform."""
    made = {d.name for d in fluid_datasets if d.namespace == t.workload_namespace}
    return [
        Problem(
            f"training.runtimes[{i}].datasetClaim",
            f"expected a Fluid dataset of {t.workload_namespace} ({', '.join(sorted(made)) or 'none'})",
            r.dataset_claim,
            "nothing creates this claim, so every job's pods would stay Pending: add the Fluid dataset, or set "
            f"training.runtimes[{i}].externalClaim: true if you create it yourself",
        )
        for i, r in enumerate(t.runtimes if t.enabled else [])
        if r.dataset_claim not in made and not r.external_claim
    ]
