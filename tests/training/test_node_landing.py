"""Local landing on many nodes: each node lands its ranks' files on its own directory, promotes its share, and the
durable step commits once every node's share is in (``node_promotion.py``). Two "nodes" on one machine: two torchrun
agents (``--nnodes=2``, c10d rendezvous) with a landing directory each and one durable directory; and a node lost
before its share is in leaves the previous step the newest."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest

from ai_storage_training import CheckpointManager
from ai_storage_training.checkpoint import lag, layout
from ai_storage_training.checkpoint.commit import read_marker
from ai_storage_training.checkpoint.promotion import Promoter
from tests.training.test_example_train import LINE, TRAIN, environment, free_port, packed, train


@pytest.fixture
def data(tmp_path):
    return packed(tmp_path)


def node(data: Path, durable: Path, landing: Path, port: int, logs: Path, *args: str) -> subprocess.Popen:
    """One node's torchrun agent: one rank, its own landing directory, the job's rendezvous on ``port``."""
    command = [
        sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=1", "--rdzv-backend=c10d",
        f"--rdzv-endpoint=127.0.0.1:{port}", "--rdzv-id=two-nodes", f"--log-dir={logs}", "--redirects=3",
        str(TRAIN), f"--data={data}", f"--checkpoint-dir={durable}", "--workers=1", *args,
    ]  # fmt: skip
    env = environment(free_port(), AI_STORAGE_CHECKPOINT_LOCAL_DIR=str(landing))
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def ranks_of(step_dir: Path) -> set[int]:
    """The ranks whose DCP data files a step directory holds (``__<rank>_<n>.distcp``)."""
    return {int(p.name.split("_")[2]) for p in step_dir.glob("__*_*.distcp")}


def test_two_nodes_land_locally_and_each_step_commits_once_with_every_nodes_share(tmp_path, data):
    durable, port = tmp_path / "durable", free_port()
    args = ("--steps=6", "--save-every=3")
    jobs = [node(data, durable, tmp_path / f"landing-{n}", port, tmp_path / f"logs-{n}", *args) for n in (0, 1)]
    outputs = [job.communicate(timeout=300)[0] for job in jobs]
    assert [job.returncode for job in jobs] == [0, 0], outputs
    ends = {int(r): (int(s), p, int(n), k) for out in (tmp_path / "logs-0", tmp_path / "logs-1")
            for f in out.glob("*/attempt_0/*/stdout.log") for r, s, p, n, k in LINE.findall(f.read_text())}  # fmt: skip
    committed = CheckpointManager(durable, keep=None).checkpoints()
    assert [c.step for c in committed] == [3, 6]
    for checkpoint in committed:
        marker = read_marker(checkpoint.path)
        assert marker is not None and marker.world_size == 2 and ".metadata" in marker.files
        assert ranks_of(checkpoint.path) == {0, 1}  # every node's share, in one commit
    landed = {n: CheckpointManager(tmp_path / f"landing-{n}", keep=None).latest() for n in (0, 1)}
    assert sorted(ranks_of(c.path) for c in landed.values()) == [{0}, {1}]  # each node holds its own ranks' files
    # The durable step is a whole checkpoint: a one-node job resumes it and ends as a run that never stopped.
    resumed, where = train(data, durable, "--steps=9", "--save-every=3", "--workers=1", ranks=2)
    straight, _ = train(data, tmp_path / "straight", "--steps=9", "--save-every=3", "--workers=1", ranks=2)
    assert where == {0: (6, 0, 6 * 8), 1: (6, 0, 6 * 8)} and resumed == straight
    assert {rank: end[0] for rank, end in ends.items()} == {0: 6, 1: 6}


def landed_share(directory: Path, step: int, rank: int) -> CheckpointManager:
    """A node's landing directory holding its share of ``step`` (one file of its rank), committed."""
    manager = CheckpointManager(directory, keep=None, run_id="job-1")
    manager.save(step, lambda d: (d / f"__{rank}_0.distcp").write_bytes(bytes([rank, step]) * 4096))
    return manager


def test_a_node_lost_before_its_share_is_in_leaves_the_previous_step_the_newest(tmp_path):
    durable = CheckpointManager(tmp_path / "durable", keep=None, timeout=1.0)
    node0, node1 = landed_share(tmp_path / "n0", 3, 0), landed_share(tmp_path / "n1", 3, 1)
    first = Promoter(node0, durable, node=(0, 2), lag=lag.CheckpointLag())
    second = Promoter(node1, durable, node=(1, 2), lag=lag.CheckpointLag())
    both = [threading.Thread(target=p.promote) for p in (first, second)]
    for thread in both:
        thread.start()
    for thread in both:
        thread.join(60)
    assert [c.step for c in durable.checkpoints()] == [3] and ranks_of(durable.final_path(3)) == {0, 1}
    landed_share(tmp_path / "n0", 6, 0)  # step 6 landed on node 0 only: node 1 was lost before its share
    assert first.promote() == []  # node 0 waited for node 1's share, then gave up
    assert [c.step for c in durable.checkpoints()] == [3]
    staging = tmp_path / "durable" / layout.staging_dir(6, "job-1")
    assert (staging / ".abort").read_text().startswith("ranks [1] wrote no manifest")
