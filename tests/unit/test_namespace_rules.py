"""No team gets a namespace Kubernetes reserves or one the platform uses or trusts: a platform stack's teams
(`teams.workspaces`, by name or by namespace) against that stack's own settings, and a team's project
(`workspace.namespace`) against the platform's defaults. Every bad value, each refused at load (before any resource
is registered) with its key, the reason and a hint."""

from __future__ import annotations

import pytest

from components.common.sections import SettingsError
from components.settings import PlatformSettings, load_settings
from components.teams.namespace_rules import KUBERNETES_RESERVED, namespace_settings, platform_defaults
from components.teams.team import load_team_settings

RESERVED = [*KUBERNETES_RESERVED, "kube-anything"]
PLATFORM_DEFAULTS = sorted(platform_defaults())
"""Every namespace a platform stack names with its default settings (components' and the trusted Prometheus')."""


def refusal(load, config) -> str:
    with pytest.raises(SettingsError) as caught:
        load(config)
    return str(caught.value)


def test_the_platform_defaults_cover_every_component_and_the_trusted_prometheus_namespace():
    assert platform_defaults() == namespace_settings(PlatformSettings())  # every section that names one
    assert {"juicefs-csi", "juicefs-meta", "object-store", "rook-ceph", "topolvm-system", "monitoring"} <= set(
        PLATFORM_DEFAULTS
    )


@pytest.mark.parametrize("namespace", [*RESERVED, *PLATFORM_DEFAULTS])
def test_a_team_project_refuses_a_reserved_or_platform_namespace(namespace):
    message = refusal(load_team_settings, {"workspace": {"namespace": namespace}})
    assert "workspace.namespace: expected a namespace" in message and f"got '{namespace}'" in message
    assert "Hint:" in message and len(message.splitlines()) == 2, message


@pytest.mark.parametrize("namespace", RESERVED)
@pytest.mark.parametrize("field", ["name", "namespace"])
def test_a_platform_team_refuses_a_kubernetes_namespace(namespace, field):
    team = {"name": namespace} if field == "name" else {"name": "vision", "namespace": namespace}
    message = refusal(lambda c: load_settings("dev", c), {"teams": {"workspaces": [team]}})
    assert f"teams.workspaces[0].{field}: expected a namespace Kubernetes does not reserve" in message, message
    assert "Hint:" in message


@pytest.mark.parametrize(
    ("config", "namespace", "names"),
    [
        ({}, "monitoring", "networkPolicies.prometheusNamespace"),
        ({"networkPolicies": {"prometheusNamespace": "observability"}}, "observability", "prometheusNamespace"),
        ({"juicefs": {"enabled": False}}, "juicefs-csi", "juicefs.namespace"),  # named, even if not created now
        ({}, "juicefs-csi", "not used by juicefs"),  # created: the rule against a namespace used twice says so
    ],
)
def test_a_platform_team_refuses_a_namespace_the_stack_uses_or_trusts(config, namespace, names):
    team = {"name": "vision", "namespace": namespace}
    message = refusal(lambda c: load_settings("dev", c), {**config, "teams": {"workspaces": [team]}})
    assert "teams.workspaces[0].namespace: expected a namespace" in message and names in message, message
    assert len([line for line in message.splitlines() if "teams.workspaces[0]" in line]) == 1, message


def test_a_team_namespace_of_its_own_is_accepted():
    assert load_team_settings({"workspace": {"namespace": "vision"}}).workspace.namespace == "vision"
    s = load_settings("dev", {"teams": {"workspaces": [{"name": "kubeflow-team"}]}})
    assert [t.namespace_name for t in s.teams.workspaces] == ["kubeflow-team"]
