"""Training-side helpers of ai-storage-platform: crash-safe checkpoints, a prefetching reader, the training
metrics and a storage doctor. Standard library, prometheus_client and crc32c only (no Pulumi, no
framework); ``ai_storage_training.dcp`` plugs the checkpoints into PyTorch's ``torch.distributed.checkpoint``."""

from .checkpoints import Checkpoint, CheckpointBusyError, CheckpointInvalidError, CheckpointManager
from .reader import PrefetchingReader

__all__ = ["Checkpoint", "CheckpointBusyError", "CheckpointInvalidError", "CheckpointManager", "PrefetchingReader"]
