"""Local landing and promotion: checkpoints land in a fast local directory and are promoted to the durable one.

With ``AI_STORAGE_CHECKPOINT_LOCAL_DIR`` set (a node-local volume on the hot tier), a job saves into it and a
:class:`Promoter` copies each committed local step, oldest first, to ``AI_STORAGE_CHECKPOINT_DIR`` in the
background: the durable manager's ``save_copy`` checks every file's CRC32C against the local marker while copying,
fsyncs and commits atomically (marker last); the promoter then validates the durable copy by reading it back, and
only then counts the step durable (the lag gauges) and may delete local copies.

Retention: the local side deletes a step only when it is at or below the newest durable step this promoter
validated (so never one not yet promoted) and keeps the newest ``local_keep`` anyway, for a fast restore; the
durable side is the manager's retention, which never deletes the newest checkpoint that validates. A durable copy
that fails its read-back is moved to ``.refused/`` there (by a fresh manager's validated load), so it is never
taken for a promoted step. Restore prefers the newest local step that validates when it is at least as new as the
newest durable one (:func:`restore_manager`). The local directory is shared by the ranks of one node; a job over
several nodes lands each node's share in that node's directory and restores from the durable one
(``node_promotion.py``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

from .. import metrics
from . import claim
from .commit import CheckpointInvalidError
from .lag import LAG, CheckpointLag
from .manager import CheckpointManager
from .node_promotion import promote_share

log = logging.getLogger(__name__)
DIR_VARIABLE = "AI_STORAGE_CHECKPOINT_DIR"
LOCAL_DIR_VARIABLE = "AI_STORAGE_CHECKPOINT_LOCAL_DIR"


class Promoter:
    """Promotes committed steps of ``local`` to ``durable``; :meth:`start` runs it in a background thread, woken
    by :meth:`wake` (after each landed save) or every ``interval`` seconds."""

    def __init__(
        self,
        local: CheckpointManager,
        durable: CheckpointManager,
        *,
        local_keep: int = 1,
        interval: float = 10.0,
        lag: CheckpointLag = LAG,
        node: tuple[int, int] | None = None,
    ):
        if isinstance(local_keep, bool) or not isinstance(local_keep, int) or local_keep < 0:
            raise ValueError(f"local_keep: expected a non-negative number of local checkpoints; got {local_keep!r}")
        if Path(local.directory).resolve() == Path(durable.directory).resolve():
            raise ValueError(
                f"{LOCAL_DIR_VARIABLE}: expected a directory other than {DIR_VARIABLE} ({durable.directory})"
            )
        if local.keep is not None:
            raise ValueError(
                "local: expected a manager with keep=None (the promoter decides what leaves the local side)"
            )
        self.local, self.durable, self.local_keep, self.interval, self.lag = local, durable, local_keep, interval, lag
        self.node = node
        """(this node, nodes) of a job over several nodes: each promotes its own share (:mod:`.node_promotion`)."""
        # One process's view of the landing directory: leases without re-reading (save_copy checks every CRC32C
        # while copying) and without the job's multi-rank resume protocol.
        self._view = CheckpointManager(local.directory, keep=None, verify="size")
        self._verified: int | None = None  # the newest durable step this promoter read back and found valid
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._claimed = False

    def promote(self) -> list[int]:
        """One pass: promote every committed local step newer than the newest durable one, oldest first (stop at
        the first failure: the next pass retries it), then apply local retention; return the promoted steps."""
        newest = self._newest_durable()
        promoted = []
        for checkpoint in self._view.checkpoints():
            if newest is not None and checkpoint.step <= newest:
                continue
            started = time.monotonic()
            try:
                self._promote_one(checkpoint.step)
            except Exception as error:  # counted, logged, retried on the next pass
                metrics.PROMOTION_FAILURES.inc()
                log.error(
                    "promotion of checkpoint step %d to %s failed: %s", checkpoint.step, self.durable.directory, error
                )
                break
            metrics.PROMOTION_SECONDS.observe(time.monotonic() - started)
            self.lag.durable(checkpoint.step)
            promoted.append(checkpoint.step)
        self.retain_local()
        return promoted

    def _promote_one(self, step: int) -> None:
        with self._view.load(step=step) as leased:  # leased: not deleted while it is copied
            assert leased is not None
            with contextlib.suppress(FileExistsError):  # a promoter killed after committing it: verified below
                if self.node is None:
                    self.durable.save_copy(leased.path)
                else:
                    promote_share(leased.path, self.durable, *self.node)
        self._verify_durable(step)

    def _verify_durable(self, step: int) -> None:
        """Read the durable copy back; a copy that fails is refused there (moved aside) and raises."""
        fresh = CheckpointManager(self.durable.directory, keep=None, verify="crc32c")  # trusts nothing it did not read
        with fresh.load(step=step):
            pass
        self._verified = step if self._verified is None else max(self._verified, step)

    def _newest_durable(self) -> int | None:
        """The newest durable step that validates, read back once by this promoter (newer ones that fail are
        refused on the way)."""
        for checkpoint in reversed(self.durable.checkpoints()):
            if self._verified is not None and checkpoint.step <= self._verified:
                break
            try:
                self._verify_durable(checkpoint.step)
                break
            except (CheckpointInvalidError, FileNotFoundError) as error:
                log.warning("durable checkpoint step %d does not validate: %s", checkpoint.step, error)
        return self._verified

    def retain_local(self) -> list[int]:
        """Delete local steps at or below the newest verified durable step, beyond the newest ``local_keep`` local
        ones; never a step not yet promoted. Return the deleted steps."""
        if self._verified is None:
            return []
        local = self._view.checkpoints()
        kept = local[len(local) - self.local_keep :] if self.local_keep else []
        deleted = []
        for checkpoint in local:
            if checkpoint.step <= self._verified and checkpoint not in kept and self._view._delete(checkpoint):
                deleted.append(checkpoint.step)
        return deleted

    def wake(self, step: object = None) -> None:
        """Ask the background thread for a pass now (``AsyncCheckpointer.on_saved`` calls it with the step)."""
        self._wake.set()

    def start(self) -> Promoter:
        """Claim the durable directory for this job (``claim.take``) and run passes in a daemon thread until
        :meth:`close`."""
        if self._thread is None:
            self._claimed = claim.take(self.durable)
            self._thread = threading.Thread(target=self._run, name="checkpoint-promoter", daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.interval)
            self._wake.clear()
            if not self._stop.is_set():
                self.promote()

    def close(self, flush: bool = True) -> None:
        """Stop the thread; with ``flush``, run a last pass so every committed local step is durable on return
        (RuntimeError when one is still not, after that pass)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
            if self._claimed:
                claim.release(self.durable)
        if flush:
            self.promote()
            latest, newest = self._view.latest(), self._verified
            if latest is not None and (newest is None or latest.step > newest):
                raise RuntimeError(f"checkpoint step {latest.step} is still not promoted to {self.durable.directory}")


