"""Quotas: per-tier storage quotas and container defaults of a vended team namespace, checked at settings time."""

from __future__ import annotations

import pytest

from components.quotas import QuotaSettings, TierQuota, limit_range_spec, quota_spec
from components.section import SettingsError
from components.settings import load_settings


def test_the_quota_limits_each_tier_class_by_storage_and_claims():
    quota = QuotaSettings(tiers={"cold": TierQuota(storage="2Ti", claims=3), "hot": TierQuota(claims=0)})
    assert quota_spec(quota, "ai-") == {
        "hard": {
            "ai-cold.storageclass.storage.k8s.io/requests.storage": "2Ti",
            "ai-cold.storageclass.storage.k8s.io/persistentvolumeclaims": "3",
            "ai-hot.storageclass.storage.k8s.io/persistentvolumeclaims": "0",
        }
    }


def test_containers_that_set_nothing_get_the_defaults():
    (limits,) = limit_range_spec(QuotaSettings())["limits"]
    assert limits["type"] == "Container"
    assert limits["defaultRequest"] == {"cpu": "500m", "memory": "1Gi"} and limits["default"] == {"memory": "4Gi"}


def vended(**team: object) -> dict:
    """Platform config with one vended team (over the dev profile's teams)."""
    return {"teams": {"workspaces": [{"name": "nlp", **team}]}}


@pytest.mark.parametrize(
    ("team", "key", "expected"),
    [
        ({"space": "3Ti"}, "space", "at most 2Ti"),  # dev's teams.quota: 2Ti cold
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
    assert vision.quota.tiers["cold"].storage == "2Ti"  # stacks/dev.yaml teams.quota
    mine = load_settings("dev", vended(quota={"tiers": {"cold": {"storage": "3Ti"}}})).teams.workspaces[0]
    assert mine.quota.tiers["cold"] == TierQuota(storage="3Ti", claims=8)  # claims from teams.quota
    assert mine.quota.tiers["hot"].storage == "500Gi"
    # Without a profile's teams.quota, the code defaults are the base: a team's override keeps the other tiers.
    prod = load_settings("prod", vended(quota={"tiers": {"cold": {"storage": "1Ti"}}})).teams.workspaces[0]
    assert prod.quota.tiers["cold"] == TierQuota(storage="1Ti", claims=QuotaSettings().tiers["cold"].claims)
    assert prod.quota.tiers["hot"] == QuotaSettings().tiers["hot"]


@pytest.mark.parametrize(
    ("team", "key", "expected"),
    [
        ({"quota": {"tiers": {"archive": {}}}}, "quota.tiers.archive", "expected"),
        ({"quota": {"tiers": {"cold": {"storage": "lots"}}}}, "quota.tiers.cold.storage", "Kubernetes quantity"),
        ({"quota": {"tiers": {"cold": {"claims": -1}}}}, "quota.tiers.cold.claims", ">= 0"),
        ({"quota": "small"}, "quota", "expected a mapping"),
    ],
)
def test_bad_quota_settings_are_rejected_with_key_and_hint(team, key, expected):
    with pytest.raises(SettingsError) as caught:
        load_settings("dev", vended(**team))
    message = str(caught.value)
    assert f"teams.workspaces[0].{key}" in message and expected in message and "Hint:" in message
