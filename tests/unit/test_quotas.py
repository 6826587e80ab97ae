"""Quotas: per-tier storage quotas and container defaults of a vended team namespace, checked at settings time,
and the admission policy that refuses claims no tier's quota counts."""

from __future__ import annotations

import functools

import celpy
import pytest

from components.common.sections import SettingsError
from components.settings import load_settings
from components.teams.quotas import (
    TEAM_LABEL,
    ContainerDefaults,
    QuotaSettings,
    TierQuota,
    limit_range_spec,
    quota_spec,
)
from components.toolchain import render
from tests.conftest import STACKS, objects, stack_settings
from tests.kube_semantics import admit_container, default_storage_class, selects


def test_the_quota_limits_each_tier_class_by_storage_and_claims():
    quota = QuotaSettings(tiers={"cold": TierQuota(storage="2Ti", claims=3), "hot": TierQuota(claims=0)})
    assert quota_spec(quota, "ai-") == {
        "hard": {
            "ai-cold.storageclass.storage.k8s.io/requests.storage": "2Ti",
            "ai-cold.storageclass.storage.k8s.io/persistentvolumeclaims": "3",
            "ai-hot.storageclass.storage.k8s.io/persistentvolumeclaims": "0",
        }
    }


def test_containers_that_set_nothing_get_the_default_requests_and_no_limit():
    container, errors = admit_container(limit_range_spec(QuotaSettings()), {"name": "train"})
    assert container["resources"] == {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {}} and errors == []


@pytest.mark.parametrize(
    "resources",
    [
        {"requests": {"memory": "8Gi"}},  # found on a real control plane with the old 4Gi default limit
        {"requests": {"memory": "8Gi", "cpu": "4"}},
        {"limits": {"memory": "16Gi"}},
        {"requests": {"memory": "8Gi"}, "limits": {"memory": "8Gi"}},
    ],
)
def test_a_container_that_asks_for_more_than_the_defaults_stays_valid(resources):
    container, errors = admit_container(limit_range_spec(QuotaSettings()), {"name": "train", "resources": resources})
    assert errors == []
    assert container["resources"]["requests"]["memory"] == resources.get("requests", resources.get("limits"))["memory"]


def test_a_default_memory_limit_applies_and_refuses_bigger_requests_as_kubernetes_does():
    quota = QuotaSettings(container_defaults=ContainerDefaults(memory_limit="4Gi"))
    container, errors = admit_container(limit_range_spec(quota), {"name": "train"})
    assert container["resources"]["limits"] == {"memory": "4Gi"} and errors == []
    _, errors = admit_container(
        limit_range_spec(quota), {"name": "train", "resources": {"requests": {"memory": "8Gi"}}}
    )
    assert errors and "must be less than or equal to memory limit" in errors[0]


def vended(**team: object) -> dict:
    """Platform config with one vended team (over the dev profile's teams)."""
    return {"teams": {"workspaces": [{"name": "nlp", **team}]}}


@pytest.mark.parametrize(
    ("team", "key", "expected"),
    [
        ({"space": "3Ti"}, "space", "at most 8Gi"),  # dev's teams.quota: 8Gi cold
        ({"space": "1Ti", "quota": {"tiers": {"cold": {"storage": "500Gi"}}}}, "space", "at most 500Gi"),
        ({"datasets": ["a", "b"], "quota": {"tiers": {"cold": {"claims": 1}}}}, "datasets[0]", "at most 1 claim"),
    ],
)
def test_a_team_whose_vended_claims_exceed_its_quota_is_refused(team, key, expected):
    with pytest.raises(SettingsError) as caught:
        load_settings("dev", vended(**team))
    message = str(caught.value)
    assert f"teams.workspaces[0].{key}:" in message and expected in message and "Hint: raise quota.tiers." in message


def test_a_fluid_reference_dataset_is_not_counted_as_a_cold_tier_claim():
    team = {"fluidDatasets": ["imagenet-mini"], "quota": {"tiers": {"cold": {"claims": 0}}}}
    assert load_settings("dev", vended(**team)).teams.workspaces[0].fluid_datasets == ["imagenet-mini"]


def test_the_profile_gives_the_defaults_and_each_team_overrides_them_key_by_key():
    (vision, _) = load_settings("dev", {}).teams.workspaces
    assert vision.quota.tiers["cold"].storage == "8Gi"  # stacks/dev.yaml teams.quota
    mine = load_settings("dev", vended(quota={"tiers": {"cold": {"storage": "16Gi"}}})).teams.workspaces[0]
    assert mine.quota.tiers["cold"] == TierQuota(storage="16Gi", claims=8)  # claims from teams.quota
    assert mine.quota.tiers["hot"].storage == "500Gi"
    # Where a profile's teams.quota is silent, the code defaults are the base: a team's override keeps the others.
    prod = load_settings("prod", vended(quota={"tiers": {"cold": {"storage": "1Ti"}}})).teams.workspaces[0]
    assert prod.quota.tiers["cold"] == TierQuota(storage="1Ti", claims=QuotaSettings().tiers["cold"].claims)
    assert prod.quota.tiers["hot"] == QuotaSettings().tiers["hot"]
    assert prod.quota.tiers["checkpoint"] == TierQuota(storage="2Ti", claims=QuotaSettings().tiers["checkpoint"].claims)


