"""Where the two sides of a diff come from: a render folder (one stack's, or a folder of them) or a git ref,
rendered on the fly in a temporary worktree with that ref's own program."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path


def stack_folders(folder: Path) -> dict[str, Path]:
    """The stacks of a render folder: itself when it holds plan.json, else its sub-folders that do."""
    if (folder / "plan.json").is_file():
        return {json.loads((folder / "plan.json").read_text())["stack"]: folder}
    return {p.name: p for p in sorted(folder.iterdir()) if (p / "plan.json").is_file()}


def render_ref(repo: Path, ref: str, out: Path, stacks: list[str] | None = None) -> dict[str, Path]:
    """Render every stack (or ``stacks``) of git ``ref`` with that ref's own program, in a temporary worktree,
    with this interpreter (a warning names the ref's pins this checkout's requirements.txt does not have)."""
    commit = _git(repo, "rev-parse", "--verify", f"{ref}^{{commit}}").strip()
    with tempfile.TemporaryDirectory(prefix="render-") as tmp:
        tree = Path(tmp) / "tree"
        _git(repo, "worktree", "add", "--detach", str(tree), commit)
        try:
            other = _pins(tree / "requirements.txt") - _pins(repo / "requirements.txt")
            if other:
                print(f"warning: {ref} pins {', '.join(sorted(other))}, not installed here", file=sys.stderr)
            names = sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in tree.glob("Pulumi.*.yaml"))
            _require(stacks, names, f"git ref {ref}")
            names = stacks or names
            out.mkdir(parents=True, exist_ok=True)  # render --out wants an existing parent folder
            for stack in names:
                cmd = [sys.executable, "-m", "components", "render", "--stack", stack, "--out", str(out / stack)]
                proc = subprocess.run(cmd, cwd=tree, capture_output=True, text=True, check=False)
                if proc.returncode != 0:
                    raise RenderError(f"rendering {stack} at {ref} failed:\n{proc.stderr.strip()}")
        finally:
            _git(repo, "worktree", "remove", "--force", str(tree))
    return {s: out / s for s in names}


def _require(stacks: list[str] | None, present: list[str], where: str) -> None:
    """Refuse a requested stack that ``where`` does not have, naming it and what is there."""
    missing = sorted(set(stacks or ()) - set(present))
    if missing:
        has = ", ".join(sorted(present)) or "none"
        raise RenderError(f"no stack {', '.join(missing)} in {where}; stacks there: {has}")


def _pins(path: Path) -> set[str]:
    lines = path.read_text().splitlines() if path.is_file() else []
    return {line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")}


class RenderError(Exception):
    """A git ref could not be rendered (its stack settings, or its program, failed)."""


def _git(repo: Path, *args: str) -> str:
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RenderError(f"git {' '.join(args)}: {proc.stderr.strip()}")
    return proc.stdout


def folders(spec: str, repo: Path, out: Path, stacks: list[str] | None) -> dict[str, Path]:
    """A render folder as given, or a git ref rendered into ``out``; a requested stack this side lacks is an error
    naming it, the side and the stacks the side has."""
    path = Path(spec)
    found = stack_folders(path) if path.is_dir() else render_ref(repo, spec, out, stacks)
    if path.is_dir():
        _require(stacks, list(found), f"render folder {path}")
    return {s: p for s, p in found.items() if not stacks or s in stacks}
