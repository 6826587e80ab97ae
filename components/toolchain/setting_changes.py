"""The settings a change touches, each with its effect on data from ``components/settings/setting_effects.py``: the diff
compares the two renders' ``settings.json`` key by key (a named list's entries by name, a mapping's by key) and
turns each changed key into a note, and each that moves data, stops I/O or can lose writes into a block."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from ..common.sections import every_key
from ..settings import PlatformSettings
from ..settings.setting_effects import Entry, entry_of
from .diff_model import Change
from .diff_rules import value_text

SETTING = "ai-storage:setting"


@dataclass
class SettingChange:
    """One changed key: its path (entries by name or key), the tree path it is decided under, both values."""

    path: str
    shape: str
    old: Any
    new: Any

    @property
    def entry(self) -> Entry | None:
        return entry_of(self.shape)

    @property
    def note(self) -> str:
        """The reviewer's line: the key, both values, its effect and why."""
        entry = self.entry
        effect = f"{entry.effect.value}: {entry.why}" if entry else "undecided (add it to setting_effects.py)"
        return f"setting `{self.path}` {value_text(self.old)} -> {value_text(self.new)}: {effect}"


@cache
def _shapes() -> frozenset[str]:
    """Every key path of the settings tree and each of its prefixes."""
    found: set[str] = set()
    for key in every_key(PlatformSettings):
        parts = key.replace("[]", ".[]").split(".")
        found.update(".".join(parts[:i]).replace(".[]", "[]") for i in range(1, len(parts) + 1))
    return frozenset(found)


def _entries(value: Any, shape: str) -> dict[str, Any] | None:
    """A mapping's or a named list's entries by key, when the tree has entries at ``shape``; else None (a leaf)."""
    shapes = _shapes()
    if f"{shape}[]" not in shapes:
        return None
    if isinstance(value, dict):
        return value
    if isinstance(value, list) and all(isinstance(v, dict) and "name" in v for v in value):
        return {v["name"]: v for v in value}
    return None


def _leaves(value: Any, path: str = "", shape: str = "") -> dict[str, tuple[str, Any]]:
    """Each leaf of a settings tree as {path: (shape, value)}; an entry set also as the list of its keys."""
    join = f"{shape}." if shape else ""
    if isinstance(value, dict) and value and all(f"{join}{k}" in _shapes() for k in value):
        found: dict[str, tuple[str, Any]] = {}
        for k, v in value.items():
            found.update(_leaves(v, f"{path}.{k}" if path else k, f"{join}{k}"))
        return found
    entries = _entries(value, shape)
    if entries is None:
        return {path: (shape, value)}
    found = {path: (shape, sorted(entries))}
    for k, v in entries.items():
        found.update(_leaves(v, f"{path}[{k}]", f"{shape}[]"))
    return found


def _entries_in(path: str) -> list[str]:
    """The entries a path lies in: ``a[x].b[y].c`` -> ``a[x]``, ``a[x].b[y]``."""
    return [path[: i + 1] for i, char in enumerate(path) if char == "]"]


def setting_changes(base: dict[str, Any], head: dict[str, Any]) -> list[SettingChange]:
    """Every key whose value differs between two stacks' settings, in the head's order then the base's; an entry
    added or removed is one change of its list (the keys inside it are not listed one by one)."""
    old, new = _leaves(base), _leaves(head)
    entries = [{e for p in side for e in _entries_in(p)} for side in (old, new)]
    changes = []
    for path in [*new, *(p for p in old if p not in new)]:
        if any(e not in entries[0] or e not in entries[1] for e in _entries_in(path)):
            continue  # inside an entry one side lacks: its list's change says it
        before, after = old.get(path, (None, None))[1], new.get(path, (None, None))[1]
        if before != after:
            changes.append(SettingChange(path, (new.get(path) or old[path])[0], before, after))
    return changes


def setting_blocks(changes: list[SettingChange], resources: list[Change]) -> list[Change]:
    """A blocking Change (``Setting/<path>``) per changed key whose effect blocks, unless a resource's own rule
    already blocks it as that resource (the entry's ``shown_by``)."""
    shown = {c.type for c in resources if c.moves_data}
    found = []
    for s in changes:
        entry = s.entry
        if entry is None or not entry.blocks(s.old, s.new) or shown & set(entry.shown_by):
            continue
        change = Change(f"Setting/{s.path}", SETTING, s.path, "update", moves_data=True)
        change.fields, change.values = [s.path], [f"`{s.path}` {value_text(s.old)} -> {value_text(s.new)}"]
        change.notes.append(
            f"{entry.effect.value}: {entry.why}. Acknowledge `Setting/{s.path}` in cluster.acknowledgeReplacements "
            "once the data is safe"
        )
        found.append(change)
    return found
