"""The runbook's procedures that change settings, followed as written (docs/runbook.md): the settings or the YAML
the procedure gives applied to a stack, the diff taken with exactly the acknowledgements the procedure names, and
nothing left blocking or refused."""

from __future__ import annotations

import re
from typing import Any

import yaml

from components.toolchain import plan_diff, render
from tests.conftest import stack_settings

RUNBOOK = (render.ROOT / "docs" / "runbook.md").read_text()
ACKNOWLEDGED = re.compile(r"`((?:Namespace|PersistentVolumeClaim|PersistentVolume|Setting|JuiceFSVolume)/[^`]+)`")


def section(title: str) -> str:
    """The text of the runbook's ``## title`` section."""
    start = RUNBOOK.index(f"\n## {title}\n")
    end = RUNBOOK.find("\n## ", start + 1)
    return RUNBOOK[start : end if end > 0 else None]


def named(text: str, **placeholders: str) -> list[str]:
    """The acknowledgements a procedure names, its ``<placeholders>`` filled in."""
    found = []
    for ref in ACKNOWLEDGED.findall(text):
        for key, value in placeholders.items():
            ref = ref.replace(f"<{key}>", value)
        found.append(ref)
    return sorted(set(found))


def first_yaml(text: str) -> dict[str, Any]:
    return yaml.safe_load(text.split("```yaml\n", 1)[1].split("```", 1)[0])


def diff(render_stack, tmp_path, stack: str, before: dict, after: dict, acknowledged: list[str]):
    sides = []
    for name, overrides in (("before", before), ("after", after)):
        result, _ = render_stack(stack, **overrides)
        render.write(result, tmp_path / name)
        sides.append(plan_diff.load_render(tmp_path / name))
    return plan_diff.diff_stack(stack, *sides, acknowledged)


def test_retire_a_team_leaves_no_block_with_the_acknowledgements_it_names(render_stack, tmp_path):
    team = {"name": "vision", "space": "100Gi", "datasets": ["vision-eval"]}
    acks = named(section("Retire a team"), ns="vision", team="vision", dataset="vision-eval")
    assert "Namespace/vision" in acks and "PersistentVolume/team.vision.vision-eval" in acks
    d = diff(render_stack, tmp_path, "prod", {"teams": {"workspaces": [team]}}, {"teams": {"workspaces": []}}, acks)
    assert [c.id for c in d.blocking] == [] and d.stale == []
    assert {c.id for c in d.changes if c.action == "delete"} >= set(acks)


def test_rename_the_juicefs_volume_leaves_no_block_with_the_acknowledgements_it_names(render_stack, tmp_path):
    acks = named(section("Rename the JuiceFS volume"), **{"new name": "ai-datasets-v2"})
    assert acks == ["JuiceFSVolume/ai-datasets-v2", "Setting/metadata.database"]
    database = stack_settings("eks-gpu-prod").metadata.database + 1
    after = {"juicefs": {"volumeName": "ai-datasets-v2"}, "metadata": {"database": database}}
    d = diff(render_stack, tmp_path, "eks-gpu-prod", {}, after, acks)
    assert [c.id for c in d.blocking] == [] and d.stale == []


def test_move_the_metadata_to_another_engine_leaves_no_block_with_the_acknowledgement_it_names(render_stack, tmp_path):
    step = section("Move the metadata to another engine")
    config = first_yaml(step)
    acks = config["ai-storage-platform:cluster"]["acknowledgeReplacements"]
    assert acks == ["Setting/metadata.engine"] and "Setting/metadata.flavor" in named(step)  # flavor: its own pass
    after = {"metadata": {**config["ai-storage-platform:metadata"], "acceptNodeLossRisk": True}}
    d = diff(render_stack, tmp_path, "dev", {}, after, acks)
    assert [c.id for c in d.blocking] == [] and d.stale == []


def test_add_a_dataset_as_written_renders_and_blocks_nothing(render_stack, tmp_path):
    entry = first_yaml(section("Add a dataset"))["fluid"]["datasets"][0]
    datasets = [d.model_dump(by_alias=True) for d in stack_settings("prod").fluid.datasets]
    grown = {"cacheVolume": {"sizeGib": 2100}}  # prod's volume is full: grown as the section says
    after = {"fluid": {"datasets": [*datasets, entry]}, "localNvme": grown}
    d = diff(render_stack, tmp_path, "prod", {}, after, [])
    assert d.blocking == [] and d.stale == []
    (grow,) = [n for n in d.notes if n.startswith("setting `localNvme.cacheVolume.sizeGib` 1700 -> 2100")]
    assert "needs node action" in grow
    assert any(c.id == f"Dataset/{entry['namespace']}/{entry['name']}" and c.action == "create" for c in d.changes)


def test_add_a_queue_as_written_renders_and_blocks_nothing(render_stack, tmp_path):
    entry = first_yaml(section("Add a queue"))["volcano"]["queues"][0]
    queues = [q.model_dump(by_alias=True, exclude_none=True) for q in stack_settings("dev").volcano.queues]
    d = diff(render_stack, tmp_path, "dev", {}, {"volcano": {"queues": [*queues, entry]}}, [])
    assert d.blocking == [] and d.stale == []
    assert any(c.id == f"Queue/{entry['name']}" and c.action == "create" for c in d.changes)


def test_add_a_team_blocks_nothing(render_stack, tmp_path):
    assert "Add an entry to `teams.workspaces`" in section("Add a team")
    team = {"name": "vision", "space": "100Gi", "datasets": ["vision-eval"]}
    d = diff(render_stack, tmp_path, "prod", {}, {"teams": {"workspaces": [team]}}, [])
    assert d.blocking == [] and d.stale == []
    assert any(c.id == "Namespace/vision" and c.action == "create" for c in d.changes)
