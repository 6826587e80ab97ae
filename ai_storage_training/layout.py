"""The checkpoint layout: the one definition the checkpoint manager, the offsite copy and the restore runbook use.

Under a checkpoint directory::

    .step-00000020.tmp-<token>/   a save in flight (hidden: never read, never copied offsite)
    .step-00000020.lock           the step's lock file while a process saves, reads or deletes it
    step-00000010/                a promoted checkpoint: the job's files, then ``COMPLETE`` written last

A checkpoint counts only when its ``COMPLETE`` marker is there. Standard library only: the platform's
components import this module.
"""

from __future__ import annotations

import re

MARKER = "COMPLETE"
"""The file written last inside a checkpoint directory; a directory without it is in flight or torn."""
STEP_PREFIX = "step-"
STEP_DIGITS = 8
STEP_GLOB = f"{STEP_PREFIX}*"
"""Shell glob of promoted checkpoint directories (hidden staging and lock files never match it)."""

_STEP = re.compile(rf"^{STEP_PREFIX}(\d{{{STEP_DIGITS},}})$")
_STAGING = re.compile(rf"^\.{STEP_PREFIX}(\d{{{STEP_DIGITS},}})\.tmp-[0-9a-z]+$")
_LOCK = re.compile(rf"^\.{STEP_PREFIX}(\d{{{STEP_DIGITS},}})\.lock$")


def step_dir(step: int) -> str:
    """``step-00000020`` for step 20."""
    return f"{STEP_PREFIX}{step:0{STEP_DIGITS}d}"


def staging_dir(step: int, token: str) -> str:
    """The hidden directory a save of ``step`` writes into before it is promoted."""
    return f".{step_dir(step)}.tmp-{token}"


def lock_file(step: int) -> str:
    """The hidden lock file of ``step``."""
    return f".{step_dir(step)}.lock"


def parse_step(name: str) -> int | None:
    """The step of a promoted checkpoint directory's name, else None."""
    m = _STEP.match(name)
    return int(m.group(1)) if m else None


def parse_staging(name: str) -> int | None:
    """The step of a staging directory's name, else None."""
    m = _STAGING.match(name)
    return int(m.group(1)) if m else None


def parse_lock(name: str) -> int | None:
    """The step of a lock file's name, else None."""
    m = _LOCK.match(name)
    return int(m.group(1)) if m else None
