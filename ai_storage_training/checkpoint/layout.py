"""The checkpoint layout: the one definition the checkpoint manager, the offsite copy and the restore runbook use.

Under a checkpoint directory::

    .step-00000020.tmp-<run id>/  a save in flight (hidden: never read, never copied offsite); every rank of
                                  one attempt (one run id) writes its files into it, then its manifest
                                  ``.rank-00001.json`` (a multi-rank ``save()`` writes into ``rank-00001/``)
    .step-00000020.lock           the step's lock file while a process saves, reads or deletes it
    .resume-<run id>.json         the step the coordinator chose to resume from (file-based protocol)
    .job.lock                     the claim of the job writing here (``claim.py``): its host, pid, run id
    .refused/step-00000030.<time> a checkpoint a restore refused (failed validation), kept for inspection
    .retired/step-00000040.<time> a checkpoint a rollback abandoned (the newest ``keep`` are kept)
    step-00000010/                a promoted checkpoint: the job's files, then ``COMPLETE`` written last
      __0.items.json              (DCP) the size and CRC32C of each item rank 0 wrote, by file and offset: a
                                  restore verifies each item as it reads it, so every byte is read once

A checkpoint counts only when its ``COMPLETE`` marker is there. Standard library only: the platform's
components import this module.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

MARKER = "COMPLETE"
"""The file written last inside a checkpoint directory; a directory without it is in flight or torn."""
REFUSED = ".refused"
"""Hidden directory of refused checkpoints (kept for inspection, never deleted by the library)."""
RETIRED = ".retired"
"""Hidden directory of checkpoints abandoned by a rollback."""
RUN_ID = re.compile(r"^[0-9A-Za-z_-]{1,64}$")
"""What a run id (the token of a staging directory) may be."""
STEP_PREFIX = "step-"
STEP_DIGITS = 8
STEP_GLOB = f"{STEP_PREFIX}*"
"""Shell glob of promoted checkpoint directories (hidden staging and lock files never match it)."""

JOB_LOCK = ".job.lock"
"""The file whose ``flock`` is the writing job's claim on the directory."""
ITEMS_SUFFIX = ".items.json"
"""Files (``__<rank>.items.json``) listing the size and CRC32C of each byte range (item) of other files."""

_STEP = re.compile(rf"^{STEP_PREFIX}(\d{{{STEP_DIGITS},}})$")
_STAGING = re.compile(rf"^\.{STEP_PREFIX}(\d{{{STEP_DIGITS},}})\.tmp-([0-9A-Za-z_-]+)$")
_RESUME = re.compile(r"^\.resume-([0-9A-Za-z_-]+)\.json$")
_LOCK = re.compile(rf"^\.{STEP_PREFIX}(\d{{{STEP_DIGITS},}})\.lock$")


def step_dir(step: int) -> str:
    """``step-00000020`` for step 20."""
    return f"{STEP_PREFIX}{step:0{STEP_DIGITS}d}"


def staging_dir(step: int, token: str) -> str:
    """The hidden directory a save of ``step`` writes into before it is promoted."""
    return f".{step_dir(step)}.tmp-{token}"


def rank_dir(rank: int) -> str:
    """The directory a rank's files go in when several ranks ``save()`` one step: ``rank-00001``."""
    return f"rank-{rank:05d}"


def rank_manifest(rank: int) -> str:
    """The hidden manifest a rank writes (fsynced) into the staging directory once its files are durable."""
    return f".rank-{rank:05d}.json"


def item_checksums(rank: int) -> str:
    """The file listing the CRC32C of each item ``rank`` wrote (DCP)."""
    return f"__{rank}{ITEMS_SUFFIX}"


def resume_file(run_id: str) -> str:
    """The hidden file naming the step the coordinator of ``run_id`` chose to resume from."""
    return f".resume-{run_id}.json"


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


def staging_run(name: str) -> str | None:
    """The run id (token) of a staging directory's name, else None."""
    m = _STAGING.match(name)
    return m.group(2) if m else None


def parse_lock(name: str) -> int | None:
    """The step of a lock file's name, else None."""
    m = _LOCK.match(name)
    return int(m.group(1)) if m else None


def parse_resume(name: str) -> str | None:
    """The run id of a resume decision file's name, else None."""
    m = _RESUME.match(name)
    return m.group(1) if m else None


def file_name(name: object, key: str) -> str:
    """``name`` if it is a relative, visible file name inside a checkpoint other than the marker; else ValueError
    naming ``key`` (the argument that gave it)."""
    path = PurePosixPath(name) if isinstance(name, str) else None
    if path is None or not path.parts or path.is_absolute() or any(p.startswith(".") for p in path.parts):
        raise ValueError(
            f"{key}: expected relative file names without '..' or hidden parts, e.g. 'model.bin'; got {name!r}"
        )
    assert isinstance(name, str)
    if name == MARKER:
        raise ValueError(f"{key}: the name {MARKER!r} is the checkpoint's marker; choose another file name")
    return name
