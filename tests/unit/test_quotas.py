"""Quotas: per-tier storage quotas and container defaults of a team's namespace, checked at settings time."""

from __future__ import annotations

import pytest

from components.quotas import QuotaSettings, TierQuota, limit_range_spec, quota_spec
from components.section import SettingsError
from components.team import load_team_settings


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


@pytest.mark.parametrize(
    ("config", "key", "expected"),
    [
        ({"dataset": {"size": "3Ti"}, "quota": {"tiers": {"cold": {"storage": "2Ti"}}}}, "dataset.size", "at most 2Ti"),
        (
            {"checkpoint": {"size": "1Ti"}, "quota": {"tiers": {"checkpoint": {"claims": 0}}}},
            "checkpoint.size",
            "at most 0",
        ),
        ({"environment": "dev", "checkpoint": {"size": "2Ti"}}, "checkpoint.size", "at most 1Ti"),
    ],
)
def test_a_workspace_whose_own_claims_exceed_its_quota_is_refused(config, key, expected):
    with pytest.raises(SettingsError) as caught:
        load_team_settings(config)
    message = str(caught.value)
    assert f"{key}:" in message and expected in message and "Hint: raise quota.tiers." in message


def test_a_fluid_dataset_is_not_counted_as_a_cold_tier_claim():
    config = {"dataset": {"source": "fluid", "size": "3Ti"}, "workspace": {"podSecurity": "privileged"}}
    assert load_team_settings({**config, "quota": {"tiers": {"cold": {"storage": "1Ti"}}}})


def test_the_environment_profile_gives_the_defaults_and_the_team_overrides_them():
    dev = load_team_settings({"environment": "dev"})
    assert dev.quota.tiers["cold"].storage == "2Ti"  # stacks/dev.yaml teams.quota
    assert load_team_settings({}).quota.tiers["cold"].storage == QuotaSettings().tiers["cold"].storage
    mine = load_team_settings({"environment": "dev", "quota": {"tiers": {"cold": {"storage": "3Ti"}}}})
    assert mine.quota.tiers["cold"].storage == "3Ti" and mine.quota.tiers["hot"].storage == "500Gi"


@pytest.mark.parametrize(
    ("config", "key", "expected"),
    [
        ({"quota": {"tiers": {"archive": {}}}}, "quota.tiers.archive", "expected"),
        ({"quota": {"tiers": {"cold": {"storage": "lots"}}}}, "quota.tiers.cold.storage", "Kubernetes quantity"),
        ({"quota": {"tiers": {"cold": {"claims": -1}}}}, "quota.tiers.cold.claims", ">= 0"),
        ({"environment": "qa"}, "profile", "expected one of"),
    ],
)
def test_bad_quota_settings_are_rejected_with_key_and_hint(config, key, expected):
    with pytest.raises(SettingsError) as caught:
        load_team_settings(config)
    message = str(caught.value)
    assert f"{key}" in message and expected in message and "Hint:" in message
