"""The Pulumi program: read the stack's settings, build the platform, export what users need."""

import pulumi
import pulumi_kubernetes as k8s

from components.platform import Platform, PlatformArgs
from components.settings import load_settings, stack_config
from components.teams.quotas import quota_left

settings = load_settings(pulumi.get_stack(), stack_config())
provider = k8s.Provider(
    "kubernetes",
    kubeconfig=settings.cluster.kubeconfig,
    context=settings.cluster.context,
    enable_server_side_apply=True,
    # Update Secrets and ConfigMaps in place. Without these, pulumi-kubernetes replaces one whose data changed
    # (provider/pkg/provider/diff.go), and every one here has a fixed name, so a replace deletes it before it
    # creates it again: meanwhile the JuiceFS CSI driver cannot mount the volume, and pods that start cannot
    # read their password. In place, pods mounting the Secret see the new keys within a minute (the kubelet
    # syncs volumes; environment variables wait for a restart) and the name never stops resolving.
    enable_secret_mutable=True,
    enable_config_map_mutable=True,
)
# The stack's own outputs from its last update: the metadata engine it deployed (see MetadataEngine).
itself = pulumi.StackReference(f"{pulumi.get_organization()}/{pulumi.get_project()}/{pulumi.get_stack()}")
platform = Platform("ai-storage", PlatformArgs(settings, itself.outputs), pulumi.ResourceOptions(providers=[provider]))

pulumi.export("storageClasses", platform.storage_classes)
pulumi.export("objectStoreEndpoint", platform.object_store.endpoint)
pulumi.export("objectStoreBucket", platform.object_store.bucket)
# Where the data lives; no key is an output: teams get theirs in their namespaces (components/teams/tenants.py).
pulumi.export("objectStoreStorage", platform.object_store.storage_type)
pulumi.export("objectStoreBucketUrl", platform.object_store.bucket_url)
if platform.acceptance is not None:
    # Each tier's acceptance verdict (awaited with acceptance.blockUntilDone), or where to read it.
    pulumi.export("acceptance", platform.acceptance.verdicts)
if platform.teams is not None:
    pulumi.export("teamNamespaces", platform.teams.namespaces)
    # What each team's own stack copies (workspace.vendedClaims, workspace.storageQuota; docs/jobs.md).
    teams = settings.teams.workspaces
    pulumi.export("teamClaims", {t.name: t.claims() for t in teams})
    pulumi.export("teamQuotaLeft", {t.name: quota_left(t.quota, t.vended_requests()) for t in teams})
# What a team's workspace settings copy (workspace.jobKinds, runtimes, nodePools and queueCapability, docs/jobs.md).
pulumi.export("jobKinds", settings.training.job_kinds + (["volcano"] if settings.volcano.enabled else []))
pulumi.export("nodePools", {name: pool.spec() for name, pool in settings.cluster.node_pools.items()})
if settings.training.enabled and "trainer-v2" in settings.training.operators:
    pulumi.export("trainingRuntimes", [r.name for r in settings.training.runtimes])
if settings.volcano.enabled:
    capability = {t.name: t.queue.capability.spec() if t.queue.capability else None for t in settings.teams.workspaces}
    pulumi.export("teamQueues", capability)
if platform.metadata is not None:
    pulumi.export("juicefsVolume", settings.juicefs.volume_name)  # the diff blocks a rename (its data stays)
    pulumi.export("metadataEngine", platform.metadata.engine)
    pulumi.export("metadataFlavor", platform.metadata.flavor)
    pulumi.export("metadataService", platform.metadata.host)
