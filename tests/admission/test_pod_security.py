"""The Pod Security Standards (``pod_security``) on every pod template of every platform stack and team stack, at
the levels its namespace enforces and warns at, as Pod Security admission judges them (it warns on workload
templates and enforces on pods); and one case per control that breaks it."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from tests.admission import pod_security
from tests.admission.stacks import PRIVILEGED_BY_DESIGN, TEAM_STACKS, everything, label, platform, team
from tests.conftest import STACKS

WORKLOADS = ("Pod", "Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "CronJob")
"""The kinds Pod Security admission judges (a Volcano Job or a training job is judged through the pods it makes:
``test_operator_pods``)."""


def judged(objs: list[dict[str, Any]], levels: dict[str, tuple[str, str]]) -> tuple[int, list[str], list[str]]:
    """(templates checked, violations of the enforced level, violations of the warn level) in ``objs``."""
    checked, enforced, warned = 0, [], []
    for obj in objs:
        if obj["kind"] not in WORKLOADS or obj["apiVersion"].startswith("batch.volcano.sh/"):
            continue
        enforce, warn = levels.get(obj["metadata"].get("namespace", ""), ("privileged", "privileged"))
        for path, template in pod_security.pod_templates(obj):
            checked += 1
            meta, spec = template.get("metadata") or {}, template["spec"]
            enforced += [
                f"{label(obj)} {path}: {v}" for v in pod_security.violations(spec, meta.get("annotations"), enforce)
            ]
            if label(obj) not in PRIVILEGED_BY_DESIGN:
                warned += [
                    f"{label(obj)} {path}: {v}" for v in pod_security.violations(spec, meta.get("annotations"), warn)
                ]
    return checked, enforced, warned


def levels_of(objs: list[dict[str, Any]]) -> dict[str, tuple[str, str]]:
    return {o["metadata"]["name"]: pod_security.namespace_levels(o) for o in objs if o["kind"] == "Namespace"}


@pytest.mark.parametrize("stack", STACKS)
def test_every_pod_template_of_every_platform_stack_meets_its_namespaces_levels(stack):
    objs = everything(platform(stack))
    levels = levels_of(objs)
    checked, enforced, warned = judged(objs, levels)
    assert enforced == [] and warned == []
    assert checked >= 5 and "restricted" in {w for _, w in levels.values()}


@pytest.mark.parametrize("stack", TEAM_STACKS)
def test_every_pod_template_of_every_team_stack_meets_its_namespaces_levels(as_installed, stack):
    levels = levels_of(everything(platform("dev")))
    _, enforced, warned = judged(everything(team(stack)), levels)
    assert enforced == [] and warned == []


def test_the_privileged_by_design_pods_are_what_restricted_would_refuse_and_baseline_too():
    """The node cache DaemonSet runs privileged in a namespace that enforces privileged: the exemption is real."""
    (ds,) = [o for o in everything(platform("staging")) if label(o) in PRIVILEGED_BY_DESIGN]
    spec = ds["spec"]["template"]["spec"]
    assert pod_security.violations(spec, level="privileged") == []
    assert pod_security.violations(spec, level="baseline")  # privileged containers and the host's paths


# ---------------------------------------------------------------- each control, broken once


def compliant() -> dict[str, Any]:
    """A pod spec restricted admits: the platform's own securityContexts (components.common.kube)."""
    from components.common import kube

    return {
        "securityContext": kube.restricted_pod(1000),
        "containers": [{"name": "c", "image": "busybox:1.37.0", "securityContext": kube.restricted_container(1000)}],
        "initContainers": [
            {"name": "i", "image": "busybox:1.37.0", "securityContext": kube.restricted_container(1000)}
        ],
        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}, {"name": "tmp", "emptyDir": {}}],
    }


def sc(spec: dict[str, Any], which: str = "containers") -> dict[str, Any]:
    return spec[which][0]["securityContext"]


