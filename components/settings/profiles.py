"""Environment profiles: the settings a stack starts from. The shipped ones are ``stacks/<name>.yaml``; an
organisation keeps its own in its project as a YAML file (``profile: profiles/gpu-prod.yaml``), which may start
from a shipped one (``extends: prod``) and change only what differs, without forking this package."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from ..common.sections import Problem, SettingsError, merge

# The profiles sit in the package when installed (ai_storage_platform/stacks), at the top of a checkout.
_PACKAGE = Path(__file__).resolve().parents[1]
STACKS_DIR = _PACKAGE / "stacks" if (_PACKAGE / "stacks").is_dir() else _PACKAGE.parent / "stacks"
EXTENDS = "extends"
"""The key of a profile file naming the shipped profile it starts from."""


def profiles() -> list[str]:
    """The environment profiles shipped in ``stacks/``."""
    return sorted(p.stem for p in STACKS_DIR.glob("*.yaml"))


def load_profile(name: str) -> dict[str, Any]:
    """The settings a profile starts from: a shipped one, or the file at ``name`` (a path ending in ``.yaml``,
    from the project directory) over the shipped profile it ``extends``; an unknown one is a settings error."""
    own = name.endswith((".yaml", ".yml"))
    path = Path(name) if own else STACKS_DIR / f"{name}.yaml"
    if not path.is_file():
        expected = f"expected one of {', '.join(profiles())}, or the path of a profile file of your own (*.yaml)"
        hint = "profiles are the files in stacks/; a path is read from the project directory"
        raise SettingsError([Problem("profile", expected, name, hint)])
    if not isinstance(data := yaml.safe_load(path.read_text()) or {}, dict):
        raise SettingsError([Problem("profile", "expected a mapping of settings", type(data).__name__, f"fix {path}")])
    base = data.pop(EXTENDS, None) if own else None
    if base is None:
        return data
    if base not in profiles():
        expected = f"expected `{EXTENDS}` to name a shipped profile ({', '.join(profiles())})"
        raise SettingsError([Problem("profile", expected, base, f"fix {path}, or leave `{EXTENDS}` out")])
    return merge(load_profile(base), data)
