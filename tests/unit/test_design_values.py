"""Every value where a stack differs from the design carries its decision (why, measured how), and a value that
changes without its decision changing too fails here (components/settings/design_values.py)."""

from __future__ import annotations

import pytest

from components.settings import load_settings
from components.settings.design_values import DECISIONS, DESIGN, differences
from tests.conftest import STACKS, stack_settings


@pytest.mark.parametrize("stack", STACKS)
def test_every_difference_from_the_design_is_decided(stack):
    undecided = [
        f"{value.key}: the design says {value.design!r} ({value.source}), {stack} has {actual!r}"
        for value, actual, decision in differences(stack_settings(stack))
        if decision is None
    ]
    assert undecided == [], (
        "record each in components/settings/design_values.py DECISIONS (why, measured how):\n" + "\n".join(undecided)
    )


def test_a_value_changed_without_its_record_is_undecided():
    changed = load_settings(
        "prod", {"juicefs": {"cache": {"cacheSizeMib": 2 * 1048576}}, "localNvme": {"cacheVolume": {"sizeGib": 3000}}}
    )
    (found,) = [(v.key, a) for v, a, d in differences(changed) if d is None]
    assert found == ("juicefs.cache.cacheSizeMib", 2 * 1048576)
    back = load_settings(
        "prod", {"juicefs": {"cache": {"maxUploads": 40}}}
    )  # the design's own value: nothing to decide
    assert "juicefs.cache.maxUploads" not in {v.key for v, _, _ in differences(back)}


def test_every_decision_is_used_and_says_why_and_how_it_was_measured():
    used = {
        (d.key, stack, d.value) for stack in STACKS for _, _, d in differences(stack_settings(stack)) if d is not None
    }
    for d in DECISIONS:
        assert d.why and d.measured, d.key
        assert any((d.key, stack, d.value) in used for stack in d.stacks), f"{d.key} {d.stacks}: a stale decision"
    assert {v.key for v in DESIGN} >= {d.key for d in DECISIONS}
