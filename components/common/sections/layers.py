"""How settings layers combine: code defaults < ``stacks/<profile>.yaml`` < ``Pulumi.<stack>.yaml`` (and a team
workspace's quota on top of the teams' default), each a mapping merged into the one below it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Deep-merge two settings mappings: mappings merge key by key, anything else is replaced."""
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out
