"""Every config key (the platform's and a team workspace's) is documented, listed in docs/config.md, and
rejects a value of the wrong shape."""

from __future__ import annotations

import pytest

from components.__main__ import config_reference
from components.render import ROOT
from components.section import SettingsError, leaf_keys
from components.settings import PlatformSettings, load_settings
from components.team import TeamSettings, load_team_settings

KEYS = [key for key, _, _ in leaf_keys(PlatformSettings)]
TEAM_KEYS = [key for key, _, _ in leaf_keys(TeamSettings)]
WRONG_SHAPE = {"unexpected": ["mapping"]}


def nested(key: str, value: object) -> dict:
    head, _, rest = key.partition(".")
    return {head: nested(rest, value) if rest else value}


def test_docs_config_md_is_current():
    assert (ROOT / "docs" / "config.md").read_text() == config_reference(), "run: python -m components docs"


@pytest.mark.parametrize(
    ("model", "key"), [(PlatformSettings, k) for k in KEYS] + [(TeamSettings, k) for k in TEAM_KEYS]
)
def test_every_key_has_a_line_of_docs(model, key):
    info = dict((k, i) for k, i, _ in leaf_keys(model))[key]
    assert info.description and len(info.description) > 10


@pytest.mark.parametrize("key", KEYS)
def test_every_key_rejects_a_value_of_the_wrong_shape(key):
    with pytest.raises(SettingsError) as caught:
        load_settings("dev", nested(key, WRONG_SHAPE))
    assert f"  - {key}" in str(caught.value)


@pytest.mark.parametrize("key", TEAM_KEYS)
def test_every_team_key_rejects_a_value_of_the_wrong_shape(key):
    with pytest.raises(SettingsError) as caught:
        load_team_settings(nested(key, WRONG_SHAPE))
    assert f"  - {key}" in str(caught.value)
