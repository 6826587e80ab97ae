"""RookCeph: three pinned steps (operator, CSI drivers, cluster), durable pools, and the rules that guard them."""

from __future__ import annotations

import re

import pytest
import yaml

from components.common import versions
from components.settings import SettingsError, load_settings
from components.tiers import rook_ceph
from components.tiers.ceph import RgwSettings, RookCephSettings
from components.tiers.rook_ceph import RookCeph, RookCephArgs
from components.toolchain.cli import main
from tests.conformance.upstream import UPSTREAM, validate_custom_resource
from tests.conftest import by_name, objects, stack_settings

RECOMMENDED = UPSTREAM / "rook-ceph/ceph-csi-drivers/rook-recommended/values.yaml"
DEFAULTS = RookCephSettings()


def crs(result, kind):
    return [o for o in objects(result, kind) if o["apiVersion"] == "ceph.rook.io/v1"]


def registration(monitor, name):
    return next(r for r in monitor.registrations if r.name == name)


def rook(settings: RookCephSettings = DEFAULTS, protect: bool = False, rgw: bool = False) -> RookCeph:
    return RookCeph("ceph", RookCephArgs(settings, protect, rgw))


def test_operator_csi_drivers_and_cluster_are_pinned_and_ordered(build):
    result, monitor = build(rook)
    charts = {c["chart"]: c for c in result.charts}
    for pin in (versions.ROOK_CEPH, versions.CEPH_CSI_DRIVERS):
        assert (charts[pin.chart]["version"], charts[pin.chart]["repo"]) == (pin.version, pin.repo)
    assert charts["rook-ceph"]["values"]["crds"]["enabled"] is True
    assert charts["rook-ceph"]["values"]["csi"]["installCsiOperator"] is True
    operator = registration(monitor, "ceph-operator").urn
    drivers = registration(monitor, "ceph-csi-drivers")
    cluster = registration(monitor, "ceph-cluster")
    assert operator in drivers.dependencies
    assert {operator, drivers.urn} <= set(cluster.dependencies)
    data = [r for r in monitor.registrations if r.inputs.get("kind") in ("CephBlockPool", "CephFilesystem")]
    assert data and all({operator, cluster.urn} <= set(r.dependencies) for r in data)


def test_csi_drivers_get_rooks_recommended_values_and_rbd_snapshots_when_the_platform_makes_snapshot_classes():
    recommended = yaml.safe_load(RECOMMENDED.read_text())
    assert rook_ceph.csi_drivers_values(RookCephSettings(snapshot_classes=False)) == recommended
    # The chart's default leaves the RBD snapshot sidecar out (rook/rook#18156); CephFS has it by default.
    values = rook_ceph.csi_drivers_values(RookCephSettings())
    assert values["drivers"]["rbd"]["snapshotPolicy"] == "volumeSnapshot"
    values["drivers"]["rbd"].pop("snapshotPolicy")
    assert values == recommended


def test_csi_driver_names_follow_the_operator_namespace():
    values = rook_ceph.csi_drivers_values(RookCephSettings(namespace="storage"))
    assert values["operatorConfig"]["namespace"] == "storage"
    assert values["drivers"]["cephfs"]["name"] == "storage.cephfs.csi.ceph.com"


def test_ceph_never_uses_all_devices(build):
    for storage in ({}, {"nodes": [{"name": "node-a", "devices": ["sdb", "sdc"]}]}):
        result, _ = build(lambda storage=storage: rook(RookCephSettings.model_validate({"storage": storage})))
        assert crs(result, "CephCluster")[0]["spec"]["storage"]["useAllDevices"] is False


def test_per_node_device_lists_replace_the_filter(build):
    nodes = [{"name": "node-a", "devices": ["sdb", "/dev/disk/by-id/wwn-0x5000"]}]
    result, _ = build(lambda: rook(RookCephSettings.model_validate({"storage": {"nodes": nodes}})))
    storage = crs(result, "CephCluster")[0]["spec"]["storage"]
    assert storage["useAllNodes"] is False
    assert "deviceFilter" not in storage
    assert storage["nodes"] == [
        {"name": "node-a", "devices": [{"name": "sdb"}, {"name": "/dev/disk/by-id/wwn-0x5000"}]}
    ]


