"""The command line's argument types: each checks one argument before anything runs and refuses a bad one with a
line naming the argument, what was expected and what was given (exit status 2, no traceback). Outputs are
written whole or not at all."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn

import yaml


class Parser(argparse.ArgumentParser):
    """An argument parser whose refusal is one line on stderr (``prog: error: ...``), exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def _what(path: Path) -> str:
    if path.is_dir():
        return "a directory"
    return "a file" if path.exists() else "nothing there"


def _bad(expected: str, text: str, found: str | None = None) -> argparse.ArgumentTypeError:
    return argparse.ArgumentTypeError(f"expected {expected}; got '{text}'{f' ({found})' if found else ''}")


def existing_dir(text: str) -> Path:
    """An existing directory."""
    path = Path(text)
    if not path.is_dir():
        raise _bad("an existing directory", text, _what(path))
    return path


def project_dir(text: str) -> Path:
    """A Pulumi project: a directory with Pulumi.yaml and __main__.py."""
    path = existing_dir(text)
    missing = [name for name in ("Pulumi.yaml", "__main__.py") if not (path / name).is_file()]
    if missing:
        raise _bad("a Pulumi project directory (with Pulumi.yaml and __main__.py)", text, f"no {missing[0]}")
    return path


def _document(text: str, load: Callable[[str], Any], kind: str, pipes: bool = False) -> Any:
    """The mapping a file holds; with ``pipes``, also what a pipe gives (``<(...)``, a FIFO, ``-``: standard input),
    read once."""
    path = Path(text)
    readable = path.is_file() or (pipes and (text == "-" or (path.exists() and not path.is_dir())))
    if not readable:
        raise _bad(f"a {kind} file{' or pipe' if pipes else ''}", text, _what(path))
    try:
        data = load(sys.stdin.read() if text == "-" else path.read_text())
    except OSError as error:
        raise _bad(f"a readable {kind} file", text, error.strerror or str(error)) from None
    except (ValueError, yaml.YAMLError, UnicodeDecodeError):
        raise _bad(f"a {kind} file", text, f"not {kind}") from None
    if not isinstance(data, dict):
        raise _bad(f"a {kind} file holding a mapping", text, f"a {type(data).__name__}")
    return data


def stack_file(text: str) -> Path:
    """A Pulumi stack file: YAML holding a mapping."""
    _document(text, yaml.safe_load, "YAML")
    return Path(text)


def stack_outputs(text: str) -> dict[str, Any]:
    """A JSON object of stack outputs (``pulumi stack output --json``), from a file, a pipe (``<(pulumi stack output
    --json)``) or standard input (``-``)."""
    data: dict[str, Any] = _document(text, json.loads, "JSON", pipes=True)
    return data


def output_dir(text: str) -> Path:
    """A directory to write into: an existing one, or a new one in an existing directory."""
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise _bad("a directory to write the render into", text, "a file")
    if not path.parent.is_dir():
        raise _bad("a directory in an existing directory", text, f"{path.parent} does not exist")
    return path


def output_file(text: str) -> Path:
    """A file to write: not a directory, in an existing directory."""
    path = Path(text)
    if path.is_dir():
        raise _bad("a file to write", text, "a directory")
    if not path.parent.is_dir():
        raise _bad("a file in an existing directory", text, f"{path.parent} does not exist")
    return path


def is_render(folder: Path) -> bool:
    """Whether ``folder`` holds a render: a plan.json with its stack and list of resources (and an outputs.json
    holding an object, when there is one)."""
    try:
        plan = json.loads((folder / "plan.json").read_text())
        outputs = json.loads((folder / "outputs.json").read_text()) if (folder / "outputs.json").exists() else {}
    except (OSError, ValueError):
        return False
    is_plan = isinstance(plan, dict) and isinstance(plan.get("stack"), str) and isinstance(plan.get("resources"), list)
    return is_plan and isinstance(outputs, dict)


def render_or_ref(text: str, project: Path) -> str:
    """A render folder (one stack's, or a folder of them) or a git ref of ``project``."""
    path = Path(text)
    expected = "a render folder (plan.json, or folders of them) or a git ref"
    if path.exists():
        if not path.is_dir():
            raise _bad(expected, text, "a file")
        plans = [path] if (path / "plan.json").exists() else [p for p in path.iterdir() if (p / "plan.json").exists()]
        if not plans:
            raise _bad(expected, text, "a directory with no render of `python -m components render`")
        broken = [p for p in plans if not is_render(p)]
        if broken:
            raise _bad(expected, text, f"{broken[0] / 'plan.json'} is no plan of `python -m components render`")
        return text
    verify = ["git", "-C", str(project), "rev-parse", "--verify", "--quiet", f"{text}^{{commit}}"]
    if subprocess.run(verify, capture_output=True, text=True, check=False).returncode != 0:
        raise _bad(expected, text, f"no such folder, nor a commit of {project}")
    return text


@contextlib.contextmanager
def replaced(target: Path) -> Iterator[Path]:
    """A temporary sibling of ``target`` to write into; on success it replaces ``target`` (a directory or a file),
    on failure it is removed and ``target`` stays as it was."""
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        new = work / target.name
        yield new
        old = work / "old"
        if target.exists():
            os.rename(target, old)
        os.rename(new, target)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def fail(parser: argparse.ArgumentParser, argument: str, message: str) -> NoReturn:
    """Refuse ``argument`` after parsing (when it depends on another): one line, exit status 2."""
    parser.error(f"argument {argument}: {message}")