Break = Callable[[dict[str, Any]], Any]
CASES: list[tuple[str, str, Break]] = [
    ("HostProcess", "baseline", lambda s: sc(s).update(windowsOptions={"hostProcess": True})),
    ("Host Namespaces", "baseline", lambda s: s.update(hostNetwork=True)),
    ("Host Namespaces", "baseline", lambda s: s.update(hostPID=True)),
    ("Host Namespaces", "baseline", lambda s: s.update(hostIPC=True)),
    ("Privileged Containers", "baseline", lambda s: sc(s, "initContainers").update(privileged=True)),
    ("Capabilities", "baseline", lambda s: sc(s).update(capabilities={"drop": ["ALL"], "add": ["SYS_ADMIN"]})),
    ("HostPath Volumes", "baseline", lambda s: s["volumes"].append({"name": "h", "hostPath": {"path": "/"}})),
    ("Host Ports", "baseline", lambda s: s["containers"][0].update(ports=[{"containerPort": 80, "hostPort": 80}])),
    ("AppArmor", "baseline", lambda s: sc(s).update(appArmorProfile={"type": "Unconfined"})),
    ("SELinux", "baseline", lambda s: sc(s).update(seLinuxOptions={"type": "spc_t"})),
    ("SELinux", "baseline", lambda s: s["securityContext"].update(seLinuxOptions={"user": "system_u"})),
    ("/proc Mount Type", "baseline", lambda s: sc(s).update(procMount="Unmasked")),
    ("Seccomp", "baseline", lambda s: s["securityContext"].update(seccompProfile={"type": "Unconfined"})),
    ("Sysctls", "baseline", lambda s: s["securityContext"].update(sysctls=[{"name": "kernel.msgmax", "value": "1"}])),
    ("Volume Types", "restricted", lambda s: s["volumes"].append({"name": "n", "nfs": {"server": "x", "path": "/"}})),
    ("Privilege Escalation", "restricted", lambda s: sc(s).pop("allowPrivilegeEscalation")),
    ("Running as Non-root", "restricted", lambda s: s["securityContext"].update(runAsNonRoot=False)),
    (
        "Running as Non-root",
        "restricted",
        lambda s: (s["securityContext"].pop("runAsNonRoot"), sc(s).pop("runAsNonRoot", None)),
    ),
    ("Running as Non-root user", "restricted", lambda s: sc(s, "initContainers").update(runAsUser=0)),
    (
        "Seccomp (restricted)",
        "restricted",
        lambda s: (s["securityContext"].pop("seccompProfile"), sc(s).pop("seccompProfile", None)),
    ),
    ("Capabilities (restricted)", "restricted", lambda s: sc(s).update(capabilities={"drop": ["NET_RAW"]})),
    (
        "Capabilities (restricted)",
        "restricted",
        lambda s: sc(s).update(capabilities={"drop": ["ALL"], "add": ["CHOWN"]}),
    ),
]


def test_the_compliant_pod_passes_every_level():
    assert [pod_security.violations(compliant(), level=lv) for lv in ("baseline", "restricted")] == [[], []]


@pytest.mark.parametrize(("control", "level", "breaks"), CASES, ids=[f"{c}-{i}" for i, (c, _, _) in enumerate(CASES)])
def test_each_control_refuses_the_field_that_breaks_it(control, level, breaks):
    spec = copy.deepcopy(compliant())
    breaks(spec)
    at_restricted = [v.split(": ")[0] for v in pod_security.violations(spec, level="restricted")]
    at_baseline = [v.split(": ")[0] for v in pod_security.violations(spec, level="baseline")]
    if level == "baseline":
        assert at_baseline == [control] and control in at_restricted  # (restricted's own version may join it)
    else:
        assert at_restricted == [control] and at_baseline == []


def test_app_armor_annotations_and_image_volumes():
    spec = compliant()
    bad = {"container.apparmor.security.beta.kubernetes.io/c": "unconfined"}
    assert [v.split(": ")[0] for v in pod_security.violations(spec, bad, "baseline")] == ["AppArmor"]
    good = {"container.apparmor.security.beta.kubernetes.io/c": "runtime/default"}
    assert pod_security.violations(spec, good, "restricted") == []
    spec["volumes"].append({"name": "w", "image": {"reference": "ghcr.io/example/weights:1.0"}})
    assert pod_security.violations(spec, level="restricted") == []  # v1.33 admits image volumes