def test_default_ceph_is_three_copies_two_to_write_across_hosts_with_three_mons(build):
    result, _ = build(rook)
    cluster = crs(result, "CephCluster")[0]["spec"]
    assert cluster["mon"]["count"] == 3
    assert cluster["cleanupPolicy"]["confirmation"] == ""
    pools = [o["spec"] for o in crs(result, "CephBlockPool")]
    for fs in crs(result, "CephFilesystem"):
        pools += [fs["spec"]["metadataPool"], *fs["spec"]["dataPools"]]
    assert len(pools) == 5
    for pool in pools:
        assert pool["replicated"] == {"size": 3, "requireSafeReplicaSize": True}
        assert pool["parameters"] == {"min_size": "2"}
        assert pool["failureDomain"] == "host"


def test_zone_failure_domain_needs_three_zones_named_and_spreads_the_monitors_over_them(build):
    with pytest.raises(SettingsError) as refused:
        load_settings(
            "prod", {"rookCeph": {"failureDomain": "zone", "storage": {"zones": ["eu-west-3a", "eu-west-3b"]}}}
        )
    (problem,) = refused.value.problems
    assert problem.key == "rookCeph.storage.zones" and "expected at least 3 zones" in problem.expected
    zones = ["eu-west-3a", "eu-west-3b", "eu-west-3c"]
    settings = stack_settings("prod", {"rookCeph": {"failureDomain": "zone", "storage": {"zones": zones}}}).rook_ceph
    result, _ = build(lambda: rook(settings))
    (spread,) = crs(result, "CephCluster")[0]["spec"]["placement"]["mon"]["topologySpreadConstraints"]
    assert spread["topologyKey"] == "topology.kubernetes.io/zone" and spread["whenUnsatisfiable"] == "DoNotSchedule"
    assert spread["labelSelector"] == {"matchLabels": {"app": "rook-ceph-mon"}}
    assert all(p["spec"]["failureDomain"] == "zone" for p in crs(result, "CephBlockPool"))
    host, _ = build(rook)
    assert "placement" not in crs(host, "CephCluster")[0]["spec"]  # host: Rook's own one-mon-per-node rule


def test_every_ceph_resource_is_protected_and_retained_when_asked(build):
    # That protected stacks ask (cluster.protectStatefulResources) is the security gate's whole-stack test.
    for protect in (True, False):
        _, monitor = build(lambda protect=protect: rook(protect=protect))
        ceph = [r for r in monitor.registrations if r.inputs.get("apiVersion") == "ceph.rook.io/v1"]
        assert ceph and all((r.protect, r.retain_on_delete) == (protect, protect) for r in ceph)


def test_a_single_node_ceph_runs_one_mon_and_one_copy_which_dev_opts_into(build):
    single = RookCephSettings(mon_count=1, replica_size=1, min_size=1, accept_data_loss_risk=True)
    result, _ = build(lambda: rook(single))
    cluster = crs(result, "CephCluster")[0]["spec"]
    assert cluster["mon"]["count"] == 1
    pool = crs(result, "CephBlockPool")[0]["spec"]
    assert pool["replicated"] == {"size": 1, "requireSafeReplicaSize": False}
    assert load_settings("dev", {}).rook_ceph.accept_data_loss_risk is True


def test_warm_and_checkpoint_are_separate_filesystems_with_csi_groups(build):
    result, _ = build(lambda: rook(RookCephSettings(warm_filesystem="warm-fs", checkpoint_filesystem="ckpt-fs")))
    names = sorted(o["metadata"]["name"] for o in crs(result, "CephFilesystem"))
    assert names == ["ckpt-fs", "warm-fs"]
    for fs in crs(result, "CephFilesystem"):
        assert fs["spec"]["preserveFilesystemOnDelete"] is True
        assert fs["spec"]["dataPools"][0]["name"] == "data"
    groups = {o["spec"]["filesystemName"]: o["spec"]["name"] for o in crs(result, "CephFilesystemSubVolumeGroup")}
    assert groups == {"warm-fs": "csi", "ckpt-fs": "csi"}


