"""The checkpoint directory's state: what is committed, and its upkeep (refusal, rollback, retention, cleaning).

:class:`CheckpointStore` is the base of :class:`~ai_storage_training.checkpoint.manager.CheckpointManager`: it holds the
settings, lists committed steps and keeps the directory tidy under each step's ``flock`` lock (see ``commit``).
Refused steps go to ``.refused/`` (kept), steps a rollback abandons to ``.retired/`` (the newest ``keep`` kept).
"""

from __future__ import annotations

import logging
import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path

from .. import metrics
from . import layout
from .commit import (
    VERIFY_MODES,
    Marker,
    fsync_dir,
    is_complete,
    move_aside,
    problems,
    read_marker,
)
from .locks import lock as _lock
from .locks import lock_waiting
from .locks import unlock as _unlock

log = logging.getLogger("ai_storage_training.checkpoint.manager")
RUN_ID_VARIABLE = "AI_STORAGE_RUN_ID"


@dataclass(frozen=True)
class Checkpoint:
    """A committed checkpoint: its step and its directory."""

    step: int
    path: Path


def _check_int(name: str, value: object, minimum: int, hint: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name}: expected {hint}; got {value!r}")


class CheckpointStore:
    """Checkpoints of one training run in ``directory``, keeping the newest ``keep`` (``None`` keeps all).

    ``rank``/``world_size``: this process's place in a multi-rank job (rank 0 coordinates: commits, cleans,
    retains, rolls back). ``run_id``: shared by every rank of one attempt and new for each attempt (a restarted
    job gets another one, e.g. ``<job>-<restart count>``; default ``$AI_STORAGE_RUN_ID``; a random one for a single
    process; torch.distributed jobs get rank 0's). ``verify``: ``"crc32c"`` (read every byte on restore) or ``"size"``.
    ``timeout``: seconds a rank waits for the others (manifests, commit, resume decision)."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        keep: int | None = 3,
        *,
        rank: int = 0,
        world_size: int = 1,
        run_id: str | None = None,
        verify: str = "crc32c",
        timeout: float = 600.0,
    ):
        if keep is not None:
            _check_int("keep", keep, 1, "a positive number of checkpoints, or None to keep all")
        _check_int("world_size", world_size, 1, "a positive number of ranks")
        _check_int("rank", rank, 0, f"a rank from 0 to world_size - 1 ({world_size - 1})")
        if rank >= world_size:
            raise ValueError(f"rank: expected a rank from 0 to world_size - 1 ({world_size - 1}); got {rank!r}")
        if verify not in VERIFY_MODES:
            raise ValueError(f"verify: expected one of {', '.join(VERIFY_MODES)}; got {verify!r}")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
            raise ValueError(f"timeout: expected a positive number of seconds; got {timeout!r}")
        run_id = run_id or os.environ.get(RUN_ID_VARIABLE)
        self.shared_run_id = run_id is not None
        """True when every rank was given the run id (else ``dcp`` shares rank 0's through torch.distributed)."""
        run_id = run_id or (uuid.uuid4().hex if world_size == 1 else None)
        if run_id is not None and not layout.RUN_ID.match(run_id):
            raise ValueError(f"run_id: expected 1-64 letters, digits, '-' or '_'; got {run_id!r}")
        self.directory = Path(directory)
        self.keep, self.rank, self.world_size, self.verify, self.timeout = keep, rank, world_size, verify, timeout
        self._run_id = run_id
        self._trusted: set[tuple[int, str]] = set()  # (step, run id) committed or validated by this process
        self.node_ranks: range | None = None
        """The ranks saving into this directory when it is one node's landing directory of a job over several
        (``promotion.managers_from_environment``): its first rank commits their files; None: every rank."""

    @property
    def run_id(self) -> str:
        if self._run_id is None:
            raise ValueError(
                f"run_id: expected an id shared by every rank of this attempt (world_size {self.world_size}); "
                f"pass run_id= or set ${RUN_ID_VARIABLE} (torch.distributed jobs get one through dcp.ManagedWriter)"
            )
        return self._run_id

    @run_id.setter
    def run_id(self, value: str) -> None:
        if not layout.RUN_ID.match(value):
            raise ValueError(f"run_id: expected 1-64 letters, digits, '-' or '_'; got {value!r}")
        self._run_id = value

    @property
    def is_coordinator(self) -> bool:
        return self.rank == 0

    def _lock_path(self, step: int) -> Path:
        return self.directory / layout.lock_file(step)

    def final_path(self, step: int) -> Path:
        return self.directory / layout.step_dir(step)

    def staging_path(self, step: int) -> Path:
        """This attempt's staging directory of ``step`` (shared by its ranks)."""
        return self.directory / layout.staging_dir(step, self.run_id)

    def _committed(self) -> list[tuple[Checkpoint, Marker]]:
        """Every step directory carrying a readable marker, oldest first (its files not checked)."""
        try:
            entries = list(os.scandir(self.directory))
        except FileNotFoundError:
            return []
        found = []
        for entry in entries:
            step = layout.parse_step(entry.name)
            if step is not None and entry.is_dir() and (marker := read_marker(Path(entry.path))) is not None:
                found.append((Checkpoint(step, Path(entry.path)), marker))
        return sorted(found, key=lambda pair: pair[0].step)

    def checkpoints(self) -> list[Checkpoint]:
        """The committed checkpoints whose files all have their sizes, oldest first (no checksum read)."""
        return [c for c, marker in self._committed() if not problems(c.path, marker, verify="size")]

    def latest(self) -> Checkpoint | None:
        """The newest of :meth:`checkpoints`, or None."""
        found = self.checkpoints()
        return found[-1] if found else None

    def _check_new(self, step: int, *, held: bool) -> None:
        """FileExistsError when ``step`` is committed. With the step's lock ``held`` exclusively: a torn one (no
        marker) goes; one failing its sizes or with an unreadable marker is refused (kept aside)."""
        final = self.final_path(step)
        marker = read_marker(final)
        if marker is not None:
            found = problems(final, marker, verify="size")
            if not found:
                raise FileExistsError(f"checkpoint {final} already exists (after a rollback: manager.rollback_to)")
            if held:
                self._set_aside(final, found)
        elif held and (final / layout.MARKER).exists():
            self._set_aside(final, [f"its {layout.MARKER} marker is unreadable"])
        elif held and final.exists():
            shutil.rmtree(final)

    def _refuse(self, checkpoint: Checkpoint, found: list[str]) -> None:
        """Log why, count it, and move the step to ``.refused/`` under its lock (if nobody else holds it)."""
        fd = _lock(self._lock_path(checkpoint.step), shared=False)
        if fd is None:
            self._set_aside(checkpoint.path, found, held=False)
            return
        try:
            self._set_aside(checkpoint.path, found)
        finally:
            _unlock(self._lock_path(checkpoint.step), fd)

    def _set_aside(self, path: Path, found: list[str], *, held: bool = True) -> None:
        """With the step's lock ``held``: move ``path`` to ``.refused/``; log why and count it either way."""
        metrics.VALIDATION_FAILURES.inc()
        where = "left in place: another process holds its lock"
        if held and path.exists():
            where = f"moved to {move_aside(path, self.directory / layout.REFUSED)}"
        log.warning("refused checkpoint %s: %s; %s", path, "; ".join(found), where)

    def rollback_to(self, step: int) -> list[int]:
        """Retire (move to ``.retired/``, under each step's lock) every step after ``step``, newest first, so the
        job can save them again; return the retired steps. Only the coordinator acts; other ranks return []."""
        if not self.is_coordinator:
            return []
        retired = []
        for later in sorted(
            {s for name in _names(self.directory) if (s := layout.parse_step(name)) is not None}, reverse=True
        ):
            if later <= step:
                break
            fd = lock_waiting(self._lock_path(later), shared=False, timeout=self.timeout, what=f"step {later}")
            try:
                if self.final_path(later).exists():
                    move_aside(self.final_path(later), self.directory / layout.RETIRED)
                    retired.append(later)
            finally:
                _unlock(self._lock_path(later), fd)
        if retired:
            log.info("rolled back to step %d in %s: retired steps %s", step, self.directory, retired)
        return retired

    def retain(self) -> list[Checkpoint]:
        """Delete committed checkpoints beyond the newest ``keep``, except those being read (a later call deletes
        them) and the newest one that validates; trim ``.retired/`` to ``keep``; return the deleted ones."""
        if self.keep is None:
            return []
        anchor = self._newest_valid()
        deleted = [c for c in self.checkpoints()[: -self.keep] if c != anchor and self._delete(c)]
        _trim(self.directory / layout.RETIRED, self.keep)
        return deleted

    def _newest_valid(self) -> Checkpoint | None:
        """The newest committed checkpoint that validates (one this process committed or validated counts without
        a read; one locked by another process counts: its reader validated it); those failing are refused."""
        for checkpoint, marker in reversed(self._committed()):
            if (checkpoint.step, marker.run_id) in self._trusted:
                return checkpoint
            fd = _lock(self._lock_path(checkpoint.step), shared=True)
            if fd is None:
                return checkpoint
            try:
                found = problems(checkpoint.path, marker, verify=self.verify)
            finally:
                _unlock(self._lock_path(checkpoint.step), fd)
            if not found:
                self._trusted.add((checkpoint.step, marker.run_id))
                return checkpoint
            self._refuse(checkpoint, found)
        return None

    def _delete(self, checkpoint: Checkpoint) -> bool:
        fd = _lock(self._lock_path(checkpoint.step), shared=False)
        if fd is None:
            return False
        try:
            if not is_complete(checkpoint.path):  # another process deleted it since the listing
                return False
            (checkpoint.path / layout.MARKER).unlink()  # from here on it is no checkpoint for anyone
            fsync_dir(checkpoint.path)
            shutil.rmtree(checkpoint.path)
            return True
        finally:
            _unlock(self._lock_path(checkpoint.step), fd)

    def discard(self, step: int) -> bool:
        """Remove this run's staging directory of ``step`` after its save failed (coordinator only; every rank is
        done with it once the failure is reported), under the step's lock, so it holds no space and nothing of it
        is taken for a save in flight; False when a live process holds the step or there is nothing to remove."""
        staging = self.staging_path(step)
        if not self.is_coordinator or not staging.exists():
            return False
        fd = _lock(self._lock_path(step), shared=False)
        if fd is None:
            return False
        try:
            shutil.rmtree(staging, ignore_errors=True)
        finally:
            _unlock(self._lock_path(step), fd, remove=True)
        return not staging.exists()

    def clean(self, *, saving: int | None = None) -> list[Path]:
        """Remove what crashed writers left (staging directories of other runs, ``step-*`` directories without a
        marker, resume decisions of other runs, lock files nobody holds) for every step no live process holds;
        return the removed directories. Staging directories of this manager's own run are its saves in flight.
        The lock file of ``saving`` (the step the coordinator is about to save) stays: other ranks may be opening
        it, and the step's commit removes it (see :func:`~ai_storage_training.checkpoint.locks.unlock`)."""
        leftovers: dict[int, list[Path]] = {}
        for name in _names(self.directory):
            path = self.directory / name
            staging, promoted, lock = layout.parse_staging(name), layout.parse_step(name), layout.parse_lock(name)
            if staging is not None and layout.staging_run(name) != self._run_id:
                leftovers.setdefault(staging, []).append(path)
            elif promoted is not None and path.is_dir() and read_marker(path) is None:
                leftovers.setdefault(promoted, []).append(path)
            elif lock is not None:
                leftovers.setdefault(lock, [])
            elif (run := layout.parse_resume(name)) is not None and run != self._run_id:
                path.unlink(missing_ok=True)
        removed = []
        for step, paths in sorted(leftovers.items()):
            fd = _lock(self._lock_path(step), shared=False)
            if fd is None:
                continue  # a live writer or reader
            try:
                for path in paths:
                    staging = layout.parse_staging(path.name) is not None
                    if not path.exists() or (not staging and read_marker(path) is not None):
                        continue  # gone, or committed meanwhile
                    if not staging and (path / layout.MARKER).exists():
                        self._set_aside(path, [f"its {layout.MARKER} marker is unreadable"])  # evidence: kept
                    else:
                        shutil.rmtree(path)
                        removed.append(path)
            finally:
                _unlock(self._lock_path(step), fd, remove=step != saving)
        return removed


def _names(directory: Path) -> list[str]:
    try:
        return os.listdir(directory)
    except FileNotFoundError:
        return []


def _trim(directory: Path, keep: int) -> None:
    """Delete all but the newest ``keep`` entries of a hidden holding directory (names sort by step, then time)."""
    for name in sorted(_names(directory))[:-keep]:
        shutil.rmtree(directory / name, ignore_errors=True)
