"""Ranks on separate nodes, modelled by two JuiceFS clients of one volume (two ``juicefs mount`` with the cold
tier's generated options, entry cache on). A client keeps the kernel's cached entry of a step's lock file that
the other client removed (its last holder) for up to ``entry-cache`` seconds, and opening it fails (EPERM: the
inode is in JuiceFS's trash) until then: the lock retries such an open, and a multi-rank save removes a step's lock
file only when its commit releases it, so no rank meets such an entry (each meeting costs up to a second)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import harness
import pytest

from ai_storage_training.checkpoint import layout, locks
from ai_storage_training.checkpoint.commit import problems, read_marker

ROOT = Path(__file__).resolve().parents[2]
RANK = """
import os, sys
from ai_storage_training import CheckpointManager
from ai_storage_training.checkpoint.locks import STALE_ENTRY_ERRORS
directory, rank, run_id, steps = sys.argv[1:5]
stale, real_open = [], os.open

def counting_open(path, flags, *args, **kwargs):  # counts the lock file opens that met a stale cached entry
    try:
        return real_open(path, flags, *args, **kwargs)
    except OSError as error:
        if str(path).endswith(".lock") and error.errno in STALE_ENTRY_ERRORS:
            stale.append(error.errno)
        raise

os.open = counting_open
manager = CheckpointManager(directory, keep=2, rank=int(rank), world_size=2, run_id=run_id, timeout=60)
for step in range(1, int(steps) + 1):
    manager.save(step, lambda d: (d / "state").write_text(f"{step}:{rank}:{run_id}"))
    print("saved", step, flush=True)
print("stale", len(stale), flush=True)
"""
ROUNDS, STEPS = 3, 6


@pytest.fixture(scope="module")
def clients(stack, fuse_ok, generated, juicefs_flags) -> Iterator[tuple[harness.MountHandle, harness.MountHandle]]:
    """The volume mounted twice with the generated options: one client per node."""
    options = generated["mount_options"]
    assert "entry-cache=0" not in options  # the generated options cache entries: the case this file is about
    with (
        stack.mount(options, name="rank-client-0", spec=juicefs_flags) as first,
        stack.mount(options, name="rank-client-1", spec=juicefs_flags) as second,
    ):
        yield first, second


def save_on_two_clients(directories: tuple[Path, Path], steps: int) -> tuple[str, int]:
    """Rank r saves steps 1..``steps`` through ``directories[r]``; both must exit 0 having saved every step.
    Returns the run id and how many lock file opens met a stale entry (and were retried)."""
    run_id = uuid.uuid4().hex[:10]
    ranks = [
        subprocess.Popen(
            [sys.executable, "-c", RANK, str(directory), str(rank), run_id, str(steps)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank, directory in enumerate(directories)
    ]
    outputs = [rank.communicate(timeout=300) for rank in ranks]
    for rank, (process, (out, err)) in enumerate(zip(ranks, outputs, strict=True)):
        assert process.returncode == 0, f"rank {rank} failed after saving {out.split()}:\n{err[-3000:]}"
        *saved, stale = out.splitlines()
        assert saved == [f"saved {step}" for step in range(1, steps + 1)] and stale.startswith("stale "), out
    return run_id, sum(int(out.splitlines()[-1].split()[1]) for out, _ in outputs)


def test_two_ranks_each_on_its_own_client_commit_every_step(clients):
    first, second = clients
    for round_ in range(ROUNDS):
        name = f"rank-clients-{round_}"
        (first.mountpoint / name).mkdir()
        run_id, stale = save_on_two_clients((first.mountpoint / name, second.mountpoint / name), STEPS)
        # only the commit removes a step's lock file, once every rank is past opening it: no open meets a stale
        # entry. When the coordinator's release removed it, full runs on a busy machine met 6 and 12 in 6 saves (a
        # rank that opened it while the coordinator released it retried until the entry expired).
        assert stale == 0, f"{stale} lock file opens met a stale cached entry in {STEPS} saves"
        for mount in clients:  # each client sees the same committed steps, whole, of this run
            directory = mount.mountpoint / name
            committed = sorted(directory.glob(layout.STEP_GLOB))
            assert [path.name for path in committed] == [layout.step_dir(s) for s in (STEPS - 1, STEPS)]
            for path in committed:
                marker = read_marker(path)
                assert marker is not None and marker.run_id == run_id and marker.world_size == 2, path
                assert sorted(marker.files) == [f"{layout.rank_dir(r)}/state" for r in (0, 1)]
                assert problems(path, marker) == []


def test_a_lock_file_removed_by_the_other_client_is_locked_again_through_the_stale_entry(clients, monkeypatch):
    (clients[0].mountpoint / "stale").mkdir()
    here, there = (mount.mountpoint / "stale" / layout.lock_file(1) for mount in clients)
    real_open, failed = os.open, []

    def counting_open(path, flags, *args, **kwargs):
        try:
            return real_open(path, flags, *args, **kwargs)
        except OSError as error:
            failed.append(error.errno)
            raise

    monkeypatch.setattr(os, "open", counting_open)
    held = locks.lock(here, shared=True)
    assert held is not None and there.exists()  # the second client now caches the lock file's entry
    locks.unlock(here, held)  # the last holder removes it through the first client
    fd = locks.lock(there, shared=False)  # the second client's entry is stale for up to entry-cache seconds
    assert fd is not None and os.stat(there).st_ino == os.fstat(fd).st_ino
    locks.unlock(there, fd)
    assert failed and set(failed) <= set(locks.STALE_ENTRY_ERRORS), failed  # met, and retried


def test_two_dcp_ranks_over_gloo_each_on_its_own_client_commit_every_step(clients, stack):
    pytest.importorskip("torch")
    from tests.training import dcp_job

    (clients[0].mountpoint / "dcp").mkdir()
    records = stack.workdir / "dcp-client-records"  # gloo's rendezvous file and the ranks' logs: local
    records.mkdir()
    run_id = uuid.uuid4().hex[:12]
    ranks = [
        dcp_job.CONTEXT.Process(
            target=dcp_job.run_rank, args=(r, 2, str(mount.mountpoint / "dcp"), str(records), run_id, 6, 3)
        )
        for r, mount in enumerate(clients)
    ]
    for rank in ranks:
        rank.start()
    for rank in ranks:
        rank.join(180)
    logs = "\n".join(p.read_text()[-2000:] for p in sorted(records.glob("log-*.txt")))
    assert [rank.exitcode for rank in ranks] == [0, 0], logs
    for mount in clients:
        assert dcp_job.committed_steps_are_whole(mount.mountpoint / "dcp") == [4, 5, 6]
