"""Storage-aware diff of two renders: what ``pulumi up`` would do to each stack, and what it means for data.

``python -m components diff BASE HEAD``: BASE and HEAD are render directories (``python -m components render``
output: one stack's folder, or a folder of them) or git refs, rendered on the fly with the ref's own program.
Per stack, every resource is created, updated (which fields), replaced (which field forces it, by which rule)
or deleted, with what that means for data. Resources match by Pulumi identity (type, name and the types of
its parents: the URN); inputs are compared as rendered, which is what ``pulumi preview`` compares when the
cluster has not drifted.

The replace rules are pulumi-kubernetes's (``FORCE_NEW``, with its Secret and ConfigMap switches), and the
fields the API server refuses to change are Kubernetes's (``REJECTED``); docs/review.md lists both.
A replaced or deleted resource that is protected or holds data blocks (exit 1) unless the head stack's
``cluster.acknowledgeReplacements`` names it.
"""

from __future__ import annotations

import json
import re
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

from .data_notes import chart_notes, data_notes, engine_notes, namespace_deletion_notes, volume_changes
from .diff_model import Change, Render, StackDiff, load_render, resource_id
from .diff_rules import (
    changed_leaves,
    conditional_replaces,
    data_moves,
    field_text,
    holds_data,
    matches,
    rejected_fields,
    replace_rules,
    value_text,
)
from .diff_sources import RenderError, folders
from .render import stack_settings
from .setting_changes import setting_blocks, setting_changes
from .upgrade_rules import upgrade_rule_blocks

__all__ = ["Change", "Render", "RenderError", "StackDiff", "as_json", "compare", "diff_stack", "exit_code", "markdown"]


def _keys(render: Render) -> dict[tuple[str, ...], dict[str, Any]]:
    """Resources by Pulumi identity: their type, the types of their parents, and their name (as in the URN)."""
    by_name = {r["name"]: r for r in render.resources}

    def chain(r: dict[str, Any]) -> tuple[str, ...]:
        parent = by_name.get(r.get("parent") or "")
        return (*chain(parent), parent["type"]) if parent else ()

    return {(*chain(r), r["type"], r["name"]): r for r in render.resources}


def diff_stack(stack: str, base: Render, head: Render, acknowledged: list[str]) -> StackDiff:
    """What ``pulumi up`` does to the stack rendered as ``base`` when its program becomes ``head``."""
    out = StackDiff(stack)
    old_keys, new_keys = _keys(base), _keys(head)
    for key in [*old_keys, *(k for k in new_keys if k not in old_keys)]:
        old, new = old_keys.get(key), new_keys.get(key)
        r = new or old
        assert r is not None
        if r["type"].startswith("ai-storage:"):
            continue  # components own nothing themselves
        change = Change(resource_id(old or r), r["type"], r["name"], "create" if old is None else "delete")
        if old is not None and new is not None:
            leaves = list(changed_leaves(old["inputs"], new["inputs"]))
            options = [f"({o})" for o in ("protect", "retainOnDelete") if o in old and o in new and old[o] != new[o]]
            if not leaves and not options:
                continue
            change.action, change.fields = "update", [field_text(p) for p, _, _ in leaves] + options
            change.values = [
                f"`{field_text(p)}` {value_text(a)} -> {value_text(b)}"
                for p, a, b in leaves
                if len(value_text(a)) + len(value_text(b)) <= 120
            ] + options
            for rule, source in replace_rules(new, head):
                hits = [field_text(p) for p, a, b in leaves if not rule or matches(rule, p, a, b)]
                if hits:
                    change.action = "replace"
                    where = "" if hits == [rule] else f" ({', '.join(hits)})"
                    change.reasons.append(f"`{rule or 'any input'}` changed{where}: {source}")
            for reason in conditional_replaces(r["type"], leaves):
                change.action = "replace"
                change.reasons.append(reason)
            if moved := data_moves(new, leaves):
                change.moves_data = True
                change.notes.append(_move_note(moved))
            if change.action == "update":
                for rule, source in rejected_fields(new, leaves):
                    change.action = "rejected"
                    change.reasons.append(f"`{rule}`: the API server refuses the change ({source})")
        change.protected = any(bool(x and (x.get("protect") or x.get("retainOnDelete"))) for x in (old, new))
        change.holds_data = holds_data(old or r, base if old else head)
        change.acknowledged = change.id in acknowledged
        data_notes(change, old, new, base, head)
        out.changes.append(change)
    settings = setting_changes(base.settings, head.settings) if base.settings and head.settings else []
    _add(out, volume_changes(base, head), acknowledged)
    _add(out, setting_blocks(settings, out.changes), acknowledged)  # after the resource rules it may defer to
    upgrade_rule_blocks(base, head, out.changes)
    namespace_deletion_notes(out.changes)
    out.notes += chart_notes(base, head) + engine_notes(base, head) + [s.note for s in settings]
    needed = {c.id for c in out.changes if c.needs_acknowledgement}
    out.stale = [a for a in acknowledged if a not in needed]
    return out


