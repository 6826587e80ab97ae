"""The upgrade rules of docs/runbook.md ("Upgrade a chart"), from ``versions.UPGRADE_TOGETHER`` and
``versions.CEPH_MAJORS_PER_UPDATE``: a release bumped without its partner, the Ceph image moved in the same update as
the operator, or by more than one major, blocks until acknowledged as that release or CephCluster."""

from __future__ import annotations

import re
from typing import Any

from ..common import versions
from .data_notes import RUNBOOK_CHART
from .diff_model import Change, Render
from .diff_rules import RELEASE


def _releases(render: Render) -> dict[str, tuple[str, Any]]:
    """Each Helm release's chart name (an OCI reference's last part) -> (resource name, version)."""
    found = {}
    for r in render.resources:
        if r["type"] == RELEASE:
            chart = str(r["inputs"].get("chart", "")).rsplit("/", 1)[-1]
            found[chart] = (r["name"], r["inputs"].get("version"))
    return found


def _block(changes: list[Change], change_id: str, note: str) -> None:
    for change in changes:
        if change.id == change_id:
            change.moves_data = True
            change.notes.append(f"{note}. Acknowledge `{change_id}` in cluster.acknowledgeReplacements if you must")


def _ceph_major(image: Any) -> int | None:
    found = re.search(r":v?([0-9]+)\.", str(image))
    return int(found.group(1)) if found else None


def upgrade_rule_blocks(base: Render, head: Render, changes: list[Change]) -> None:
    """Mark the release or CephCluster changes that break an upgrade rule as blocking, with why."""
    before, after = _releases(base), _releases(head)
    moved = {chart for chart, (_, version) in after.items() if before.get(chart, (None, None))[1] != version}
    for group in versions.UPGRADE_TOGETHER:
        present = [chart for chart in group if chart in after]
        alone = [chart for chart in present if chart in moved]
        if alone and len(alone) < len(present):
            still = [chart for chart in present if chart not in moved]
            note = (
                f"upgrade rule: {', '.join(group)} move together; {', '.join(alone)} changes here but not "
                f"{', '.join(still)}: without the CSI drivers the Rook release names, no Ceph volume mounts "
                f"({RUNBOOK_CHART})"
            )
            for chart in alone:
                _block(changes, f"{RELEASE}/{after[chart][0]}", note)
    old = {c["metadata"]["name"]: c for c in _clusters(base)}
    for cluster in _clusters(head):
        was = old.get(cluster["metadata"]["name"])
        image = cluster["spec"].get("cephVersion", {}).get("image")
        prior = (was or {}).get("spec", {}).get("cephVersion", {}).get("image")
        if was is None or image == prior:
            continue
        cluster_id = f"CephCluster/{cluster['metadata']['namespace']}/{cluster['metadata']['name']}"
        step = (_ceph_major(image) or 0) - (_ceph_major(prior) or 0)
        if step > versions.CEPH_MAJORS_PER_UPDATE:
            skips = f"upgrade rule: Ceph {prior} -> {image} skips a major; one at a time, at HEALTH_OK"
            _block(changes, cluster_id, f"{skips} ({RUNBOOK_CHART})")
        if "rook-ceph" in moved:
            both = "upgrade rule: the Ceph image moves in an update of its own, after the rook-ceph operator's"
            _block(changes, cluster_id, f"{both}; here both change ({RUNBOOK_CHART})")


def _clusters(render: Render) -> list[dict[str, Any]]:
    return [
        r["inputs"]
        for r in render.resources
        if r["type"] == "kubernetes:ceph.rook.io/v1:CephCluster" and isinstance(r["inputs"].get("metadata"), dict)
    ]
