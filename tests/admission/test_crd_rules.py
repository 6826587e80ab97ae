"""Every CEL rule (``x-kubernetes-validations``) of the pinned CRDs, evaluated on every custom resource of every
platform stack and team stack after the schema's defaults, as the API server evaluates them on create; and cases
that break a rule of each kind the stacks create, refused with the rule's message."""

from __future__ import annotations

import collections
import copy
from typing import Any

import pytest

from tests.admission import cel
from tests.admission.stacks import TEAM_STACKS, everything, platform, team, the_job
from tests.conftest import STACKS, objects, stack_settings


def evaluated(objs: list[dict[str, Any]]) -> tuple[collections.Counter[str], list[str]]:
    """(rules evaluated per kind, errors) over ``objs``."""
    counts: collections.Counter[str] = collections.Counter()
    errors = []
    for obj in objs:
        results = cel.crd_rules(obj)
        counts[obj["kind"]] += len(results)
        errors += cel.crd_rule_errors(obj)
    return counts, errors


@pytest.mark.parametrize("stack", STACKS)
def test_every_custom_resource_of_every_platform_stack_meets_its_crds_cel_rules(stack):
    counts, errors = evaluated(everything(platform(stack)))
    assert errors == []
    ceph = stack_settings(stack).rook_ceph.enabled  # eks-gpu-prod-aws runs no Ceph
    assert counts["CephCluster"] >= (2 if ceph else 0) and counts["ClusterTrainingRuntime"] >= 2, counts  # reached


@pytest.mark.parametrize("stack", TEAM_STACKS)
def test_every_custom_resource_of_every_team_stack_meets_its_crds_cel_rules(as_installed, stack):
    result = team(stack)
    counts, errors = evaluated(everything(result))
    assert errors == []
    if the_job(result)["kind"] == "TrainJob":
        assert counts["TrainJob"] >= 1, counts  # managedBy, defaulted, is checked


def refused(obj: dict[str, Any]) -> list[str]:
    return cel.crd_rule_errors(obj)


def test_a_ceph_cluster_with_more_mon_zones_than_monitors_is_refused():
    cluster = copy.deepcopy(objects(platform("staging"), "CephCluster")[0])
    assert refused(cluster) == []
    cluster["spec"]["mon"]["zones"] = [{"name": f"z{i}"} for i in range(cluster["spec"]["mon"]["count"] + 1)]
    (error,) = refused(cluster)
    assert error.endswith("self.spec.mon: zones must be less than or equal to count")


def test_a_training_runtime_with_two_ml_policies_is_refused():
    runtime = copy.deepcopy(objects(platform("dev"), "ClusterTrainingRuntime")[0])
    runtime["spec"]["mlPolicy"]["mpi"] = {"numProcPerNode": 1}
    (error,) = refused(runtime)
    assert error.endswith("self.spec.mlPolicy: Only one of the policy can be configured")


def test_a_trainjob_managed_by_another_controller_is_refused_and_the_default_passes(as_installed):
    job = copy.deepcopy(the_job(team("dev")))
    assert "managedBy" not in job["spec"]  # the schema's default is checked
    assert refused(job) == []
    job["spec"]["managedBy"] = "example.com/elsewhere"
    (error,) = refused(job)
    assert "self.spec.managedBy: ManagedBy must be trainer.kubeflow.org/trainjob-controller or kueue" in error


def test_transition_rules_are_left_to_updates():
    (job,) = [o for o in everything(platform("dev")) if o["kind"] == "ClusterTrainingRuntime"][:1]
    assert all("oldSelf" not in r.rule for r in cel.crd_rules(job))


def test_defaults_fill_absent_fields_before_the_rules():
    schema = {
        "type": "object",
        "properties": {"spec": {"type": "object", "properties": {"mode": {"type": "string", "default": "a"}}}},
    }
    assert cel.with_defaults(schema, {"spec": {}}) == {"spec": {"mode": "a"}}
    assert cel.with_defaults(schema, {}) == {}  # an absent object gets no defaults of its fields