def test_namespace_is_privileged_for_osds_mons_and_csi_node_plugins(build):
    result, _ = build(lambda: rook(RookCephSettings(namespace="ceph")))
    ns = by_name(result, "Namespace", "ceph")
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"


def test_rgw_object_store_is_built_only_for_the_ceph_rgw_backend(build):
    result, _ = build(rook)
    assert crs(result, "CephObjectStore") == []
    result, _ = build(lambda: rook(RookCephSettings(rgw=RgwSettings(name="objects", port=8080)), rgw=True))
    store = crs(result, "CephObjectStore")[0]
    assert store["metadata"]["name"] == "objects"
    assert store["spec"]["gateway"]["port"] == 8080


# -- durability rules: (overrides, key in the message, words naming the risk, opt-in key)
RISKY = [
    ({"replicaSize": 2, "minSize": 2}, "rookCeph.replicaSize", "lose data", {"acceptDataLossRisk": True}),
    ({"minSize": 1}, "rookCeph.minSize", "lost if that disk fails", {"acceptDataLossRisk": True}),
    ({"monCount": 1}, "rookCeph.monCount", "single point of failure", {"acceptDataLossRisk": True}),
    ({"monCount": 4}, "rookCeph.monCount", "no quorum", {"allowEvenMonCount": True}),
    ({"failureDomain": "osd"}, "rookCeph.failureDomain", "one host", {"acceptDataLossRisk": True}),
    (
        {"cleanupPolicy": {"confirmation": "yes-really-destroy-data"}},
        "rookCeph.cleanupPolicy.confirmation",
        "wipes Ceph data",
        {"acceptDataDestructionOnDelete": True},
    ),
    (
        {"cleanupPolicy": {"allowUninstallWithVolumes": True}},
        "rookCeph.cleanupPolicy.allowUninstallWithVolumes",
        "wipes Ceph data",
        {"acceptDataDestructionOnDelete": True},
    ),
    (
        {"cleanupPolicy": {"wipeDevicesFromOtherClusters": True}},
        "rookCeph.cleanupPolicy.wipeDevicesFromOtherClusters",
        "wipes Ceph data",
        {"acceptDataDestructionOnDelete": True},
    ),
]


@pytest.mark.parametrize(("risky", "key", "risk", "opt_in"), RISKY, ids=[k.split(".", 1)[1] for _, k, _, _ in RISKY])
def test_risky_ceph_settings_are_rejected_naming_key_risk_and_opt_in(risky, key, risk, opt_in):
    with pytest.raises(SettingsError) as caught:
        load_settings("prod", {"rookCeph": risky})
    message = str(caught.value)
    assert f"{key}:" in message
    assert risk in message
    opt_in_key = next(iter(opt_in))
    assert f"rookCeph.{opt_in_key}: true" in message
    settings = load_settings("prod", {"rookCeph": {**risky, **opt_in}})
    assert settings.rook_ceph.enabled


def test_min_size_above_size_is_rejected_even_with_opt_in():
    with pytest.raises(SettingsError) as caught:
        load_settings("prod", {"rookCeph": {"minSize": 4, "acceptDataLossRisk": True}})
    assert "rookCeph.minSize: expected at most replicaSize (3)" in str(caught.value)


def test_dev_without_its_opt_in_is_rejected():
    with pytest.raises(SettingsError) as caught:
        load_settings("dev", {"rookCeph": {"acceptDataLossRisk": False}})
    message = str(caught.value)
    assert "rookCeph.replicaSize:" in message and "rookCeph.minSize:" in message and "rookCeph.monCount:" in message


