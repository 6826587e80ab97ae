"""The pods each operator builds from a team's job (``tests.operators``, no operator runs here), judged as the
team namespace's admission judges them: Pod Security at the namespace's level, Volcano's policies on Volcano's pods,
the Trainer webhook's rule on runtime patches; and every node of a multi-node job meeting at one rendezvous."""

from __future__ import annotations

import os
from typing import Any
from unittest import mock

import pytest
import yaml

from tests import operators
from tests.admission import pod_security
from tests.admission.stacks import TEAM_STACKS, UPSTREAM_INIT_TEMPLATE, platform, pods_of, team, the_job
from tests.conftest import TEAM_EXAMPLE, by_name, objects


@pytest.mark.parametrize("stack", TEAM_STACKS)
def test_every_pod_an_operator_builds_from_a_team_job_meets_its_namespaces_pod_security(as_installed, stack):
    job = the_job(team(stack))
    pods = pods_of(job, platform("dev"))
    assert len(pods) >= 1
    namespace = by_name(platform("dev"), "Namespace", job["metadata"]["namespace"])
    enforce, warn = pod_security.namespace_levels(namespace)
    assert (enforce, warn) == ("restricted", "restricted")
    found = {
        pod["metadata"]["name"]: pod_security.violations(pod["spec"], pod["metadata"].get("annotations"), enforce)
        for pod in pods
    }
    assert {name: v for name, v in found.items() if v} == {}


def test_the_upstream_init_container_template_breaks_restricted_in_a_team_namespace(as_installed):
    """Why the platform mounts its own template: upstream's init-pytorch has no securityContext."""
    job = the_job(team("dev-pytorchjob"))
    pods = pods_of(job, platform("dev"), init_template=UPSTREAM_INIT_TEMPLATE)
    workers = [p for p in pods if p["metadata"]["labels"]["training.kubeflow.org/replica-type"] == "worker"]
    assert workers and all(p["spec"]["initContainers"][0]["name"] == "init-pytorch" for p in workers)
    for pod in workers:
        found = pod_security.violations(pod["spec"], level="restricted")
        assert found and all("initContainers[init-pytorch]" in v for v in found), found
        # the pod's own securityContext covers runAsNonRoot and seccomp; the container sets neither of these:
        assert {v.split(":")[0] for v in found} == {"Privilege Escalation", "Capabilities (restricted)"}


