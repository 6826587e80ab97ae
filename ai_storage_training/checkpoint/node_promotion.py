"""Promotion of a job over several nodes: each node lands its ranks' files on its own local directory, promotes its
share to the durable directory, and the step commits there once, when every node's share is in and checked.

A node's landing directory holds a committed step of its own ranks' files (its first rank commits them; rank 0's
node also holds DCP's ``.metadata``). Each node's promoter (:class:`~.promotion.Promoter` with ``node=``) copies its
share into the durable staging directory of the step's run (``.step-NNNNNNNN.tmp-<run id>/``), checking every file's
size and CRC32C against its local marker while copying, fsyncs it and writes the node's manifest there (``ranks``'
protocol, a node in the place of a rank). Node 0's promoter waits for every node's manifest and commits the step
with the marker of the landed one (its run id, metrics, world size); the others wait for that commit. A node lost
before its manifest leaves the step uncommitted (node 0 gives up after the durable manager's ``timeout`` and marks the
staging directory aborted): the previous durable step stays the newest, and the next ``clean()`` removes the rest.
"""

from __future__ import annotations

from pathlib import Path

from . import layout, ranks
from .commit import CheckpointInvalidError, FileRecord, fsync_dir, read_marker
from .locks import lock_waiting, unlock
from .manager import CheckpointManager, copy_checked


def promote_share(source: Path, durable: CheckpointManager, node: int, nodes: int) -> None:
    """Promote this node's share of the committed local step ``source`` (see the module docstring); returns once the
    step is committed in ``durable``. FileExistsError when it already is."""
    marker = read_marker(source)
    if marker is None:
        raise CheckpointInvalidError(f"{source}: no readable {layout.MARKER} marker")
    step, run_id = marker.step, marker.run_id
    final = durable.final_path(step)
    if read_marker(final) is not None:
        raise FileExistsError(f"checkpoint {final} already exists")
    staging = durable.directory / layout.staging_dir(step, run_id)
    staging.mkdir(parents=True, exist_ok=True)
    fd = lock_waiting(durable._lock_path(step), shared=True, timeout=durable.timeout, what=f"step {step}")
    try:  # held shared: no cleaner removes the staging directory while this node copies into it
        files: dict[str, FileRecord] = {}
        for name, expected in marker.files.items():
            (staging / name).unlink(missing_ok=True)  # this node's copy of an attempt that died
            if problem := copy_checked(source, staging, name, expected):
                raise CheckpointInvalidError(f"{source}: {problem}")
            files[name] = FileRecord(expected.size, expected.crc32c, node)
        fsync_dir(staging)
        fsync_dir(durable.directory)
        ranks.write_manifest(staging, rank=node, run_id=run_id, step=step, files=files)
    finally:
        unlock(durable._lock_path(step), fd, remove=False)
    if node == 0:
        every = ranks.wait_for_manifests(staging, world_size=nodes, run_id=run_id, timeout=durable.timeout)
        durable.world_size = max(durable.world_size, marker.world_size)  # the marker says the job's ranks
        durable.commit(step, staging, every, run_id=run_id, metrics=marker.metrics)
    else:
        ranks.wait_for_commit(final, staging, run_id=run_id, timeout=durable.timeout)
