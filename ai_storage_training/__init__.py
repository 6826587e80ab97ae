"""Training-side helpers of ai-storage-platform: crash-safe checkpoints, a prefetching reader, the training
metrics and a storage doctor. Standard library and prometheus_client only (no Pulumi, no framework)."""

from .checkpoints import Checkpoint, CheckpointBusyError, CheckpointManager
from .reader import PrefetchingReader

__all__ = ["Checkpoint", "CheckpointBusyError", "CheckpointManager", "PrefetchingReader"]
