"""Every setting's effect on data is decided once (components/settings/setting_effects.py), and the diff tells
it: a note per changed setting, a block for one that moves data, stops I/O or can lose acknowledged writes."""

from __future__ import annotations

from typing import Any

import pytest

from components.common.sections import every_key
from components.settings import PlatformSettings
from components.settings.setting_effects import EFFECTS, Effect, entry_of
from components.toolchain import plan_diff, render
from components.toolchain.setting_changes import setting_blocks, setting_changes
from tests.conftest import stack_settings


def test_every_key_of_the_settings_tree_has_its_effect_decided():
    undecided = [key for key in every_key(PlatformSettings) if entry_of(key) is None]
    assert undecided == [], f"add these to components/settings/setting_effects.py: {undecided}"


def test_every_decision_covers_a_key_no_other_decision_takes_first():
    taken = {entry_of(key).pattern for key in every_key(PlatformSettings)}
    assert [e.pattern for e in EFFECTS if e.pattern not in taken] == []


@pytest.mark.parametrize(
    ("key", "effect"),
    [
        ("rookCeph.failureDomain", Effect.MOVES_DATA),
        ("rookCeph.replicaSize", Effect.MOVES_DATA),
        ("juicefs.volumeName", Effect.STOPS_IO),
        ("juicefs.cache.writeback", Effect.LOSES_WRITES),
        ("juicefs.cache.cacheSizeMib", Effect.NODE_ACTION),
        ("rookCeph.resources.mds.memoryLimit", Effect.COST),
        ("objectStore.minio.resources.cpuLimit", Effect.COST),
        ("objectStore.minio.storageSize", Effect.REPLACES),
        ("teams.workspaces[].quota.tiers[].storage", Effect.SAFE),
        ("monitoring.rules.thresholds.readLatencyMs.warning", Effect.SAFE),
    ],
)
def test_the_cases_the_day_two_review_found_are_classified(key, effect):
    assert entry_of(key).effect is effect


