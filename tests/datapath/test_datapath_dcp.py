"""PyTorch DCP through the training library on the real JuiceFS mount (real Redis, S3 endpoint): 2- and 4-rank
jobs saving with ``dcp.async_save`` are killed with SIGKILL (one rank, the coordinator, every rank) at random
points; no committed step ever lacks a shard or mixes two runs, and every restart resumes bit for bit. A bit
flipped in a shard (size kept) is refused naming the file, the job falls back a step and saves that step again."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from tests.training import dcp_job


@pytest.mark.parametrize(("world_size", "iterations"), [(2, 6), (4, 6)])
def test_dcp_ranks_killed_at_random_points_never_commit_a_partial_step(mounted, world_size, iterations):
    root = mounted.mountpoint / f"dcp-kill-{world_size}"
    root.mkdir()
    dcp_job.kill_loop(root, world_size, iterations)


def test_dcp_a_flipped_byte_is_refused_and_the_step_saved_again(mounted):
    root = mounted.mountpoint / "dcp-flip"
    root.mkdir()
    dcp_job.flip_and_resume(root)
