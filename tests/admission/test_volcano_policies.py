"""Volcano's admission as the pinned chart installs it (its webhooks): the rules its ValidatingAdmissionPolicies
port to CEL with the webhook's own messages (``../shared/upstream/volcano/policy``), evaluated on every object they
match (the platform stacks' Queues, the team stacks' Volcano Jobs, every pod an operator builds for the Volcano
scheduler), and what only the webhook checks (``volcano_webhook``: the queue, the plugins, the pod names); a case
that breaks each kind of rule, refused with its message."""

from __future__ import annotations

import collections
import copy
import functools
from typing import Any

import pytest

from tests.admission import cel
from tests.admission.stacks import TEAM_STACKS, everything, platform, pods_of, team, the_job
from tests.admission.volcano_webhook import webhook_refusals
from tests.conformance.upstream import volcano_validating_policies
from tests.conftest import STACKS, objects


@functools.cache
def volcano() -> list[cel.Policy]:
    return cel.policies(volcano_validating_policies())


def judged(objs: list[dict[str, Any]]) -> tuple[collections.Counter[str], list[str]]:
    applied: collections.Counter[str] = collections.Counter()
    refusals = []
    for obj in objs:
        names, said = cel.policy_refusals(volcano(), obj)
        applied.update(names)
        refusals += [f"{obj['kind']} {obj['metadata']['name']}: {r}" for r in said]
    return applied, refusals


def test_the_pinned_policies_are_all_read_with_their_deny_bindings():
    assert {p.name for p in volcano()} == {
        "hypernode-validation-policy",
        "jobflow-validation-policy",
        "job-validation-policy",
        "podgroup-validation-policy",
        "pod-validation-policy",
        "queue-validation-policy",
    }


@pytest.mark.parametrize("stack", STACKS)
def test_every_queue_of_every_platform_stack_is_admitted(stack):
    queues = objects(platform(stack), "Queue")
    applied, refusals = judged(everything(platform(stack)))
    assert refusals == []
    assert applied["queue-validation-policy"] == len(queues) >= 1


@pytest.mark.parametrize("stack", TEAM_STACKS)
def test_every_volcano_object_of_every_team_stack_and_its_pods_are_admitted(as_installed, stack):
    result = team(stack)
    pods = pods_of(the_job(result), platform("dev"))
    applied, refusals = judged([*everything(result), *pods])
    assert refusals == []
    volcano_pods = [p for p in pods if p["spec"].get("schedulerName") == "volcano"]
    assert applied["pod-validation-policy"] == len(pods) and volcano_pods  # every team job is gang-scheduled
    if the_job(result)["apiVersion"].startswith("batch.volcano.sh/"):
        assert applied["job-validation-policy"] == 1


def volcano_job() -> dict[str, Any]:
    (stack,) = [s for s in TEAM_STACKS if s == "dev-volcano"]
    return copy.deepcopy(the_job(team(stack)))


@pytest.mark.parametrize(
    ("breaks", "message"),
    [
        (lambda j: j["spec"]["tasks"].append(copy.deepcopy(j["spec"]["tasks"][0])), "duplicated task name found"),
        (lambda j: j["spec"].update(minAvailable=99), "should not be greater than total replicas"),
        (lambda j: j["spec"]["tasks"][0].update(name="Master_0"), "lowercase RFC 1123 label"),
        (lambda j: j["spec"].update(policies=[{"event": "PodFailed", "action": "Explode"}]), "invalid policy action"),
        (lambda j: j["spec"].update(maxRetry=-1), "'maxRetry' cannot be less than zero"),
    ],
)
def test_a_volcano_job_that_breaks_a_rule_is_refused_with_its_message(as_installed, breaks, message):
    job = volcano_job()
    assert cel.policy_refusals(volcano(), job)[1] == []
    breaks(job)
    refusals = cel.policy_refusals(volcano(), job)[1]
    assert any(message in r for r in refusals), refusals


def test_a_queue_that_deserves_more_than_its_capability_is_refused():
    queue = copy.deepcopy(objects(platform("dev"), "Queue")[0])
    queue["spec"]["capability"] = {"cpu": "8"}
    queue["spec"]["deserved"] = {"cpu": "16"}
    assert cel.policy_refusals(volcano(), queue)[1] == ["queue-validation-policy: must be <= capability"]
    queue["spec"]["deserved"] = {"cpu": "8000m"}
    assert cel.policy_refusals(volcano(), queue)[1] == []


def test_a_volcano_pod_with_both_disruption_budget_annotations_is_refused(as_installed):
    pod = copy.deepcopy(pods_of(the_job(team("dev-volcano")), platform("dev"))[0])
    pod["metadata"].setdefault("annotations", {}).update(
        {"volcano.sh/jdb-min-available": "1", "volcano.sh/jdb-max-unavailable": "1"}
    )
    refusals = cel.policy_refusals(volcano(), pod)[1]
    assert refusals == ["pod-validation-policy: not allow configure multiple annotations at same time"]
    pod["spec"]["schedulerName"] = "default-scheduler"  # the policy judges only Volcano's pods
    assert cel.policy_refusals(volcano(), pod)[1] == []


VOLCANO_STACKS = [s for s in TEAM_STACKS if s.startswith("dev-volcano")]


@pytest.mark.parametrize("stack", VOLCANO_STACKS)
def test_the_webhook_admits_every_volcano_job_of_the_example_into_its_teams_open_queue(as_installed, stack):
    job = the_job(team(stack))
    assert job["apiVersion"].startswith("batch.volcano.sh/")
    assert webhook_refusals(job, objects(platform("dev"), "Queue")) == []


@pytest.mark.parametrize(
    ("breaks", "message"),
    [
        (lambda j: j["spec"].update(queue="nobody"), "unable to find job queue: nobody"),
        (lambda j: j["spec"]["plugins"].update(gang=[]), "unable to find job plugin: gang"),
        (lambda j: j["metadata"].update(name="j" * 60), "validate failed"),
        (lambda j: j["spec"]["plugins"].update(mpi=["--master=launcher"]), "mpi master task was not found"),
    ],
)
def test_what_only_the_webhook_checks_refuses_with_its_message(as_installed, breaks, message):
    job = volcano_job()
    breaks(job)
    refusals = webhook_refusals(job, objects(platform("dev"), "Queue"))
    assert any(message in r for r in refusals), refusals


def test_a_closed_queue_takes_no_job(as_installed):
    job = volcano_job()
    queues = copy.deepcopy(objects(platform("dev"), "Queue"))
    for q in queues:
        q["status"] = {"state": "Closed"}
    assert webhook_refusals(job, queues) == [
        f"can only submit job to queue with state `Open`, queue `{job['spec']['queue']}`"
    ]
