"""The Kubeflow Training Operator v1 (PyTorchJob, TFJob, ...), installed beside Trainer v2.

It has no chart: the upstream kustomize overlay ``standalone`` at a pinned tag, rendered by the provider
(``kustomize.v2.Directory``; offline it renders no children), with a transform that pins the image, adds
``--gang-scheduler-name=volcano`` and mounts the init-container template of this module's ConfigMap; installed after
Volcano (it exits without the PodGroup CRD). Nothing of it clashes with Trainer v2 (kubeflow/trainer v1.9.4
manifests/base and the v2.3.0 chart): its own namespace (``kubeflow``; Trainer v2's is ``kubeflow-system``), its own
API group (``kubeflow.org``; ``trainer.kubeflow.org``), its own cluster-scoped names (ClusterRole and binding
``training-operator``, ValidatingWebhookConfiguration ``validator.training-operator.kubeflow.org``; Trainer's are
``<release>-kubeflow-trainer-controller-manager``, ``validator.trainer.kubeflow.org`` and
``defaulter.trainer.kubeflow.org``) and its own leader-election ID.
"""

from __future__ import annotations

import copy
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import yaml

from ..common import kube, versions
from .volcano import SCHEDULER_NAME

V1_NAMESPACE = "kubeflow"
"""Namespace the v1 overlay `standalone` installs into (fixed by the overlay)."""
V1_DEPLOYMENT = "training-operator"
V1_CONFIG, V1_CONFIG_DIR, V1_INIT_TEMPLATE = "training-operator-config", "/etc/config", "initContainer.yaml"
"""The ConfigMap holding the v1 operator's init-container template, where the operator reads it
(``pkg/config/config.go`` at kubeflow/trainer v1.9.4: ``/etc/config/initContainer.yaml``) and the file's name."""
V1_INIT_USER = 65534
"""UID of the ``init-pytorch`` container (``nobody``): it only resolves the master's name."""
GANG_FLAG = f"--gang-scheduler-name={SCHEDULER_NAME}"
GANG_FLAG = f"--gang-scheduler-name={SCHEDULER_NAME}"


def v1_init_container_template() -> str:
    """The ``init-pytorch`` init container the v1 operator adds to every Worker of a PyTorchJob with a Master
    (``pkg/controller.v1/pytorch/initcontainer.go`` at kubeflow/trainer v1.9.4: a Go template filled with the image,
    the tries and the master's name): upstream's container, with a securityContext that Pod Security
    ``restricted`` admits (upstream's has none, so team namespaces refuse every Worker pod)."""
    security = {**kube.restricted_container(V1_INIT_USER), "readOnlyRootFilesystem": True}
    wait = (
        "err=1;for i in $(seq {{.MaxTries}}); do if nslookup {{.MasterAddr}}; then err=0 && break; fi;"
        "echo waiting for master; sleep 2; done; exit $err"
    )
    container = {
        "name": "init-pytorch",
        "image": "{{.InitContainerImage}}",
        "imagePullPolicy": "IfNotPresent",
        "resources": {"limits": {"cpu": "100m", "memory": "20Mi"}, "requests": {"cpu": "50m", "memory": "10Mi"}},
        "command": ["sh", "-c", wait],
        "securityContext": security,
    }
    return yaml.safe_dump([container], sort_keys=False)


def v1_operator_transform(obj: dict[str, Any]) -> dict[str, Any] | None:
    """The v1 overlay's objects as installed: the operator Deployment runs the pinned image with Volcano gang
    scheduling, and the overlay's namespace carries Pod Security labels. ``None`` leaves an object as is."""
    kind, name = obj.get("kind"), (obj.get("metadata") or {}).get("name")
    if kind == "Namespace" and name == V1_NAMESPACE:
        out = copy.deepcopy(obj)
        # baseline: the upstream Deployment sets no runAsNonRoot or seccomp profile, so restricted rejects it.
        out["metadata"].setdefault("labels", {}).update(
            {
                "pod-security.kubernetes.io/enforce": "baseline",
                "pod-security.kubernetes.io/audit": "restricted",
                "pod-security.kubernetes.io/warn": "restricted",
            }
        )
        return out
    if kind != "Deployment" or name != V1_DEPLOYMENT:
        return None
    out = copy.deepcopy(obj)
    for container in out["spec"]["template"]["spec"]["containers"]:
        if container["name"] == V1_DEPLOYMENT:
            container["image"] = versions.TRAINING_OPERATOR_V1_IMAGE
            given = container.get("command", []) + container.get("args", [])
            flags = [
                GANG_FLAG,
                f"--pytorch-init-container-image={versions.TRAINING_OPERATOR_V1_INIT_IMAGE}",
                f"--pytorch-init-container-template-file={V1_CONFIG_DIR}/{V1_INIT_TEMPLATE}",
            ]
            container["args"] = [*container.get("args", []), *(flag for flag in flags if flag not in given)]
            mount = {"name": V1_CONFIG, "mountPath": V1_CONFIG_DIR, "readOnly": True}
            container["volumeMounts"] = [*container.get("volumeMounts", []), mount]
    pod = out["spec"]["template"]["spec"]
    pod["volumes"] = [*pod.get("volumes", []), {"name": V1_CONFIG, "configMap": {"name": V1_CONFIG}}]
    return out


def _v1_transform(args: pulumi.ResourceTransformArgs) -> pulumi.ResourceTransformResult | None:
    if not args.type_.startswith("kubernetes:"):
        return None
    changed = v1_operator_transform(dict(args.props))
    return None if changed is None else pulumi.ResourceTransformResult(props=changed, opts=args.opts)


def install(name: str, parent: pulumi.Resource, volcano: pulumi.Resource) -> None:
    """The operator from its pinned overlay (``v1_operator_transform``) and the ConfigMap with its init-container
    template, which its Deployment mounts."""
    operator = k8s.kustomize.v2.Directory(
        name,
        directory=versions.kustomize("trainingOperatorV1"),
        opts=pulumi.ResourceOptions(parent=parent, depends_on=[volcano], transforms=[_v1_transform]),
    )
    k8s.core.v1.ConfigMap(
        f"{name}-config",
        metadata={"name": V1_CONFIG, "namespace": V1_NAMESPACE, "labels": kube.labels("training-operator", "config")},
        data={V1_INIT_TEMPLATE: v1_init_container_template()},
        opts=pulumi.ResourceOptions(parent=parent, depends_on=[operator]),
    )
