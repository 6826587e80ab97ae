"""The pods the operators create from a team's job, built as each operator's source at its pinned tag builds them
(no operator runs here): what a real API server must then admit into the team's namespace.

- Kubeflow Trainer v2.3.0 (kubeflow/trainer): the runtime's JobSet template merged with the TrainJob's
  ``runtimePatches`` by strategic merge patch (``mergeRuntimePatches``, pkg/runtime/core/trainingruntime.go), the
  ``trainer`` overrides and torchrun's ``PET_*`` variables in the ``node`` container (``Torch.EnforceMLPolicy``,
  pkg/runtime/framework/plugins/torch/torch.go), the PodGroup annotation (plugins/volcano/volcano.go); JobSet v0.12
  names each pod's host ``<jobset>-<replicatedJob>-<jobIndex>-<podIndex>`` under the JobSet's subdomain and the
  Indexed Job controller annotates the completion index.
- Training Operator v1.9.4 (kubeflow/trainer): labels, name, restart policy, scheduler and Volcano annotations
  (pkg/controller.v1/common/pod.go, control/podgroup_control.go), the defaulted ports
  (pkg/apis/kubeflow.org/v1/pytorch_defaults.go), the PyTorch env (pytorch/envvar.go, pytorch/master.go) and the
  ``init-pytorch`` init container of every Worker from the operator's template file (pytorch/initcontainer.go),
  TF_CONFIG for TFJobs (tensorflow/tfjob_controller.go).
- Volcano v1.15.1 (volcano-sh/volcano): the job admission webhook's defaults (``createPatch``,
  pkg/webhooks/admission/jobs/mutate/mutate_job.go: the webhooks are what the pinned chart installs), then
  ``createJobPod`` (pkg/controllers/job/job_controller_util.go) and the svc and ssh plugins
  (pkg/controllers/job/plugins/svc/svc.go, ssh/ssh.go).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping
from typing import Any

Pod = dict[str, Any]

# ---------------------------------------------------------------- strategic merge patch (the core/v1 keys it uses)

_MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "volumes": "name",
    "env": "name",
    "volumeMounts": "mountPath",
    "ports": "containerPort",
    "replicatedJobs": "name",
}


def strategic_merge(base: Any, patch: Any) -> Any:
    """``patch`` merged into ``base`` as k8s.io/apimachinery's strategicpatch does for these types: maps merge,
    lists with a merge key (containers, volumes, env by name; mounts by mountPath) merge item by item, any
    other list (tolerations, command, args) is replaced."""
    if isinstance(base, dict) and isinstance(patch, dict):
        out = dict(base)
        for key, value in patch.items():
            if key in _MERGE_KEYS and isinstance(value, list) and isinstance(out.get(key), list):
                out[key] = _merge_list(out[key], value, _MERGE_KEYS[key])
            else:
                out[key] = strategic_merge(out.get(key), value) if key in out else copy.deepcopy(value)
        return out
    return copy.deepcopy(patch)


def _merge_list(base: list[Any], patch: list[Any], key: str) -> list[Any]:
    out = [copy.deepcopy(item) for item in base]
    for item in patch:
        at = next((i for i, old in enumerate(out) if old.get(key) == item.get(key)), None)
        if at is None:
            out.append(copy.deepcopy(item))
        else:
            out[at] = strategic_merge(out[at], item)
    return out


def _upsert_env(container: dict[str, Any], env: list[dict[str, Any]]) -> None:
    """``apply.UpsertEnvVars``: a variable of the same name is replaced, a new one appended."""
    current = container.setdefault("env", [])
    for var in env:
        at = next((i for i, old in enumerate(current) if old["name"] == var["name"]), None)
        if at is None:
            current.append(dict(var))
        else:
            current[at] = dict(var)


# ---------------------------------------------------------------- Kubeflow Trainer v2.3.0 + JobSet + Job


def trainer_pods(trainjob: Mapping[str, Any], runtime: Mapping[str, Any]) -> list[Pod]:
    """The ``node`` pods of a TrainJob on a ClusterTrainingRuntime."""
    name, spec = trainjob["metadata"]["name"], trainjob["spec"]
    template = copy.deepcopy(runtime["spec"]["template"])
    annotations = dict((template.get("metadata") or {}).get("annotations") or {})
    for patch in spec.get("runtimePatches", []):
        patched = (patch.get("trainingRuntimeSpec") or {}).get("template") or {}
        annotations.update((patched.get("metadata") or {}).get("annotations") or {})
        if patched.get("spec"):
            template["spec"] = strategic_merge(template["spec"], patched["spec"])
    (node,) = [j for j in template["spec"]["replicatedJobs"] if j["name"] == "node"]
    pod_template = node["template"]["spec"]["template"]
    trainer = spec.get("trainer") or {}
    nodes = trainer.get("numNodes") or runtime["spec"]["mlPolicy"]["numNodes"]
    (container,) = [c for c in pod_template["spec"]["containers"] if c["name"] == "node"]
    for key in ("image", "command", "args"):
        if trainer.get(key):
            container[key] = trainer[key]
    if trainer.get("resourcesPerNode"):
        container["resources"] = trainer["resourcesPerNode"]
    _upsert_env(container, trainer.get("env", []))
    index = {"fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}
    _upsert_env(
        container,
        [
            {"name": "PET_NNODES", "value": str(nodes)},
            {"name": "PET_NPROC_PER_NODE", "value": "auto"},
            {"name": "PET_NODE_RANK", "valueFrom": index},
            {"name": "PET_MASTER_ADDR", "value": f"{name}-node-0-0.{name}"},
            {"name": "PET_MASTER_PORT", "value": "29500"},
        ],
    )
    _upsert_env(container, [{"name": "JOB_COMPLETION_INDEX", "valueFrom": index}])
    pods = []
    for i in range(nodes):
        pod = copy.deepcopy(pod_template)
        meta = pod.setdefault("metadata", {})
        meta["name"] = f"{name}-node-0-{i}-x{i:04d}"
        meta["namespace"] = trainjob["metadata"]["namespace"]
        meta["annotations"] = {
            **annotations,
            **(meta.get("annotations") or {}),
            "scheduling.k8s.io/group-name": name,
            "batch.kubernetes.io/job-completion-index": str(i),
        }
        meta["labels"] = {
            **(meta.get("labels") or {}),
            "jobset.sigs.k8s.io/jobset-name": name,
            "jobset.sigs.k8s.io/replicatedjob-name": "node",
            "batch.kubernetes.io/job-completion-index": str(i),
        }
        pod["spec"].update(hostname=f"{name}-node-0-{i}", subdomain=name)
        pod["spec"].setdefault("restartPolicy", "Never")
        pods.append({"apiVersion": "v1", "kind": "Pod", **pod})
    return pods


# ---------------------------------------------------------------- Training Operator v1.9.4


def _go_template(text: str, values: Mapping[str, Any]) -> str:
    """The Go template actions the init-container template uses (``{{.Name}}``), filled in."""
    return re.sub(r"{{\s*\.(\w+)\s*}}", lambda m: str(values[m.group(1)]), text)


def v1_pods(job: Mapping[str, Any], init_template: str, init_image: str, max_tries: int = 100) -> list[Pod]:
    """The pods of a PyTorchJob or TFJob."""
    import yaml

    kind, name, spec = job["kind"], job["metadata"]["name"], job["spec"]
    pytorch = kind == "PyTorchJob"
    replicas = spec["pytorchReplicaSpecs" if pytorch else "tfReplicaSpecs"]
    container_name, port_name, port = (
        ("pytorch", "pytorchjob-port", 23456) if pytorch else ("tensorflow", "tfjob-port", 2222)
    )
    total = sum(r.get("replicas", 1) for r in replicas.values())
    controller = "pytorchjob-controller" if pytorch else "tfjob-controller"
    pods = []
    for rtype, replica in replicas.items():
        for index in range(replica.get("replicas", 1)):
            pod = copy.deepcopy(replica["template"])
            meta, pod_spec = pod.setdefault("metadata", {}), pod["spec"]
            for container in pod_spec["containers"]:  # setPyTorchDefaultPort / setDefaultPort
                if container["name"] == container_name and not any(
                    p.get("name") == port_name for p in container.get("ports", [])
                ):
                    container.setdefault("ports", []).append({"name": port_name, "containerPort": port})
            lead = rtype in ("Master", "Chief")
            meta["name"] = f"{name}-{rtype.lower()}-{index}"
            meta["namespace"] = job["metadata"]["namespace"]
            meta["labels"] = {
                **(meta.get("labels") or {}),
                "training.kubeflow.org/operator-name": controller,
                "training.kubeflow.org/job-name": name,
                "training.kubeflow.org/replica-type": rtype.lower(),
                "training.kubeflow.org/replica-index": str(index),
                **({"training.kubeflow.org/job-role": "master"} if lead else {}),
            }
            if pytorch:
                rank = index + (1 if rtype == "Worker" and "Master" in replicas else 0)
                for container in pod_spec["containers"]:
                    env = container.setdefault("env", [])
                    env.append({"name": "PYTHONUNBUFFERED", "value": "1"})
                    if "Master" in replicas:
                        master = f"{name}-master-0"
                        env += [
                            {"name": "MASTER_PORT", "value": str(port)},
                            {"name": "PET_MASTER_PORT", "value": str(port)},
                            {"name": "MASTER_ADDR", "value": master},
                            {"name": "PET_MASTER_ADDR", "value": master},
                            {"name": "WORLD_SIZE", "value": str(total)},
                            {"name": "RANK", "value": str(rank)},
                            {"name": "PET_NODE_RANK", "value": str(rank)},
                        ]
                    env += [
                        {"name": "PET_NPROC_PER_NODE", "value": "auto"},
                        {"name": "PET_NNODES", "value": str(total)},
                    ]
                if rtype == "Worker" and "Master" in replicas:
                    text = _go_template(
                        init_template,
                        {"InitContainerImage": init_image, "MaxTries": max_tries, "MasterAddr": f"{name}-master-0"},
                    )
                    pod_spec["initContainers"] = [*pod_spec.get("initContainers", []), *yaml.safe_load(text)]
            elif total > 1:
                cluster = {
                    r.lower(): [
                        f"{name}-{r.lower()}-{i}.{meta['namespace']}.svc:{port}" for i in range(s.get("replicas", 1))
                    ]
                    for r, s in replicas.items()
                }
                config = {"cluster": cluster, "task": {"type": rtype.lower(), "index": index}, "environment": "cloud"}
                for container in pod_spec["containers"]:
                    if container["name"] == container_name:
                        container.setdefault("env", []).append({"name": "TF_CONFIG", "value": json.dumps(config)})
            pod_spec["restartPolicy"] = (
                "Never" if replica.get("restartPolicy") == "ExitCode" else replica.get("restartPolicy", "Never")
            )
            pod_spec.setdefault("schedulerName", "volcano")
            meta["annotations"] = {
                **(meta.get("annotations") or {}),
                "scheduling.k8s.io/group-name": name,
                "volcano.sh/task-spec": rtype.lower(),
            }
            pods.append({"apiVersion": "v1", "kind": "Pod", **pod})
    return pods


# ---------------------------------------------------------------- Volcano v1.15.1


MAX_RETRY = 3
"""``DefaultMaxRetry`` and ``defaultMaxRetry`` of mutate_job.go: the job's and each task's retries when unset."""


def admitted_volcano_job(job: Mapping[str, Any]) -> dict[str, Any]:
    """A Volcano Job as its admission webhook stores it (``createPatch`` in mutate_job.go): the queue and scheduler
    when unset, ``maxRetry`` 3 for the job and each task, each task's ``minAvailable`` its replicas and the job's their
    sum when unset, and the svc plugin for the tensorflow, mpi and pytorch plugins (ssh for mpi)."""
    admitted = copy.deepcopy(dict(job))
    spec = admitted["spec"]
    spec["queue"] = spec.get("queue") or "default"
    spec["schedulerName"] = spec.get("schedulerName") or "volcano"
    spec["maxRetry"] = spec.get("maxRetry") or MAX_RETRY
    for index, task in enumerate(spec["tasks"]):
        task["name"] = task.get("name") or f"default{index}"
        task.setdefault("minAvailable", task["replicas"])
        task["maxRetry"] = task.get("maxRetry") or MAX_RETRY
    spec["minAvailable"] = spec.get("minAvailable") or sum(t["minAvailable"] for t in spec["tasks"])
    plugins = spec.get("plugins")
    if plugins is not None:
        if {"tensorflow", "mpi", "pytorch"} & set(plugins):
            plugins.setdefault("svc", [])
        if "mpi" in plugins:
            plugins.setdefault("ssh", [])
    return admitted


def volcano_pods(job: Mapping[str, Any]) -> list[Pod]:
    """The pods of a Volcano Job, as admitted (its webhook's defaults), with what its svc and ssh plugins add."""
    job = admitted_volcano_job(job)
    name, spec, namespace = job["metadata"]["name"], job["spec"], job["metadata"]["namespace"]
    plugins = spec.get("plugins") or {}
    hosts = hosts_of(job)
    pods = []
    for task in spec["tasks"]:
        for index in range(task["replicas"]):
            pod = copy.deepcopy(task["template"])
            meta, pod_spec = pod.setdefault("metadata", {}), pod["spec"]
            meta["name"] = f"{name}-{task['name']}-{index}"
            meta["namespace"] = namespace
            meta["annotations"] = {
                **(meta.get("annotations") or {}),
                "volcano.sh/task-index": str(index),
                "volcano.sh/task-spec": task["name"],
                "scheduling.k8s.io/group-name": f"{name}-uid",
                "volcano.sh/job-name": name,
                "volcano.sh/queue-name": spec.get("queue", "default"),
                "volcano.sh/job-version": "0",
                "volcano.sh/template-uid": f"{name}-{task['name']}",
                "volcano.sh/job-retry-count": "0",
            }
            meta["labels"] = {
                **(meta.get("labels") or {}),
                "volcano.sh/task-index": str(index),
                "volcano.sh/job-name": name,
                "volcano.sh/task-spec": task["name"],
                "volcano.sh/job-namespace": namespace,
                "volcano.sh/queue-name": spec.get("queue", "default"),
            }
            pod_spec.setdefault("schedulerName", spec.get("schedulerName", "volcano"))
            if "svc" in plugins:
                pod_spec.setdefault("hostname", meta["name"])
                pod_spec.setdefault("subdomain", name)
                config = f"{name}-svc"
                env = [
                    {"name": k, "valueFrom": {"configMapKeyRef": {"name": config, "key": k}}}
                    for k in hosts
                    if k.startswith("VC_")  # the <task>.host files are read from /etc/volcano, never as env
                ]
                pod_spec["volumes"] = [*pod_spec.get("volumes", []), {"name": config, "configMap": {"name": config}}]
                for container in pod_spec["containers"] + pod_spec.get("initContainers", []):
                    container["env"] = [*container.get("env", []), *env]
                    mount = {"name": config, "mountPath": "/etc/volcano"}
                    container["volumeMounts"] = [*container.get("volumeMounts", []), mount]
            if "ssh" in plugins:
                secret = f"{name}-ssh"
                volume = {
                    "name": secret,
                    "secret": {
                        "secretName": secret,
                        "defaultMode": 0o600,
                        # ssh.go writes the files under .ssh/ of the volume and mounts that directory (subPath)
                        "items": [
                            {"key": k, "path": f".ssh/{k}"}
                            for k in ("id_rsa", "id_rsa.pub", "authorized_keys", "config")
                        ],
                    },
                }
                pod_spec["volumes"] = [*pod_spec.get("volumes", []), volume]
                for container in pod_spec["containers"] + pod_spec.get("initContainers", []):
                    mount = {"name": secret, "mountPath": "/root/.ssh", "subPath": ".ssh"}
                    container["volumeMounts"] = [*container.get("volumeMounts", []), mount]
            pods.append({"apiVersion": "v1", "kind": "Pod", **pod})
    return pods


def hosts_of(job: Mapping[str, Any]) -> dict[str, str]:
    """The values of the svc plugin's ConfigMap (``GenerateHosts``): per task, the file ``<task>.host`` (one host a
    line, mounted as /etc/volcano/<task>.host), ``VC_<TASK>_HOSTS`` and ``VC_<TASK>_NUM``."""
    name, out = job["metadata"]["name"], {}
    for task in job["spec"]["tasks"]:
        key = task["name"].replace("-", "_")
        hosts = [f"{name}-{task['name']}-{i}.{name}" for i in range(task["replicas"])]
        out[f"{key}.host"] = "\n".join(hosts)
        out[f"VC_{key.upper()}_HOSTS"] = ",".join(hosts)
        out[f"VC_{key.upper()}_NUM"] = str(task["replicas"])
    return out


def resolved_env(
    pod: Pod, container: Mapping[str, Any], config_maps: Mapping[str, str] | None = None
) -> dict[str, str]:
    """A container's environment as the kubelet resolves it: values, fieldRefs to the pod's labels and annotations,
    ConfigMap keys (``config_maps``), later entries winning."""
    meta, out = pod["metadata"], {}
    for var in container.get("env", []):
        if "value" in var:
            out[var["name"]] = var["value"]
            continue
        source = var.get("valueFrom") or {}
        if "fieldRef" in source:
            path = source["fieldRef"]["fieldPath"]
            found = re.fullmatch(r"metadata\.(labels|annotations)\['([^']+)'\]", path)
            if found:
                out[var["name"]] = meta[found.group(1)][found.group(2)]
            elif path == "metadata.name":
                out[var["name"]] = meta["name"]
        elif "configMapKeyRef" in source and config_maps is not None:
            out[var["name"]] = config_maps[source["configMapKeyRef"]["key"]]
    return out


def svc_network_policy(job: Mapping[str, Any]) -> dict[str, Any] | None:
    """The NetworkPolicy the svc plugin creates for a Volcano Job (``createNetworkPolicyIfNotExist``,
    pkg/controllers/job/plugins/svc/svc.go at v1.15.1, unless the plugin has ``--disable-network-policy=true``): named
    after the job, selecting its pods by ``volcano.sh/job-name`` and ``volcano.sh/job-namespace``, admitting ingress
    only from those same pods."""
    plugins = job["spec"].get("plugins") or {}
    if "svc" not in plugins or "--disable-network-policy=true" in (plugins["svc"] or []):
        return None
    name, namespace = job["metadata"]["name"], job["metadata"]["namespace"]
    own = {"matchLabels": {"volcano.sh/job-name": name, "volcano.sh/job-namespace": namespace}}
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"podSelector": own, "ingress": [{"from": [{"podSelector": own}]}], "policyTypes": ["Ingress"]},
    }