def test_a_device_filter_that_reaches_nvme_is_rejected_while_topolvm_is_on():
    with pytest.raises(SettingsError) as caught:
        load_settings("dev", {"rookCeph": {"storage": {"deviceFilter": "^(sd|nvme)"}}})  # dev: OSDs on every node
    assert "rookCeph.storage.deviceFilter: expected a filter that matches no NVMe device" in str(caught.value)
    settings = load_settings(
        "prod",
        {
            "rookCeph": {"storage": {"deviceFilter": "^nvme"}},
            "localNvme": {"enabled": False},
            "tiers": {"hot": "none"},
            "juicefs": {"cache": {"cacheDir": "/mnt/cache-disk/jfs"}},  # no node cache volume: a data disk named
        },
    )
    assert settings.rook_ceph.storage.device_filter == "^nvme"


INSTANCE_STORE = "^/dev/disk/by-id/nvme-Amazon_EC2_NVMe_Instance_Storage_"


def test_a_device_path_filter_selects_nitro_instance_store_disks_and_replaces_the_name_filter(build):
    """On Nitro every disk (EBS included) is nvme*: only a path filter tells instance store from EBS. Rook ignores a
    path filter beside a name filter, so the CephCluster carries the path filter alone."""
    settings = RookCephSettings.model_validate({"storage": {"devicePathFilter": INSTANCE_STORE}})
    result, _ = build(lambda: rook(settings))
    (cluster,) = crs(result, "CephCluster")
    assert "deviceFilter" not in cluster["spec"]["storage"]
    assert cluster["spec"]["storage"]["devicePathFilter"] == INSTANCE_STORE
    assert validate_custom_resource(cluster) == []
    ebs = "/dev/disk/by-id/nvme-Amazon_Elastic_Block_Store_vol0123456789abcdef0"
    assert re.search(INSTANCE_STORE, "/dev/disk/by-id/nvme-Amazon_EC2_NVMe_Instance_Storage_AWS1A2B3C4D5E6F7")
    assert not re.search(INSTANCE_STORE, ebs)


def test_a_device_path_filter_that_reaches_topolvms_nvme_is_rejected_unless_the_osds_are_apart():
    with pytest.raises(SettingsError) as caught:
        load_settings("dev", {"rookCeph": {"storage": {"devicePathFilter": INSTANCE_STORE}}})  # OSDs on every node
    assert "rookCeph.storage.devicePathFilter: expected a filter that matches no NVMe device" in str(caught.value)
    apart = {"devicePathFilter": INSTANCE_STORE, "osdNodeSelector": {"ai-storage-platform/ceph-osd": "true"}}
    settings = load_settings("dev", {"rookCeph": {"storage": apart}})
    assert settings.rook_ceph.storage.filter_in_effect()[:2] == ("devicePathFilter", INSTANCE_STORE)
    with pytest.raises(SettingsError) as caught:
        load_settings("prod", {"rookCeph": {"storage": {"devicePathFilter": "/dev/disk/by-id/(nvme"}}})
    assert "rookCeph.storage.devicePathFilter: expected a regular expression" in str(caught.value)


def test_no_devices_at_all_is_rejected():
    with pytest.raises(SettingsError) as caught:
        load_settings("prod", {"rookCeph": {"storage": {"deviceFilter": None}}})
    assert "rookCeph.storage: expected a deviceFilter, a devicePathFilter or a per-node device list" in str(
        caught.value
    )


def test_bad_regex_and_ceph_rgw_without_rook_are_rejected():
    with pytest.raises(SettingsError) as caught:
        load_settings("prod", {"rookCeph": {"storage": {"deviceFilter": "sd[b-"}}})
    assert "rookCeph.storage.deviceFilter: expected a regular expression" in str(caught.value)
    with pytest.raises(SettingsError) as caught:
        load_settings(
            "dev",
            {
                "rookCeph": {"enabled": False},
                "objectStore": {"backend": "ceph-rgw"},
                "tiers": {"warm": "none", "checkpoint": "none"},
            },
        )
    assert "objectStore.backend: expected minio or s3 when rookCeph is disabled" in str(caught.value)


