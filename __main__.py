"""The Pulumi program: read the stack's settings, build the platform, export what users need."""

import pulumi
import pulumi_kubernetes as k8s

from components.platform import Platform, PlatformArgs
from components.settings import load_settings, stack_config

settings = load_settings(pulumi.get_stack(), stack_config())
provider = k8s.Provider(
    "kubernetes",
    kubeconfig=settings.cluster.kubeconfig,
    context=settings.cluster.context,
    enable_server_side_apply=True,
)
platform = Platform("ai-storage", PlatformArgs(settings), pulumi.ResourceOptions(providers=[provider]))

pulumi.export("storageClasses", platform.storage_classes)
pulumi.export("objectStoreEndpoint", platform.object_store.endpoint)
pulumi.export("objectStoreBucket", platform.object_store.bucket)
if platform.metadata is not None:
    pulumi.export("metadataService", platform.metadata.host)