def _add(out: StackDiff, changes: list[Change], acknowledged: list[str]) -> None:
    for change in changes:
        change.acknowledged = change.id in acknowledged
        out.changes.append(change)


def _move_note(moved: list[str]) -> str:
    """What a Ceph pool's new CRUSH rule (``moved``: its changed fields) does to its data."""
    return (
        f"{', '.join(moved)}: the pool's CRUSH rule changes and Ceph moves its objects to meet it (a new "
        "device class: every object, onto OSDs of that class; a new failure domain: copies re-spread "
        "across hosts, racks or zones), hours of recovery I/O beside training. With no OSD of the class, "
        "or fewer failure domains than copies, the placement groups stay inactive and the pool's I/O "
        "stops (check `ceph osd crush class ls` and `ceph osd tree` first). Acknowledge it in "
        "cluster.acknowledgeReplacements"
    )


def acknowledgements(project: Path, stack: str) -> list[str]:
    """``cluster.acknowledgeReplacements`` of ``project``'s stack (none without a stack file there)."""
    path = project / f"Pulumi.{stack}.yaml"
    if not path.is_file():
        return []
    return list(stack_settings(path, stack).cluster.acknowledge_replacements)


_ORDER = {"replace": 0, "delete": 1, "rejected": 2, "update": 3, "create": 4}


def markdown(diffs: list[StackDiff], base: str, head: str) -> str:
    """The pull-request comment."""
    lines = [f"# Storage-aware diff: `{base}` -> `{head}`", ""]
    for d in diffs:
        counts = {a: sum(c.action == a for c in d.changes) for a in _ORDER}
        lines += [f"## {d.stack}", "", ", ".join(f"{n} {a}" for a, n in counts.items() if n) or "no change", ""]
        if d.blocking:
            lines.append(
                "**Blocking** (exit 1): replaced or deleted while protected or holding data, or a change that moves "
                "data, stops its I/O or can lose acknowledged writes; acknowledge each in "
                f"`cluster.acknowledgeReplacements` of Pulumi.{d.stack}.yaml once the data is safe:"
            )
            lines += [f"- `{c.id}`" for c in d.blocking]
            lines.append("")
        if d.stale:
            lines.append(
                f"**Refused** (exit 1): acknowledged in Pulumi.{d.stack}.yaml, but nothing here needs it (left in "
                "place it would pass a later change of the same thing unseen); remove each:"
            )
            lines += [f"- `{a}`" for a in d.stale] + [""]
        lines += [f"- {n}" for n in d.notes]
        if d.notes:
            lines.append("")
        for c in sorted(d.changes, key=lambda c: (_ORDER[c.action], c.id)):
            if c.action == "create":
                continue
            flag = " (acknowledged)" if c.acknowledged else ""
            listed = c.values if len(c.values) == len(c.fields) else [f"`{f}`" for f in c.fields]
            shown = ", ".join(listed[:8]) + (f" and {len(listed) - 8} more" if len(listed) > 8 else "")
            lines.append(f"- **{c.action}** `{c.id}`{flag}" + (f": {shown}" if shown else ""))
            reasons = [re.sub(r"(https://[^\s)]+)", r"[source](\1)", r) for r in c.reasons]
            lines += [f"  - why: {r}" for r in reasons] + [f"  - data: {n}" for n in c.notes]
        created = sorted(c.id for c in d.changes if c.action == "create")
        if created:
            lines += ["", f"<details><summary>{len(created)} created</summary>", ""]
            lines += [f"- `{i}`" for i in created] + ["", "</details>"]
        lines.append("")
    return "\n".join(lines)


def as_json(diffs: list[StackDiff]) -> str:
    """The diff for tools."""
    stacks = [
        {
            "stack": d.stack,
            "blocking": [c.id for c in d.blocking],
            "staleAcknowledgements": d.stale,
            "notes": d.notes,
            "changes": [{**asdict(c), "blocking": c.blocking} for c in d.changes],
        }
        for d in diffs
    ]
    return json.dumps({"stacks": stacks, "exitCode": exit_code(diffs)}, indent=2)


def exit_code(diffs: list[StackDiff]) -> int:
    """1 when any stack has a blocking change nobody acknowledged, or an acknowledgement nothing needs; else 0."""
    return 1 if any(d.blocking or d.stale for d in diffs) else 0


def compare(base: str, head: str, project: Path, stacks: list[str] | None = None) -> list[StackDiff]:
    """Diff every stack both sides render; acknowledgements come from ``project``'s stack files."""
    with tempfile.TemporaryDirectory(prefix="diff-") as tmp:
        old = folders(base, project, Path(tmp) / "base", stacks)
        new = folders(head, project, Path(tmp) / "head", stacks)
        names = sorted(set(old) & set(new))
        if not names:
            raise RenderError(f"no stack rendered on both sides (base: {sorted(old)}, head: {sorted(new)})")
        return [diff_stack(s, load_render(old[s]), load_render(new[s]), acknowledgements(project, s)) for s in names]