def test_cli_rejects_an_even_mon_count_with_exit_2(tmp_path, capsys):
    path = tmp_path / "Pulumi.dev.yaml"
    path.write_text(yaml.safe_dump({"config": {"ai-storage-platform:rookCeph": {"monCount": 2}}}))
    assert main(["render", "--stack", "dev", "--config-file", str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "rookCeph.monCount: expected an odd number of monitors; got 2" in err
    assert "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_prod_and_staging_profiles_are_durable_without_any_opt_in():
    for stack in ("prod", "staging"):
        ceph = stack_settings(stack).rook_ceph
        assert (ceph.replica_size, ceph.min_size, ceph.failure_domain, ceph.mon_count) == (3, 2, "host", 3)
        assert not (ceph.accept_data_loss_risk or ceph.allow_even_mon_count or ceph.accept_data_destruction_on_delete)


# ---------------------------------------------------------------- block tier and snapshot classes (built alone)


def ceph(**settings: object) -> None:
    from components.tiers.storage_tiers import StorageTiers, StorageTiersArgs, TiersSettings

    built = RookCeph("ceph", RookCephArgs(RookCephSettings(**settings)))
    tiers = TiersSettings(hot="none", cold="none")
    StorageTiers("tiers", StorageTiersArgs(tiers, {"cephfs": built, "rbd": built.block}))


def test_the_block_tier_is_rwo_rbd_from_the_platform_pool_and_expandable(build):
    result, _ = build(lambda: ceph(block_pool="fastpool"))
    block = by_name(result, "StorageClass", "block")
    assert block["provisioner"] == "rook-ceph.rbd.csi.ceph.com"
    assert block["parameters"]["pool"] == "fastpool" and block["parameters"]["clusterID"] == "rook-ceph"
    assert block["parameters"]["csi.storage.k8s.io/node-stage-secret-name"] == "rook-csi-rbd-node"
    assert block["allowVolumeExpansion"] is True and block["reclaimPolicy"] == "Delete"
    assert block["metadata"]["annotations"]["ai-storage-platform/access-mode"] == "ReadWriteOnce"


def test_each_ceph_driver_gets_a_default_snapshot_class_and_the_tiers_name_theirs(build):
    result, _ = build(ceph)
    classes = {o["driver"]: o for o in objects(result, "VolumeSnapshotClass")}
    assert set(classes) == {"rook-ceph.rbd.csi.ceph.com", "rook-ceph.cephfs.csi.ceph.com"}
    for obj in classes.values():
        assert obj["metadata"]["annotations"]["snapshot.storage.kubernetes.io/is-default-class"] == "true"
        assert obj["deletionPolicy"] == "Delete"
        assert validate_custom_resource(obj) == []
    rbd = classes["rook-ceph.rbd.csi.ceph.com"]["parameters"]
    assert rbd["csi.storage.k8s.io/snapshotter-secret-name"] == "rook-csi-rbd-provisioner"
    annotations = {sc["metadata"]["name"]: sc["metadata"]["annotations"] for sc in objects(result, "StorageClass")}
    assert annotations["checkpoint"]["ai-storage-platform/snapshot-class"] == "ceph-filesystem"
    assert annotations["block"]["ai-storage-platform/snapshot-class"] == "ceph-block"


def test_the_snapshot_controller_is_installed_unless_the_cluster_has_one(build):
    _, monitor = build(ceph)
    installed = {r.inputs["directory"] for r in monitor.registrations if r.type == "kubernetes:kustomize/v2:Directory"}
    assert installed == {versions.EXTERNAL_SNAPSHOTTER_CRDS, versions.EXTERNAL_SNAPSHOTTER_CONTROLLER}
    _, monitor = build(lambda: ceph(snapshot_controller="existing"))
    assert not [r for r in monitor.registrations if r.type == "kubernetes:kustomize/v2:Directory"]
    result, _ = build(lambda: ceph(snapshot_classes=False))
    assert not objects(result, "VolumeSnapshotClass")


def test_platform_checkpoint_snapshots_need_a_ceph_checkpoint_tier():
    on_juicefs = {"tiers": {"checkpoint": "juicefs"}, "objectStore": {"minio": {"storageSize": "3Ti"}}}  # holds it
    with pytest.raises(SettingsError) as caught:
        load_settings("dev", on_juicefs)
    assert "checkpoints.snapshots.enabled: expected the checkpoint tier on cephfs" in str(caught.value)
    assert load_settings("dev", {**on_juicefs, "checkpoints": {"snapshots": {"enabled": False}}})


# ---------------------------------------------------------------- the checkpoint tier's own devices


def pool_classes(result) -> dict[str, set]:
    """The device classes of each Rook pool-owning resource's pools, by resource name."""
    found = {}
    for obj in crs(result, "CephBlockPool") + crs(result, "CephFilesystem") + crs(result, "CephObjectStore"):
        spec = obj["spec"]
        pools = [spec] if obj["kind"] == "CephBlockPool" else [spec["metadataPool"]]
        pools += spec.get("dataPools", []) + ([spec["dataPool"]] if "dataPool" in spec else [])
        found[obj["metadata"]["name"]] = {pool.get("deviceClass") for pool in pools}
    return found


@pytest.mark.parametrize(
    ("stack", "warm", "checkpoint"), [("dev", None, None), ("staging", "ssd", "nvme"), ("prod", "ssd", "nvme")]
)
def test_every_stack_puts_the_checkpoint_pools_on_their_own_device_class(render_stack, stack, warm, checkpoint):
    result, _ = render_stack(stack)
    assert pool_classes(result) == {"replicapool": {warm}, "ai-warm": {warm}, "ai-checkpoint": {checkpoint}}
    annotation = by_name(result, "StorageClass", "checkpoint")["metadata"]["annotations"]["ai-storage-platform/devices"]
    where = f"OSDs of Ceph device class {checkpoint} (apart from" if checkpoint else "every OSD of the Ceph cluster ("
    assert annotation == f"CephFilesystem ai-checkpoint on {where}" + (
        " the warm tier's)" if checkpoint else "shared with the warm tier's)"
    )
    assert all(validate_custom_resource(o) == [] for o in crs(result, "CephFilesystem"))


def test_rgw_pools_follow_the_warm_class(build):
    result, _ = build(lambda: rook(RookCephSettings(device_class="ssd", checkpoint={"deviceClass": "nvme"}), rgw=True))
    assert pool_classes(result) == {
        "replicapool": {"ssd"},
        "ai-warm": {"ssd"},
        "ai-checkpoint": {"nvme"},
        "ai-objects": {"ssd"},
    }


def test_a_disk_can_be_given_the_device_class_its_osd_gets(build):
    nodes = [{"name": "node-a", "devices": ["sdb", {"name": "sdc", "deviceClass": "checkpoint"}]}]
    result, _ = build(lambda: rook(RookCephSettings.model_validate({"storage": {"nodes": nodes}})))
    cluster = crs(result, "CephCluster")[0]
    assert cluster["spec"]["storage"]["nodes"][0]["devices"] == [
        {"name": "sdb"},
        {"name": "sdc", "config": {"deviceClass": "checkpoint"}},
    ]
    assert validate_custom_resource(cluster) == []


PROTECTED = {"cluster": {"protectStatefulResources": True}}


@pytest.mark.parametrize(
    ("ceph", "got"),
    [
        ({"deviceClass": None, "checkpoint": {"deviceClass": None}}, "None"),
        ({"deviceClass": None, "checkpoint": {"deviceClass": "hdd"}}, "'hdd'"),
        ({"deviceClass": "ssd", "checkpoint": {"deviceClass": "ssd"}}, "'ssd'"),
    ],
)
def test_a_protected_stack_refuses_checkpoint_pools_on_the_warm_tiers_devices(ceph, got):
    pools = ceph["checkpoint"]["deviceClass"] or ceph["deviceClass"]  # the record names the pools' devices
    record = {"deviceClass": pools, "deviceWriteMbS": 2000, "deviceReadMbS": 3000}
    stack = {"rookCeph": ceph, "tiers": {"decisions": {"checkpoint": record}}}
    with pytest.raises(SettingsError) as caught:
        load_settings("prod", stack)
    lines = [line for line in str(caught.value).splitlines() if "rookCeph.checkpoint.deviceClass" in line]
    assert len(lines) == 1
    assert "expected a device class other than rookCeph.deviceClass" in lines[0] and f"got {got}" in lines[0]
    assert "rookCeph.checkpoint.shareWarmDevices: true" in lines[0]
    shared = {**ceph, "checkpoint": {**ceph["checkpoint"], "shareWarmDevices": True}}
    assert load_settings("prod", {**stack, "rookCeph": shared}).rook_ceph.checkpoint.share_warm_devices is True


def test_an_unprotected_stack_may_share_devices_and_a_checkpoint_tier_off_ceph_needs_no_class():
    assert load_settings("dev", {}).rook_ceph.checkpoint_devices_apart() is False
    off_ceph = {"rookCeph": {"checkpoint": {"deviceClass": None}}, "tiers": {"checkpoint": "juicefs"}}
    off_ceph["checkpoints"] = {"snapshots": {"enabled": False}}
    assert load_settings("prod", off_ceph).tiers.checkpoint == "juicefs"


def test_the_cli_refuses_shared_checkpoint_devices_in_prod_with_one_line_and_exit_2(tmp_path, capsys):
    path = tmp_path / "Pulumi.prod.yaml"
    config = {"ai-storage-platform:rookCeph": {"checkpoint": {"deviceClass": "ssd"}}}
    path.write_text(yaml.safe_dump({"config": config}))
    assert main(["render", "--stack", "prod", "--config-file", str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "rookCeph.checkpoint.deviceClass: expected a device class other than rookCeph.deviceClass (ssd)" in err
    assert "Traceback" not in err and not (tmp_path / "out").exists()


def test_osds_kept_on_storage_nodes_of_their_own_may_take_their_nvme_disks(render_stack):
    """prod's checkpoint OSDs are the storage nodes' NVMe disks: allowed because the OSDs run only on nodes with a
    label other than TopoLVM's, and the CephCluster says so (OSDs and their prepare jobs)."""
    result, _ = render_stack("prod")
    (cluster,) = crs(result, "CephCluster")
    term = {"matchExpressions": [{"key": "ai-storage-platform/ceph-osd", "operator": "In", "values": ["true"]}]}
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}
    assert cluster["spec"]["placement"] == {"osd": affinity, "prepareosd": affinity}
    assert cluster["spec"]["storage"]["deviceFilter"] == "^(sd[b-z]|nvme[1-9]n1)$"
    assert validate_custom_resource(cluster) == []
    same = {"ai-storage-platform/local-nvme": "true"}  # TopoLVM's own label: the same nodes
    with pytest.raises(SettingsError) as caught:
        load_settings("dev", {"rookCeph": {"storage": {"deviceFilter": "^nvme[1-9]n1$", "osdNodeSelector": same}}})
    assert "rookCeph.storage.deviceFilter: expected a filter that matches no NVMe device" in str(caught.value)


@pytest.mark.parametrize("profile", ["balanced", "high_client_ops", "high_recovery_ops"])
def test_the_mclock_profile_reaches_every_osd_through_the_clusters_ceph_config(render_stack, profile):
    result, _ = render_stack("prod", rookCeph={"mclockProfile": profile})
    (cluster,) = objects(result, "CephCluster")
    assert cluster["spec"]["cephConfig"] == {"osd": {"osd_mclock_profile": profile}}
    assert validate_custom_resource(cluster) == []


def test_an_unknown_mclock_profile_is_refused_naming_the_key():
    with pytest.raises(SettingsError, match=r"rookCeph\.mclockProfile: expected one of 'balanced'"):
        load_settings("prod", {"rookCeph": {"mclockProfile": "custom"}})
