"""Checkpoints: saved crash-safe by one or many ranks, validated before they are trusted, restored, kept, promoted.

Read ``manager.py`` first (``CheckpointManager``: save, load, rollback, retention), then ``commit.py`` (the commit
point, the marker, CRC32C, the lock files) and ``layout.py`` (the names on disk, which the platform's offsite copy
reads too). ``store.py`` holds what the manager reads (listing, cleaning, retention); ``ranks.py`` the file-based
protocol of a multi-rank save. PyTorch: ``dcp.py`` (the DCP storage writer), ``dcp_reader.py`` (the verifying reader
and ``restore``; ``checked_item.py`` reads and checks one item), ``dcp_ranks.py`` (the place of a rank in
torch.distributed), ``staging.py`` (the stagers of asynchronous saves). In the background: ``async_save.py``
(``AsyncCheckpointer``), ``lag.py`` (the lag gauges), ``promotion.py`` (from a local landing directory to the
durable one). ``restore_test.py`` is the scheduled restore test.

The DCP writer and reader depend on the manager through what it is (its directory, rank, locks), never the other
way round: the manager knows nothing of DCP or torch (an import contract in pyproject.toml, imports inside
functions included).
"""

from .manager import Checkpoint, CheckpointBusyError, CheckpointInvalidError, CheckpointManager

__all__ = ["Checkpoint", "CheckpointBusyError", "CheckpointInvalidError", "CheckpointManager"]
