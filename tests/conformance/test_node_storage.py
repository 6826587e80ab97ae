"""Storage reaches tainted GPU nodes: with the default settings, every node-plugin DaemonSet of every storage driver
every stack installs tolerates ``nvidia.com/gpu=present:NoSchedule``, as the chart would render it: the upstream
values.yaml merged with the release's values the way Helm merges them, read at the key the chart's DaemonSet
template takes its tolerations from (restated below from the upstream templates, not from the code).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import pytest
import yaml

from components.common import versions
from components.toolchain import render
from tests.conformance.upstream import UPSTREAM
from tests.conftest import STACKS, objects, stack_settings
from tests.kube_semantics import tolerates

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
UPSTREAM_DIRS = {p.chart: p.upstream_dir for p in vars(versions).values() if isinstance(p, versions.ChartPin)}


def node_plugins(chart: str, values: Mapping[str, Any]) -> dict[str, list[str]]:
    """The node-plugin DaemonSets a storage chart renders with ``values`` (the merged values), each with the values
    key its pod template's tolerations come from (none for a chart that is not a storage driver)."""
    if chart == "juicefs-csi-driver":
        return {"juicefs-csi-node": ["node", "tolerations"]} if values["node"]["enabled"] else {}
    if chart == "topolvm":
        return {"topolvm-node": ["node", "tolerations"], "topolvm-lvmd": ["lvmd", "tolerations"]}
    if chart == "fluid":
        return {"csi-nodeplugin-fluid": ["csi", "tolerations"]} if values["csi"]["enabled"] else {}
    if chart == "ceph-csi-drivers":
        # One Driver resource per enabled driver, its nodePlugin from the driver's values (values.yaml sets its
        # tolerations to []); the operator fills only what a Driver leaves empty from driverSpecDefaults.
        return {
            f"{driver['name']}-nodeplugin": ["drivers", key, "nodePlugin", "tolerations"]
            for key, driver in values["drivers"].items()
            if driver.get("enabled")
        }
    return {}


def helm_merge(defaults: Any, override: Any) -> Any:
    """Helm's merge of user values over a chart's values.yaml: mappings merge key by key, a null deletes the key,
    anything else (lists too) replaces."""
    if not (isinstance(defaults, Mapping) and isinstance(override, Mapping)):
        return override
    merged = dict(defaults)
    for key, value in override.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = helm_merge(defaults.get(key), value)
    return merged


def at(values: Mapping[str, Any], path: list[str]) -> Any:
    for part in path:
        values = values.get(part) or {}
    return values or []


@functools.cache
def rendered(stack: str) -> render.Rendering:
    return render.rendering(stack, render.run(stack))


def storage_daemonsets(result: render.Rendering) -> dict[str, list[dict[str, Any]]]:
    """Every storage node-plugin DaemonSet (by chart and name) with its tolerations, and each Fluid Dataset's FUSE
    DaemonSet (Fluid's engines give a runtime's FUSE pods the Dataset's ``spec.tolerations``)."""
    found = {}
    for release in result.charts:
        upstream = yaml.safe_load((UPSTREAM / UPSTREAM_DIRS[release["chart"]] / "values.yaml").read_text())
        values = helm_merge(upstream, release["values"])
        for name, path in node_plugins(release["chart"], values).items():
            found[f"{release['chart']}/{name}"] = at(values, path)
    for d in objects(result, "Dataset"):
        if any(m["mountPoint"].startswith("dataset://") for m in d["spec"]["mounts"]):
            continue  # a reference Dataset (a team's): its PV is the physical dataset's, mounted by that one's FUSE
        found[f"fluid/{d['metadata']['namespace']}/{d['metadata']['name']}-fuse"] = d["spec"].get("tolerations", [])
    return found


@pytest.mark.parametrize("stack", STACKS)
def test_every_storage_node_plugin_tolerates_the_gpu_taint(stack):
    daemonsets = storage_daemonsets(rendered(stack))
    drivers = {name.split("/")[0] for name in daemonsets}
    settings = stack_settings(stack)
    fluid = {"fluid"} if settings.fluid.enabled_datasets() else set()  # a FUSE DaemonSet per dataset
    ceph = {"ceph-csi-drivers"} if settings.rook_ceph.enabled else set()  # EFS and FSx: the EKS add-ons' (docs/eks.md)
    assert drivers == {"juicefs-csi-driver", "topolvm", *ceph, *fluid}, drivers
    assert [name for name, tolerations in daemonsets.items() if not tolerates(tolerations, GPU_TAINT)] == []


def test_the_charts_own_tolerations_stay_and_none_set_leaves_the_gpu_nodes_uncovered(render_stack):
    """With `nodeStorage.tolerations: []` the charts keep their defaults (JuiceFS's CriticalAddonsOnly), and then
    the GPU nodes get no JuiceFS, TopoLVM or Ceph node plugin: what the setting is for."""
    # Dev's GPU node pools without their taint: one the node plugins do not tolerate is refused (test_node_pools).
    untainted = {"nodePools": {pool: {"tolerations": []} for pool in ("a100", "h100")}}
    result, _ = render_stack("dev", nodeStorage={"tolerations": []}, cluster=untainted)
    daemonsets = storage_daemonsets(result)
    uncovered = {name for name, tolerations in daemonsets.items() if not tolerates(tolerations, GPU_TAINT)}
    fuse = {name for name in daemonsets if name.startswith("fluid/") and name.endswith("-fuse")}
    assert fuse and uncovered == {
        "ceph-csi-drivers/rook-ceph.cephfs.csi.ceph.com-nodeplugin",
        "ceph-csi-drivers/rook-ceph.rbd.csi.ceph.com-nodeplugin",
        "juicefs-csi-driver/juicefs-csi-node",
        "topolvm/topolvm-lvmd",
        "topolvm/topolvm-node",
        *fuse,
    }
    critical = {"key": "CriticalAddonsOnly", "value": "", "effect": "NoExecute"}
    assert tolerates(daemonsets["juicefs-csi-driver/juicefs-csi-node"], critical)


def test_another_taint_reaches_every_node_plugin(render_stack):
    taint = {"key": "dedicated", "value": "training", "effect": "NoExecute"}
    toleration = {"key": "dedicated", "operator": "Equal", "value": "training", "effect": "NoExecute"}
    result, _ = render_stack("prod", nodeStorage={"tolerations": [toleration]})
    daemonsets = storage_daemonsets(result)
    assert [name for name, tolerations in daemonsets.items() if not tolerates(tolerations, taint)] == []