def dumped(stack: str, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    return stack_settings(stack, overrides).model_dump(by_alias=True, mode="json")


def changes_between(stack: str, before: dict[str, Any], after: dict[str, Any]):
    return setting_changes(dumped(stack, before), dumped(stack, after))


def test_a_safe_change_is_a_note_and_no_block():
    (change,) = changes_between("prod", {}, {"monitoring": {"rules": {"pendingFor": "17m"}}})
    assert change.path == "monitoring.rules.pendingFor" and change.new == "17m"
    assert change.note.endswith('-> "17m": in place: alerts, dashboards and scraping')
    assert setting_blocks([change], []) == []


def test_a_quota_shrink_passes_and_says_how_to_check_what_the_team_uses():
    team = {"name": "vision", "quota": {"tiers": {"warm": {"storage": "4Ti"}}}}
    smaller = {"name": "vision", "quota": {"tiers": {"warm": {"storage": "2Ti"}}}}
    (change,) = changes_between("prod", {"teams": {"workspaces": [team]}}, {"teams": {"workspaces": [smaller]}})
    assert change.path == "teams.workspaces[vision].quota.tiers[warm].storage"
    assert "kubectl describe resourcequota" in change.note and setting_blocks([change], []) == []


def test_a_replica_count_change_blocks_as_the_setting_until_acknowledged():
    changes = changes_between("prod", {}, {"rookCeph": {"replicaSize": 2, "acceptDataLossRisk": True}})
    assert [c.path for c in changes] == ["rookCeph.replicaSize", "rookCeph.acceptDataLossRisk"]
    (block,) = setting_blocks(changes, [])
    assert block.id == "Setting/rookCeph.replicaSize" and block.blocking
    assert block.notes[0].startswith("moves data: Ceph makes or drops a copy of every object")
    acknowledged = load_ack(block.id)
    assert acknowledged == [block.id]


def load_ack(ref: str) -> list[str]:
    """An acknowledgement of a setting is a valid cluster.acknowledgeReplacements entry."""
    return stack_settings("prod", {"cluster": {"acknowledgeReplacements": [ref]}}).cluster.acknowledge_replacements


@pytest.mark.parametrize(
    ("before", "after", "blocks"),
    [
        ({"metadata": {"appendfsync": "always"}}, {"metadata": {"appendfsync": "everysec"}}, True),
        ({"metadata": {"appendfsync": "everysec"}}, {"metadata": {"appendfsync": "always"}}, False),
        ({"rookCeph": {"minSize": 2}}, {"rookCeph": {"minSize": 3}}, True),
        ({"rookCeph": {"minSize": 3}}, {"rookCeph": {"minSize": 2}}, False),
        ({}, {"juicefs": {"cache": {"extraMountOptions": ["writeback"]}}}, True),
        ({}, {"juicefs": {"cache": {"extraMountOptions": ["no-bgjob"]}}}, False),
        ({}, {"localNvme": {"cacheVolume": {"sizeGib": 1650}}}, True),  # never applied to a node: runbook first
        ({}, {"localNvme": {"cacheVolume": {"sizeGib": 1800}}}, False),
    ],
)
def test_a_change_harmful_one_way_only_blocks_that_way(before, after, blocks):
    changes = changes_between("prod", before, after)
    assert len(changes) == 1
    assert bool(setting_blocks(changes, [])) is blocks


def test_dropping_a_storage_toleration_blocks_and_adding_one_does_not():
    gpu = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    other = {"key": "storage", "operator": "Exists", "effect": "NoSchedule"}
    kept = {"nodeStorage": {"tolerations": [gpu]}}
    dropped = changes_between("prod", kept, {"nodeStorage": {"tolerations": []}})
    assert [c.id for c in setting_blocks(dropped, [])] == ["Setting/nodeStorage.tolerations"]
    assert setting_blocks(changes_between("prod", kept, {"nodeStorage": {"tolerations": [gpu, other]}}), []) == []


def test_a_block_a_resource_rule_already_shows_is_not_asked_twice():
    zone = {"rookCeph": {"failureDomain": "zone", "storage": {"zones": ["a", "b", "c"]}}}
    (change, _) = changes_between("prod", {}, zone)
    pool = plan_diff.Change("CephBlockPool/rook-ceph/replicapool", "kubernetes:ceph.rook.io/v1:CephBlockPool",
                            "replicapool", "update", moves_data=True)  # fmt: skip
    assert setting_blocks([change], [pool]) == []
    assert [b.id for b in setting_blocks([change], [])] == ["Setting/rookCeph.failureDomain"]


def test_the_diff_of_two_renders_reads_their_settings(render_stack, tmp_path):
    """End to end: the rendered settings.json of both sides, the block, the note, the acknowledgement."""
    before, _ = render_stack("staging")
    after, _ = render_stack(
        "staging", rookCeph={"replicaSize": 2, "acceptDataLossRisk": True}, juicefs={"cache": {"cacheSizeMib": 1000}}
    )
    old, new = tmp_path / "old", tmp_path / "new"
    render.write(before, old)
    render.write(after, new)
    base, head = plan_diff.load_render(old), plan_diff.load_render(new)
    diff = plan_diff.diff_stack("staging", base, head, [])
    assert [c.id for c in diff.blocking] == ["Setting/rookCeph.replicaSize"]
    (cache,) = [n for n in diff.notes if n.startswith("setting `juicefs.cache.cacheSizeMib`")]
    assert "needs node action" in cache
    assert plan_diff.exit_code([plan_diff.diff_stack("staging", base, head, ["Setting/rookCeph.replicaSize"])]) == 0


ZONES = ["eu-west-3a", "eu-west-3b", "eu-west-3c"]
CEPH_POOLS = {"CephBlockPool/rook-ceph/replicapool", "CephFilesystem/rook-ceph/ai-checkpoint",
              "CephFilesystem/rook-ceph/ai-warm"}  # fmt: skip
DAY_TWO = {  # the engineer's day-2 changes on the EKS stack: what blocks (as what), and the note's effect
    "rename the volume": ({"juicefs": {"volumeName": "v2"}}, {"JuiceFSVolume/v2"}, "stops I/O"),
    "writeback on": ({"juicefs": {"cache": {"writeback": True}}}, {"StorageClass/cold"}, "can lose acknowledged"),
    "failure domain": ({"rookCeph": {"failureDomain": "zone", "storage": {"zones": ZONES}}}, CEPH_POOLS, "moves data"),
    "min size up": ({"rookCeph": {"minSize": 3}}, {"Setting/rookCeph.minSize"}, "stops I/O"),
    "grow the cache volume": ({"localNvme": {"cacheVolume": {"sizeGib": 1800}}}, set(), "needs node action"),
    "quota shrink": ({"teams": {"quota": {"tiers": {"warm": {"storage": "512Gi"}}}}}, set(), "describe resourcequota"),
    "bigger ElastiCache nodes": ({"metadata": {"elasticache": {"nodeType": "cache.r7g.2xlarge"}}}, set(), "in place"),
    "alert timing": ({"monitoring": {"rules": {"pendingFor": "17m"}}}, set(), "in place"),
}


@pytest.fixture(scope="module")
def eks_base(tmp_path_factory):
    from tests.conftest import stack_file

    tmp = tmp_path_factory.mktemp("eks")
    result, _ = render.rendered("eks-gpu-prod", stack_file(tmp, "eks-gpu-prod", {}))
    render.write(result, tmp / "base")
    return plan_diff.load_render(tmp / "base")


@pytest.mark.parametrize("change", sorted(DAY_TWO))
def test_each_day_two_change_on_the_eks_stack_blocks_exactly_when_it_hurts_data(
    eks_base, render_stack, tmp_path, change
):
    overrides, blocks, effect = DAY_TWO[change]
    after, _ = render_stack("eks-gpu-prod", **overrides)
    render.write(after, tmp_path / "head")
    diff = plan_diff.diff_stack("eks-gpu-prod", eks_base, plan_diff.load_render(tmp_path / "head"), [])
    assert {c.id for c in diff.blocking} == blocks
    assert any(n.startswith("setting `") and effect in n for n in diff.notes), diff.notes
    assert plan_diff.exit_code([diff]) == (1 if blocks else 0)
