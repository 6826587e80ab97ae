"""The data the storage-aware diff works on, a stack's render (``Render``), and what it finds: a ``Change`` per
resource and a ``StackDiff`` per stack."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Change:
    """One resource's fate in a stack."""

    id: str
    type: str
    name: str
    action: str
    """create, update, replace, delete or rejected (an update the API server refuses)."""
    fields: list[str] = field(default_factory=list)
    values: list[str] = field(default_factory=list)
    """The changed fields with their old and new value (``field old -> new``; long values left out)."""
    reasons: list[str] = field(default_factory=list)
    """Why it is replaced or rejected: the field, the rule and its source."""
    notes: list[str] = field(default_factory=list)
    """What it means for data."""
    protected: bool = False
    holds_data: bool = False
    acknowledged: bool = False
    moves_data: bool = False
    """An update that moves the data it holds, stops its I/O or can lose acknowledged writes (a Ceph pool's CRUSH
    rule, a JuiceFS volume renamed, writeback turned on): it blocks until acknowledged, like a replace."""

    @property
    def needs_acknowledgement(self) -> bool:
        """A replace or delete of a protected or data-holding resource, or an update that moves data."""
        gone = self.action in ("replace", "delete") and (self.protected or self.holds_data)
        return gone or self.moves_data

    @property
    def blocking(self) -> bool:
        """One that needs an acknowledgement nobody gave."""
        return self.needs_acknowledgement and not self.acknowledged


@dataclass
class StackDiff:
    """The diff of one stack."""

    stack: str
    changes: list[Change] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """Stack-wide findings: chart bumps, the metadata engine, each changed setting with its effect."""
    stale: list[str] = field(default_factory=list)
    """Acknowledgements of nothing this diff would block: refused (one left in place would pass a later
    replace of the same resource unseen)."""

    @property
    def blocking(self) -> list[Change]:
        return [c for c in self.changes if c.blocking]


@dataclass
class Render:
    """One stack's render as data."""

    plan: dict[str, Any]
    outputs: dict[str, Any] | None
    """None for a render written before outputs.json existed (0.1.0)."""
    settings: dict[str, Any] | None = None
    """The stack's resolved settings (settings.json); None for a render written before it existed."""

    @property
    def resources(self) -> list[dict[str, Any]]:
        return list(self.plan["resources"])


def load_render(folder: Path) -> Render:
    """A stack's render folder (plan.json, and outputs.json and settings.json when the renderer wrote them)."""
    outputs, settings = folder / "outputs.json", folder / "settings.json"
    return Render(
        json.loads((folder / "plan.json").read_text()),
        json.loads(outputs.read_text()) if outputs.is_file() else None,
        json.loads(settings.read_text()) if settings.is_file() else None,
    )


def resource_id(r: dict[str, Any]) -> str:
    """How the diff (and ``cluster.acknowledgeReplacements``) names a resource."""
    inputs = r["inputs"]
    meta = inputs.get("metadata") if isinstance(inputs.get("metadata"), dict) else None
    if r["type"].startswith("kubernetes:") and meta and "kind" in inputs and "name" in meta:
        return "/".join(p for p in (inputs["kind"], meta.get("namespace"), meta["name"]) if p)
    return f"{r['type']}/{r['name']}"