@pytest.mark.parametrize(
    ("team", "key", "expected"),
    [
        ({"quota": {"tiers": {"archive": {}}}}, "quota.tiers.archive", "expected"),
        ({"quota": {"tiers": {"cold": {"storage": "lots"}}}}, "quota.tiers.cold.storage", "Kubernetes quantity"),
        ({"quota": {"tiers": {"cold": {"claims": -1}}}}, "quota.tiers.cold.claims", ">= 0"),
        ({"quota": "small"}, "quota", "expected a mapping"),
        (
            {"quota": {"containerDefaults": {"memoryRequest": "2Gi", "memoryLimit": "1Gi"}}},
            "quota.containerDefaults.memoryLimit",
            "expected at least memoryRequest (2Gi)",
        ),
        ({"quota": {"containerDefaults": {"memoryLimit": "lots"}}}, "quota.containerDefaults.memoryLimit", "quantity"),
    ],
)
def test_bad_quota_settings_are_rejected_with_key_and_hint(team, key, expected):
    with pytest.raises(SettingsError) as caught:
        load_settings("dev", vended(**team))
    message = str(caught.value)
    assert f"teams.workspaces[0].{key}" in message and expected in message and "Hint:" in message


# ---------------------------------------------------------------- claims outside the tiers


@functools.cache
def rendered(stack: str) -> render.Rendering:
    return render.rendering(stack, render.run(stack))


def admits(stack: str, claim: dict, user: str = "alice", default_class: str | None = None) -> bool:
    """Whether the stack's ValidatingAdmissionPolicy admits ``claim`` (created by ``user``, after the
    DefaultStorageClass plugin), its CEL evaluated by cel-python as the API server evaluates it."""
    (policy,) = objects(rendered(stack), "ValidatingAdmissionPolicy")
    (rule,) = policy["spec"]["validations"]
    env = celpy.Environment()
    program = env.program(env.compile(rule["expression"]))
    activation = {
        "object": celpy.json_to_cel(default_storage_class(claim, default_class)),
        "request": celpy.json_to_cel({"userInfo": {"username": user}, "operation": "CREATE"}),
    }
    result = program.evaluate(activation)
    assert isinstance(result, celpy.celtypes.BoolType), result  # an error would fail closed (failurePolicy Fail)
    return bool(result)


def claim(storage_class: str | None = None, **spec: object) -> dict:
    """A claim as a team's manifest writes it (``storage_class`` None leaves the field out)."""
    body = {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "100Ti"}}, **spec}
    if storage_class is not None:
        body["storageClassName"] = storage_class
    meta = {"name": "data", "namespace": "team-a"}
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta, "spec": body}


def tier_classes(stack: str) -> list[str]:
    return [sc["metadata"]["name"] for sc in objects(rendered(stack), "StorageClass")]


@pytest.mark.parametrize("stack", STACKS)
def test_claims_on_every_tier_class_are_admitted(stack):
    classes = tier_classes(stack)
    assert classes
    for name in classes:
        assert admits(stack, claim(name)), name


@pytest.mark.parametrize("stack", STACKS)
@pytest.mark.parametrize(
    ("storage_class", "default_class"),
    [(None, None), ("", None), ("", "hot"), ("gp3", None), (None, "gp3"), ("fluid", None), ("hot-x", None)],
)
def test_claims_no_tier_counts_are_refused(stack, storage_class, default_class):
    assert not admits(stack, claim(storage_class), default_class=default_class)


@pytest.mark.parametrize("stack", STACKS)
def test_a_claim_without_a_class_takes_a_tier_default_class_and_is_counted(stack):
    assert admits(stack, claim(None), default_class=tier_classes(stack)[0])


@pytest.mark.parametrize("stack", STACKS)
def test_only_fluids_controllers_create_claims_of_fluids_class(stack):
    fluid = stack_settings(stack).fluid
    controller = f"system:serviceaccount:{fluid.namespace}:juicefsruntime-controller"
    assert admits(stack, claim("fluid", volumeName="team-a-data"), user=controller) is fluid.enabled
    assert not admits(stack, claim("fluid"), user="system:serviceaccount:team-a:default")
    assert not admits(stack, claim("fluid"), user=f"system:serviceaccount:{fluid.namespace}x:default")


@pytest.mark.parametrize("stack", STACKS)
def test_the_policy_denies_in_team_namespaces_only(stack):
    (policy,) = objects(rendered(stack), "ValidatingAdmissionPolicy")
    (binding,) = objects(rendered(stack), "ValidatingAdmissionPolicyBinding")
    spec = binding["spec"]
    assert spec["policyName"] == policy["metadata"]["name"] and spec["validationActions"] == ["Deny"]
    assert policy["spec"]["failurePolicy"] == "Fail"
    (rule,) = policy["spec"]["matchConstraints"]["resourceRules"]
    assert (rule["resources"], rule["operations"], rule["apiGroups"]) == (["persistentvolumeclaims"], ["CREATE"], [""])
    team = {"kubernetes.io/metadata.name": "team-a", TEAM_LABEL: "a"}
    assert selects(spec["matchResources"]["namespaceSelector"], team)
    for platform_namespace in stack_settings(stack).namespaces().values():
        assert not selects(
            spec["matchResources"]["namespaceSelector"], {"kubernetes.io/metadata.name": platform_namespace}
        )


def test_clusters_before_1_30_are_refused_with_the_reason():
    with pytest.raises(SettingsError) as caught:
        load_settings("dev", {"cluster": {"kubernetesVersion": "1.29"}})
    message = str(caught.value)
    assert "cluster.kubernetesVersion: expected 1.30 or later" in message and "ValidatingAdmissionPolicy" in message
