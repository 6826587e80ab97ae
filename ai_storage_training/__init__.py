"""Training-side helpers of ai-storage-platform: crash-safe checkpoints, datasets packed for training, the
training metrics and a storage doctor. Standard library, prometheus_client and crc32c only (no Pulumi, no
framework); PyTorch only in the modules that plug into it (the DCP writer and reader, the stagers, the datasets).

Where to look:

- ``checkpoint/``: how a checkpoint is saved, committed, validated, restored and promoted (read ``manager.py``
  first, then ``commit.py``; ``dcp.py`` and ``dcp_reader.py`` plug it into ``torch.distributed.checkpoint``,
  ``async_save.py`` saves in the background);
- ``data/``: datasets packed into WebDataset shards with a manifest, staged onto local volumes and read for
  training (read ``manifest.py`` first), and trained models published the same way (``artifacts.py``);
- ``doctor/``: ``python -m ai_storage_training doctor``, the storage diagnosis (read ``command.py`` first);
- ``steps.py``: where a training step's time goes (data wait, checkpoint blocking, compute), storage goodput,
  and ``gpu.py``, the GPU's busy fraction from NVML; ``doctor/job.py`` judges a job from them;
- ``metrics.py`` (what the platform's alerts read), ``progress.py``, the command line (``cli.py``,
  ``cli_types.py``, ``__main__.py``).
"""

from . import _moved
from .checkpoint.async_save import AsyncCheckpointer, CheckpointSaveError
from .checkpoint.manager import Checkpoint, CheckpointBusyError, CheckpointInvalidError, CheckpointManager
from .data.reader import PrefetchingReader
from .steps import StepTimer

_moved.install()

__all__ = [
    "AsyncCheckpointer",
    "Checkpoint",
    "CheckpointBusyError",
    "CheckpointInvalidError",
    "CheckpointManager",
    "CheckpointSaveError",
    "PrefetchingReader",
    "StepTimer",
]
