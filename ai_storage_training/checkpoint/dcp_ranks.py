"""The place of this process in a torch.distributed job, for the DCP writer and reader."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch.distributed as dist

if TYPE_CHECKING:
    from .manager import CheckpointManager


def join(manager: CheckpointManager) -> None:
    """Take the rank and world size from torch.distributed, and share rank 0's run id when none was given."""
    if not (dist.is_available() and dist.is_initialized()):
        return
    rank, world_size = dist.get_rank(), dist.get_world_size()
    if (manager.rank, manager.world_size) not in ((0, 1), (rank, world_size)):
        raise ValueError(
            f"rank/world_size: the manager says {manager.rank}/{manager.world_size}, torch.distributed says "
            f"{rank}/{world_size}; leave them out, they come from torch.distributed"
        )
    if world_size > 1 and not manager.shared_run_id:
        shared = [manager._run_id if rank == 0 else None]
        dist.broadcast_object_list(shared, src=0)
        manager.run_id, manager.shared_run_id = str(shared[0]), True
    manager.rank, manager.world_size = rank, world_size