def test_a_trainjob_patch_that_sets_env_on_the_node_container_is_what_the_trainer_webhook_refuses(as_installed):
    from components.training.job_kinds import trainjob_webhook_errors

    job = the_job(team("dev"))
    (runtime,) = objects(platform("dev"), "ClusterTrainingRuntime")
    containers = {
        j["name"]: {c["name"] for c in j["template"]["spec"]["template"]["spec"].get("initContainers", [])}
        | {c["name"] for c in j["template"]["spec"]["template"]["spec"]["containers"]}
        for j in runtime["spec"]["template"]["spec"]["replicatedJobs"]
    }
    assert trainjob_webhook_errors(job["spec"], containers) == []
    patched = job["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]
    patched["template"]["spec"]["template"]["spec"]["containers"][0]["env"] = [{"name": "A", "value": "1"}]
    assert trainjob_webhook_errors(job["spec"], containers) == ["runtimePatches: env on the node container"]


def test_our_refusal_comes_before_the_cluster_drops_an_image_volume(as_installed):
    from components.settings import SettingsError
    from components.teams.team import load_team_settings

    config = yaml.safe_load((TEAM_EXAMPLE / "Pulumi.dev-pytorchjob.yaml").read_text())["config"]
    ours = {key.split(":", 1)[1]: value for key, value in config.items()}
    assert load_team_settings(ours).workspace.image_volumes is True
    ours["workspace"] = {**ours["workspace"], "imageVolumes": False}
    with pytest.raises(SettingsError, match=r"job\.volumes: expected Kubernetes 1\.35\+"):
        load_team_settings(ours)


# ---------------------------------------------------------------- rendezvous


def torchrun_view(pod: dict[str, Any], hosts: dict[str, str]) -> tuple[str, int, int]:
    """(endpoint, node rank, nodes) torchrun computes in this pod, from its command and resolved environment."""
    from torch.distributed.run import config_from_args, get_args_parser

    container = pod["spec"]["containers"][0]
    argv = [*container.get("command", []), *container.get("args", [])]
    assert argv[0] == "torchrun", argv
    env = operators.resolved_env(pod, container, hosts)
    with mock.patch.dict(os.environ, env, clear=True):
        config, _, _ = config_from_args(get_args_parser().parse_args(argv[1:]))
    return config.rdzv_endpoint, config.rdzv_configs["rank"], config.max_nodes


@pytest.mark.parametrize("stack", [s for s in TEAM_STACKS if s in ("dev", "dev-pytorchjob", "dev-volcano")])
def test_every_node_of_a_multi_node_job_meets_at_one_endpoint_with_its_own_rank(as_installed, stack):
    job = the_job(team(stack))
    pods = pods_of(job, platform("dev"))
    hosts = operators.hosts_of(job) if job["kind"] == "Job" else {}
    views = [torchrun_view(pod, hosts) for pod in pods]
    endpoints, ranks, nodes = {v[0] for v in views}, sorted(v[1] for v in views), {v[2] for v in views}
    assert len(pods) == 2 and nodes == {2}
    assert len(endpoints) == 1 and not next(iter(endpoints)).startswith(("127.0.0.1", "localhost")), endpoints
    assert ranks == [0, 1]
    (master,) = endpoints
    host = master.rsplit(":", 1)[0]
    lead = next(p for p, v in zip(pods, views, strict=True) if v[1] == 0)
    names = {lead["metadata"]["name"], f"{lead['spec'].get('hostname')}.{lead['spec'].get('subdomain')}"}
    assert host in names  # the address is rank 0's own name (a Service of that name, or hostname.subdomain)


# ---------------------------------------------------------------- Volcano's svc plugin and the metrics scrape

VOLCANO_STACKS = [s for s in TEAM_STACKS if "volcano" in s]


def network_view(pod: dict[str, Any]) -> Any:
    from tests.kube_semantics import Pod

    ports = {
        p["name"]: p["containerPort"] for c in pod["spec"]["containers"] for p in c.get("ports", []) if "name" in p
    }
    return Pod(pod["metadata"]["namespace"], pod["metadata"].get("labels") or {}, named_ports=ports)


@pytest.mark.parametrize("stack", VOLCANO_STACKS)
def test_prometheus_reaches_a_volcano_jobs_metrics_under_the_svc_plugins_network_policy(as_installed, stack):
    """After Volcano's job controller ran, the namespace holds the plugin's policy (only the job's own pods may
    connect) and the platform's (the metrics port from any namespace): the scrape reaches every pod, nothing else
    does."""
    from components.training.trainer import METRICS_PORT
    from tests.kube_semantics import Pod, allowed

    rendered = team(stack)
    job = the_job(rendered)
    plugin = operators.svc_network_policy(job)
    assert plugin is not None  # the team example's Volcano jobs use svc
    policies = [plugin, *objects(rendered, "NetworkPolicy")]
    prometheus = Pod("monitoring", {"app.kubernetes.io/name": "prometheus"})
    stranger = Pod("other-team", {"app": "x"})
    pods = pods_of(job, platform("dev"))
    assert pods
    for pod in pods:
        target = network_view(pod)
        assert allowed(policies, prometheus, target, METRICS_PORT), pod["metadata"]["name"]
        assert not allowed(policies, stranger, target, 22)  # ssh and the rendezvous stay the job's own
        assert not allowed(policies, stranger, target, 29500)
        assert allowed(policies, network_view(pods[0]), target, 29500)  # the job's pods still meet
    without_ours = [plugin]
    assert not allowed(without_ours, prometheus, network_view(pods[0]), METRICS_PORT)  # why the platform adds one


def test_a_volcano_job_as_its_webhook_admits_it_and_its_plugins_build_its_pods(as_installed):
    """The model's details as Volcano v1.15.1 writes them: the job webhook's defaults (mutate_job.go: maxRetry 3,
    each task's minAvailable its replicas, the job's their sum), the svc ConfigMap's `<task>.host` files beside the
    VC_* variables (svc.go ``GenerateHosts``; only the VC_* keys become env), the ssh key files under `.ssh/` of the
    Secret volume mounted by subPath (ssh.go ``mountRsaKey``)."""
    job = the_job(team("dev-volcano-tasks"))
    admitted = operators.admitted_volcano_job(job)["spec"]
    assert admitted["maxRetry"] == 3 and [t["maxRetry"] for t in admitted["tasks"]] == [3, 3]
    assert [t["minAvailable"] for t in admitted["tasks"]] == [t["replicas"] for t in job["spec"]["tasks"]]
    assert admitted["minAvailable"] == job["spec"]["minAvailable"] == 3  # the builder's own gang size agrees
    hosts = operators.hosts_of(job)
    assert hosts["worker.host"] == "conformer-ps-worker-0.conformer-ps\nconformer-ps-worker-1.conformer-ps"
    assert hosts["VC_WORKER_HOSTS"] == "conformer-ps-worker-0.conformer-ps,conformer-ps-worker-1.conformer-ps"
    pod = operators.volcano_pods(job)[0]
    env = {e["name"] for c in pod["spec"]["containers"] for e in c.get("env", [])}
    assert "VC_MASTER_HOSTS" in env and not any(name.endswith(".host") for name in env)
    (ssh,) = [v for v in pod["spec"]["volumes"] if v["name"] == "conformer-ps-ssh"]
    assert {i["path"] for i in ssh["secret"]["items"]} == {".ssh/id_rsa", ".ssh/id_rsa.pub", ".ssh/authorized_keys",
                                                          ".ssh/config"}  # fmt: skip
    mounts = [m for c in pod["spec"]["containers"] for m in c["volumeMounts"] if m["name"] == "conformer-ps-ssh"]
    assert mounts and all(
        m == {"name": "conformer-ps-ssh", "mountPath": "/root/.ssh", "subPath": ".ssh"} for m in mounts
    )
