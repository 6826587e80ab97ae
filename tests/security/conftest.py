"""Fixtures of the security gate: every stack rendered by the command line, and the checkov binary."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from components.toolchain.render import ROOT

CHECKOV = ROOT / ".venv-checkov" / "bin" / "checkov"


@dataclass(frozen=True)
class CliRender:
    """One ``python -m components render`` run: its output folder and what it printed."""

    out: Path
    stdout: str


def cli_render(stack: str, out: Path) -> CliRender:
    """Render ``stack`` into ``out`` in a fresh interpreter, exactly as a user would."""
    done = subprocess.run(
        [sys.executable, "-m", "components", "render", "--stack", stack, "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return CliRender(out, done.stdout.replace(str(out), "<out>"))


@pytest.fixture(scope="session")
def renders(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], CliRender]:
    """``renders("dev")``: the stack rendered once per session by the command line."""
    done: dict[str, CliRender] = {}

    def get(stack: str) -> CliRender:
        if stack not in done:
            done[stack] = cli_render(stack, tmp_path_factory.mktemp(f"render-{stack}"))
        return done[stack]

    return get


@pytest.fixture(scope="session")
def checkov() -> Path:
    """The checkov binary in ``.venv-checkov``; missing, the test skips (fails with AI_STORAGE_REQUIRE_GATES=1)."""
    if not CHECKOV.is_file():
        why = f"{CHECKOV} is missing: run bash scripts/test to create it"
        if os.environ.get("AI_STORAGE_REQUIRE_GATES") == "1":
            pytest.fail(why)
        pytest.skip(why)
    return CHECKOV
