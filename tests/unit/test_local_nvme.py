"""LocalNVMe: TopoLVM pinned, device classes from settings, cert-manager only with the pod-mutating webhook."""

from __future__ import annotations

import pytest

from components.common import versions
from components.settings import SettingsError, load_settings
from components.tiers import local_nvme
from components.tiers.local_nvme import LocalNVMe, LocalNVMeArgs, LocalNVMeSettings
from tests.conftest import by_name

DEFAULTS = LocalNVMeSettings()


def nvme(settings: LocalNVMeSettings = DEFAULTS) -> LocalNVMe:
    return LocalNVMe("nvme", LocalNVMeArgs(settings))


def charts(result):
    return {c["chart"]: c for c in result.charts}


def pinned(chart, pin):
    return (chart["version"], chart["repo"]) == (pin.version, pin.repo)


def test_topolvm_is_pinned_with_capacity_tracking_and_no_webhook_or_cert_manager(build):
    result, _ = build(nvme)
    topolvm = charts(result)["topolvm"]
    assert pinned(topolvm, versions.TOPOLVM)
    values = topolvm["values"]
    assert values["controller"]["storageCapacityTracking"]["enabled"] is True
    assert values["scheduler"]["enabled"] is False
    assert values["webhook"]["podMutatingWebhook"]["enabled"] is False
    assert values["cert-manager"]["enabled"] is False
    assert values["storageClasses"] == []
    assert "cert-manager" not in charts(result)


def test_webhook_brings_a_pinned_cert_manager_with_crds_installed_first(build):
    result, monitor = build(lambda: nvme(LocalNVMeSettings(pod_mutating_webhook=True)))
    cert_manager = charts(result)["cert-manager"]
    assert pinned(cert_manager, versions.CERT_MANAGER)
    assert cert_manager["values"]["crds"]["enabled"] is True
    assert charts(result)["topolvm"]["values"]["webhook"]["podMutatingWebhook"]["enabled"] is True
    urns = {r.name: r for r in monitor.registrations}
    assert urns["nvme-cert-manager"].urn in urns["nvme-topolvm"].dependencies
    assert (
        by_name(result, "Namespace", "cert-manager")["metadata"]["labels"]["pod-security.kubernetes.io/enforce"]
        == "restricted"
    )


def test_device_classes_become_lvmd_entries_with_thin_pools():
    settings = LocalNVMeSettings(
        device_classes=[
            {"name": "nvme", "volumeGroup": "nvme-vg", "default": True, "spareGb": 20},
            {"name": "nvme-thin", "volumeGroup": "nvme-vg", "thinPool": {"name": "pool0", "overprovisionRatio": 5.0}},
        ]
    )
    values = local_nvme.chart_values(settings)
    assert values["lvmd"]["deviceClasses"] == [
        {"name": "nvme", "volume-group": "nvme-vg", "spare-gb": 20, "default": True},
        {
            "name": "nvme-thin",
            "volume-group": "nvme-vg",
            "spare-gb": 10,
            "default": False,
            "type": "thin",
            "thin-pool": {"name": "pool0", "overprovision-ratio": 5.0},
        },
    ]


def test_lvmd_and_node_plugin_run_only_on_selected_nodes(build):
    result, _ = build(lambda: nvme(LocalNVMeSettings(node_selector={"nvme": "yes"})))
    values = charts(result)["topolvm"]["values"]
    assert values["lvmd"]["nodeSelector"] == {"nvme": "yes"}
    assert values["node"]["nodeSelector"] == {"nvme": "yes"}


def test_namespace_is_privileged_for_lvmd_and_the_node_plugin(build):
    result, _ = build(lambda: nvme(LocalNVMeSettings(namespace="nvme")))
    ns = by_name(result, "Namespace", "nvme")
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"


@pytest.mark.parametrize(
    ("classes", "expected"),
    [
        ([{"name": "a", "volumeGroup": "vg"}], "exactly one device class with default: true"),
        (
            [{"name": "a", "volumeGroup": "vg", "default": True}, {"name": "b", "volumeGroup": "vg", "default": True}],
            "exactly one device class with default: true",
        ),
        (
            [{"name": "a", "volumeGroup": "vg", "default": True}, {"name": "a", "volumeGroup": "vg2"}],
            "unique device class names",
        ),
        ([], "at least 1 item"),
    ],
)
def test_device_class_lists_need_one_default_and_unique_names(classes, expected):
    with pytest.raises(SettingsError) as caught:
        load_settings("dev", {"localNvme": {"deviceClasses": classes}})
    assert "localNvme.deviceClasses:" in str(caught.value) and expected in str(caught.value)
