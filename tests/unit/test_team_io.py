"""A team's fair share of the cold tier: each vended JuiceFS claim caches in a directory of its own with its part of
the team's share and carries the team's bandwidth limits; every team's share, beside the cold tier's cache and
Fluid's levels, fits the node cache volume or the stack is refused with the arithmetic."""

from __future__ import annotations

import pytest

from components.common.sections import SettingsError
from components.settings import load_settings
from tests.conftest import objects


def volumes(result) -> dict[str, list[str]]:
    return {
        pv["metadata"]["name"]: pv["spec"]["mountOptions"]
        for pv in objects(result, "PersistentVolume")
        if pv["metadata"]["name"].startswith("team.")
    }


def option(options: list[str], name: str) -> str | None:
    found = [o.split("=", 1)[1] for o in options if o.split("=", 1)[0] == name]
    assert len(found) <= 1, options  # a team's option replaces the cold tier's, never sits beside it
    return found[0] if found else None


def test_each_vended_claim_caches_apart_with_its_part_of_the_share_and_the_teams_limits(render_stack):
    result, _ = render_stack("dev")
    pvs = volumes(result)
    root = "/var/lib/ai-storage-cache/juicefs"
    for team, claims in (("vision", ("vision-eval", "space")), ("speech", ("librispeech", "space"))):
        for claim in claims:
            options = pvs[f"team.{team}.{claim}"]
            assert option(options, "cache-dir") == f"{root}/teams/{team}/{claim}"
            assert option(options, "cache-size") == "1024"  # 2048 MiB over the team's two claims
    assert option(pvs["team.speech.space"], "download-limit") == "1000"
    assert option(pvs["team.speech.space"], "upload-limit") == "1000"
    assert option(pvs["team.vision.space"], "download-limit") is None  # vision sets no limit
    cold = next(sc for sc in objects(result, "StorageClass") if sc["metadata"]["name"] == "cold")
    assert option(cold["mountOptions"], "cache-dir") == root and option(cold["mountOptions"], "cache-size") == "10240"


def test_without_a_share_the_teams_claims_use_the_cold_tiers_cache(render_stack):
    teams = {
        "workspaces": [
            {"name": "vision", "fluidDatasets": ["imagenet-mini"], "datasets": ["vision-eval"], "space": "5Gi"}
        ]
    }
    result, _ = render_stack("dev", teams=teams)
    options = volumes(result)["team.vision.space"]
    assert (
        option(options, "cache-dir") == "/var/lib/ai-storage-cache/juicefs" and option(options, "cache-size") == "10240"
    )


def test_the_teams_shares_must_fit_the_node_cache_volume():
    big = {"name": "speech", "datasets": ["librispeech"], "io": {"cacheSizeMib": 8192}}
    with pytest.raises(SettingsError) as caught:
        load_settings("dev", {"teams": {"workspaces": [big]}})
    assert (
        "localNvme.cacheVolume.sizeGib: expected at least the JuiceFS cache 10240 MiB and the teams' shares 8192 MiB "
        "with 0.1 kept free needs 20 GiB, Fluid's SSD levels 0 GiB: 20 GiB; got 16"
    ) in str(caught.value)
    assert "the teams' io.cacheSizeMib" in str(caught.value)
    assert load_settings("dev", {"teams": {"workspaces": [{**big, "io": {"cacheSizeMib": 4096}}]}})  # 15.6 GiB


@pytest.mark.parametrize(
    ("io", "key"),
    [
        ({"cacheSizeMib": 100}, "cacheSizeMib"),
        ({"downloadLimitMbps": 0}, "downloadLimitMbps"),
        ({"uploadLimitMbps": -1}, "uploadLimitMbps"),
        ({"bandwidth": 1}, "bandwidth"),
    ],
)
def test_a_bad_team_io_value_is_refused_naming_the_key(io, key):
    with pytest.raises(SettingsError, match=rf"teams\.workspaces\[0\]\.io\.{key}: "):
        load_settings("dev", {"teams": {"workspaces": [{"name": "speech", "io": io}]}})