def restore_manager(local: CheckpointManager | None, durable: CheckpointManager) -> CheckpointManager:
    """The manager to restore from: ``local`` when its newest step that validates is at least as new as the newest
    durable step, else ``durable`` (whose own load validates and falls back)."""
    if local is None:
        return durable
    newest_durable = durable.latest()
    for checkpoint in reversed(local.checkpoints()):
        if newest_durable is not None and checkpoint.step < newest_durable.step:
            break
        try:
            local.validate(checkpoint.step)
            return local
        except (CheckpointInvalidError, FileNotFoundError) as error:
            log.warning("local checkpoint step %d not used for the restore: %s", checkpoint.step, error)
    return durable


def managers_from_environment(
    keep: int | None = 3,
    *,
    directory: str | os.PathLike[str] | None = None,
    local_dir: str | os.PathLike[str] | None = None,
    local_keep: int = 1,
    **options: Any,
) -> tuple[CheckpointManager, CheckpointManager, Promoter | None]:
    """``(landing, durable, promoter)``: the durable directory ``directory`` (default ``$AI_STORAGE_CHECKPOINT_DIR``)
    and the landing directory ``local_dir`` (default ``$AI_STORAGE_CHECKPOINT_LOCAL_DIR``; ``""``: none). Without a
    landing directory ``landing`` is the durable manager and ``promoter`` None. Under torchrun over several nodes
    (``WORLD_SIZE`` > ``LOCAL_WORLD_SIZE``) each node lands its ranks' files in its own directory and promotes its
    share (``node_promotion``; run the promoter on each node's ``LOCAL_RANK`` 0). ``options`` go to every manager
    (rank, world_size, run_id, verify)."""
    directory = directory or os.environ.get(DIR_VARIABLE, "")
    if not directory:
        raise ValueError(f"{DIR_VARIABLE}: expected the durable checkpoint directory (the checkpoint claim's mount)")
    durable = CheckpointManager(directory, keep=keep, **options)
    local_dir = os.environ.get(LOCAL_DIR_VARIABLE, "") if local_dir is None else local_dir
    if not local_dir:
        return durable, durable, None
    local = CheckpointManager(local_dir, keep=None, **options)
    world, per_node = int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("LOCAL_WORLD_SIZE", "0") or 0)
    if not per_node or per_node >= world:
        return local, durable, Promoter(local, durable, local_keep=local_keep)
    node = int(os.environ.get("GROUP_RANK", "0"))  # torchrun numbers ranks node by node
    local.node_ranks = range(node * per_node, (node + 1) * per_node)
    return local, durable, Promoter(local, durable, local_keep=local_keep, node=(node, world // per_node))
