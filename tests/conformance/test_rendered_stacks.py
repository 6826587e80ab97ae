"""Every stack in the repo, rendered offline, checked against references no one here wrote."""

from __future__ import annotations

import functools

import pytest

from components.common import versions
from components.settings import PROJECT, decode, load_settings
from components.toolchain import render
from components.toolchain.render import ROOT
from tests.conformance.upstream import chart_version_errors, validate_object, values_path_errors
from tests.conftest import STACKS

PINS = {pin.chart: pin for pin in vars(versions).values() if isinstance(pin, versions.ChartPin)}

# Value paths under which upstream leaves the structure to the user (nothing to check against).
FREE_FORM: dict[str, str] = {
    "operatorConfig.driverSpecDefaults.controllerPlugin.priorityClassName": (
        "ceph-csi-drivers 1.0.4 reads it in templates/operatorConfig.yaml and Rook's recommended values set it, "
        "but the chart's values.yaml does not declare it"
    ),
}

# Pins newer than the upstream files in ../shared, with the reason.
NEWER: dict[str, str] = {}


@functools.cache
def rendered(stack: str) -> render.Rendering:
    return render.rendering(stack, render.run(stack))


def kubernetes_version(stack: str) -> str:
    config, _ = render.stack_file_config(ROOT / f"Pulumi.{stack}.yaml")
    prefix = f"{PROJECT}:"
    ours = {k.removeprefix(prefix): decode(v) for k, v in config.items() if k.startswith(prefix)}
    return load_settings(stack, ours).cluster.kubernetes_version


def test_every_stack_in_the_repo_is_checked():
    assert "dev" in STACKS


@pytest.mark.parametrize("stack", STACKS)
def test_every_rendered_object_passes_its_schema(stack):
    version = kubernetes_version(stack)
    result = rendered(stack)
    checked, errors = 0, []
    for component, objs in sorted(result.manifests.items()):
        for obj in objs:
            checked += 1
            errors += [f"{component}: {e}" for e in validate_object(obj, version)]
    assert checked > 0
    assert errors == []


@pytest.mark.parametrize("stack", STACKS)
def test_every_chart_value_path_exists_upstream(stack):
    errors = []
    for chart in rendered(stack).charts:
        pin = PINS[chart["chart"]]
        errors += values_path_errors(pin.upstream_dir, chart["values"], FREE_FORM)
    assert errors == []


@pytest.mark.parametrize("stack", STACKS)
def test_charts_render_at_their_pinned_versions(stack):
    for chart in rendered(stack).charts:
        pin = PINS[chart["chart"]]
        assert (chart["version"], chart["repo"]) == (pin.version, pin.repo)


def test_pinned_chart_versions_match_the_upstream_files():
    pins = {pin.upstream_dir: pin.version for pin in PINS.values()}
    assert chart_version_errors(pins, NEWER) == []
