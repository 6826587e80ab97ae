"""The team example's training script, a real PyTorch job: it reads a packed dataset version (pack()) through
ShardDataset in a StatefulDataLoader with 2 workers, checkpoints asynchronously through DCP and the library, is
stopped (or killed with SIGKILL, 2 ranks over gloo with local landing), and resumes bit for bit: the parameters
after a resumed run equal those of a run that never stopped, and so do the samples it trained on (their count and
the digest of their keys in order), so the resumed loader repeated and skipped none. Its /metrics show the
checkpoint metrics."""

from __future__ import annotations

import contextlib
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

from ai_storage_training.checkpoint.listing import listing
from ai_storage_training.checkpoint.manager import CheckpointManager
from ai_storage_training.data.pack import pack

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ROOT / "examples" / "team-training" / "train.py"
LINE = re.compile(r"^rank (\d+): step (\d+), loss [0-9.]+, params ([0-9a-f]{16}), samples (\d+), keys (\w+)$", re.M)
RESUMED = re.compile(r"^rank (\d+): resumed at step (\d+), epoch (\d+), samples (\d+)$", re.M)
BATCH, SAMPLES, SHARDS = 8, 64, 8  # the job's batch; the dataset: 8 shards of 8 samples (one epoch: 8 batches)
NEW_METRICS = (
    "ai_storage_checkpoint_lag_seconds",
    "ai_storage_checkpoint_lag_steps",
    "ai_storage_checkpoint_blocked_seconds",
    "ai_storage_checkpoint_in_flight",
    "ai_storage_checkpoint_promotion_seconds",
    "ai_storage_checkpoint_promotion_failures_total",
    "ai_storage_checkpoint_validation_failures_total",
    "ai_storage_checkpoint_restore_test_timestamp_seconds",
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def command(data: Path, checkpoints: Path, ranks: int, *args: str, logs: Path | None = None) -> list[str]:
    """The job's command line; with several ranks under torchrun, each rank's output into a file of its own under
    ``logs`` (``<logs>/<run>/attempt_0/<rank>/stdout.log``): ranks sharing one pipe can interleave their lines."""
    launcher = [sys.executable]
    if ranks > 1:
        launcher += ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}"]
        launcher += [f"--log-dir={logs}", "--redirects=3"] if logs is not None else []
    return [*launcher, str(TRAIN), f"--data={data}", f"--checkpoint-dir={checkpoints}", *args]


def rank_outputs(logs: Path, ranks: int) -> list[str]:
    """Each rank's own stdout (torchrun's per-rank log files), rank 0 first."""
    outputs = []
    for rank in range(ranks):
        found = sorted(logs.glob(f"*/attempt_*/{rank}/stdout.log"))
        assert len(found) == 1, (rank, found)
        outputs.append(found[0].read_text())
    return outputs


def environment(port: int, **extra: str) -> dict[str, str]:
    return {
        "PYTHONPATH": str(ROOT),
        "AI_STORAGE_METRICS_PORT": str(port),
        "PATH": "/usr/bin:/bin",
        "PYTHONWARNINGS": "ignore",
        "OMP_NUM_THREADS": "1",
        **extra,
    }


def train(data: Path, checkpoints: Path, *args: str, ranks: int = 1, **env: str) -> dict[int, tuple]:
    """Run the job to its end; {rank: (step, params digest, samples trained on, digest of their keys)}, and
    {rank: (step, epoch, samples)} where it resumed under the key "resumed"."""
    logs = Path(tempfile.mkdtemp(prefix="ranks-", dir=checkpoints.parent if checkpoints.parent.exists() else None))
    proc = subprocess.run(
        command(data, checkpoints, ranks, *args, logs=logs),
        capture_output=True,
        text=True,
        timeout=300,
        env=environment(free_port(), **env),
        check=False,
    )
    outputs = rank_outputs(logs, ranks) if ranks > 1 and proc.returncode == 0 else [proc.stdout]
    assert proc.returncode == 0, (
        proc.stdout + proc.stderr + "".join(p.read_text() for p in sorted(logs.glob("*/attempt_*/*/std*.log")))
    )
    ends, where = {}, {}
    for output in outputs:  # one rank's lines each (one output without torchrun)
        ends |= {int(r): (int(s), params, int(n), keys) for r, s, params, n, keys in LINE.findall(output)}
        where |= {int(r): (int(s), int(e), int(n)) for r, s, e, n in RESUMED.findall(output)}
    return ends, where


def raw_samples(directory: Path, count: int) -> Path:
    """``count`` small files of random bytes, one sample each."""
    directory.mkdir(parents=True)
    rng = random.Random(27)
    for i in range(count):
        (directory / f"sample-{i:03d}.bin").write_bytes(rng.randbytes(16 + i % 32))
    return directory


def packed(tmp_path: Path) -> Path:
    """A packed dataset version: SHARDS WebDataset shards of SAMPLES // SHARDS samples (each sample a tar member of
    one 512-byte header and one data block), published with its manifest."""
    manifest = pack(raw_samples(tmp_path / "raw", SAMPLES), tmp_path / "datasets", "toy", "v1", shard_bytes=8 * 1024)
    assert [s.samples for s in manifest.shards] == [SAMPLES // SHARDS] * SHARDS
    return tmp_path / "datasets" / "toy" / "v1"


@pytest.fixture
def data(tmp_path):
    return packed(tmp_path)


def test_the_job_saves_and_resumes_bit_for_bit_where_it_stopped(tmp_path, data):
    checkpoints = tmp_path / "checkpoints" / "resnet50"
    first, _ = train(data, checkpoints, "--steps=7", "--save-every=2")
    assert first[0][0] == 7 and first[0][2] == 7 * BATCH
    manager = CheckpointManager(checkpoints, keep=None)
    assert [c.step for c in manager.checkpoints()] == [2, 4, 6]
    assert {".metadata", "__0_0.distcp", "COMPLETE"} <= {p.name for p in manager.final_path(6).iterdir()}
    recorded = [row["metrics"] for row in listing(checkpoints)]  # what `list` shows: the loss and samples of each
    assert [r["samples"] for r in recorded] == [2 * BATCH, 4 * BATCH, 6 * BATCH] and all(
        r["loss"] > 0 for r in recorded
    )
    # Restarted (a pod evicted after step 7): it resumes from step 6, with model, optimizer and RNG state.
    # Its data position too: mid-epoch (6 of the epoch's 8 batches), the loader continues at the 7th.
    resumed, where = train(data, checkpoints, "--steps=10", "--save-every=2")
    assert where == {0: (6, 0, 6 * BATCH)}
    assert [c.step for c in manager.checkpoints()] == [6, 8, 10]
    straight, _ = train(data, tmp_path / "straight", "--steps=10", "--save-every=2")
    # The same samples, in the same order, across the epoch's end (10 batches: an epoch and 2), as a run that
    # never stopped: none repeated, none skipped; and so the same parameters.
    assert resumed[0][2:] == straight[0][2:] and resumed[0][2] == 10 * BATCH
    assert resumed == straight


def children(parent: int) -> list[int]:
    """The processes whose parent is ``parent`` (from /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # ended meanwhile
        if int(fields[1]) == parent:
            found.append(int(stat.parent.name))
    return found


def kill_job(launcher: subprocess.Popen) -> None:
    """SIGKILL torchrun and every rank with its DataLoader workers: torchrun starts each rank in a session of its
    own, so killing torchrun's process group alone would leave the ranks training (orphaned); wait until each
    is gone (or a zombie)."""
    groups = [launcher.pid, *children(launcher.pid)]
    for group in groups:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGKILL)
    launcher.wait(timeout=60)
    deadline = time.monotonic() + 60
    for pid in groups[1:]:
        stat = Path(f"/proc/{pid}/stat")
        while stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] != "Z":
            assert time.monotonic() < deadline, f"rank process {pid} survived SIGKILL"
            time.sleep(0.05)


def scrape(port: int) -> str:
    return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()


def test_two_ranks_killed_with_sigkill_resume_bit_for_bit_from_a_promoted_checkpoint(tmp_path, data):
    durable, local, port = tmp_path / "durable", tmp_path / "local", free_port()
    # 42 steps of 0.2 s: the promoter (a pass per landed save) keeps within a few steps, so the kill lands in the
    # training; a rank's epoch is 4 steps, so most saves (every 3) are mid-epoch.
    args = ("--steps=42", "--save-every=3", "--step-seconds=0.2")
    env = environment(port, AI_STORAGE_CHECKPOINT_LOCAL_DIR=str(local))
    job = subprocess.Popen(
        command(data, durable, 2, *args), env=env, start_new_session=True, stdout=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 240
        while not CheckpointManager(durable, keep=None).checkpoints():  # the first promoted checkpoint
            assert job.poll() is None and time.monotonic() < deadline, "the job ended before a checkpoint was durable"
            time.sleep(0.2)
        text = scrape(port)  # a real scrape of the training process (rank 0's endpoint)
        time.sleep(random.Random(26).uniform(0.0, 1.0))
    finally:
        kill_job(job)  # torchrun, both ranks and their workers, wherever they are
    for name in NEW_METRICS:
        assert f"\n{name}" in text, name
    count = re.search(r"^ai_storage_checkpoint_blocked_seconds_count (\S+)$", text, re.M)
    assert count is not None and float(count.group(1)) >= 1  # the job's saves were measured
    killed_at = max(c.step for c in CheckpointManager(durable, keep=None).checkpoints())

    resumed, where = train(data, durable, *args, ranks=2, AI_STORAGE_CHECKPOINT_LOCAL_DIR=str(local))
    straight, _ = train(data, tmp_path / "straight", *args, ranks=2)
    assert set(where) == {0, 1} and where[0][0] == where[1][0], where  # both ranks resumed from one checkpoint
    assert 0 < where[0][0] < 42, f"killed after training ended (resumed at {where}): nothing resumed mid-run"
    assert resumed == straight and set(resumed) == {0, 1} and resumed[0][0] == 42
    assert resumed[0][2] == resumed[1][2] == 42 * BATCH and resumed[0][3] != resumed[1][3]  # each rank its share
    assert killed_at < 42 and CheckpointManager(durable, keep=None).latest().step == 42  # promoted before the end


def refusal(tmp_path: Path, data: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(TRAIN), f"--data={data}", f"--checkpoint-dir={tmp_path / 'c'}"],
        capture_output=True,
        text=True,
        timeout=120,
        env=environment(1, **env),
        check=False,
    )


def test_two_ranks_with_two_saves_in_flight_commit_every_step(tmp_path, data):
    # Two background DCP saves on one process group interleaved their collectives: the job hung, nothing committed.
    checkpoints = tmp_path / "checkpoints"
    ends, _ = train(data, checkpoints, "--steps=8", "--save-every=1", "--max-in-flight=2", "--keep=8", ranks=2)
    assert {rank: end[0] for rank, end in ends.items()} == {0: 8, 1: 8}
    assert sorted(p.name for p in checkpoints.iterdir() if not p.name.startswith(".")) == [
        f"step-{s:08d}" for s in range(1, 9)
    ]


@pytest.mark.parametrize("where", ["empty", "missing"])
def test_the_example_job_refuses_an_empty_or_missing_dataset(tmp_path, where):
    (tmp_path / "empty").mkdir()
    proc = refusal(tmp_path, tmp_path / where)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "--data: expected a packed dataset version" in proc.stderr and "manifest.json: missing" in proc.stderr
    assert not (tmp_path / "c").exists()  # nothing half-created


def test_the_staged_copy_named_by_the_environment_wins_over_data(tmp_path, data):
    """With staging on, $AI_STORAGE_DATASET_DIR names the staged copy: the job reads it, not --data (here the
    staged directory is empty, so the job is refused naming the variable)."""
    (tmp_path / "staged").mkdir()
    proc = refusal(tmp_path, data, AI_STORAGE_DATASET_DIR=str(tmp_path / "staged"))
    assert proc.returncode == 2 and "$AI_STORAGE_DATASET_DIR: expected a packed dataset version" in proc.stderr


def test_the_example_job_refuses_too_few_shards_for_its_workers(tmp_path):
    pack(raw_samples(tmp_path / "raw", 4), tmp_path / "datasets", "tiny", "v1")  # one shard, for 2 workers
    proc = refusal(tmp_path, tmp_path / "datasets" / "tiny" / "v1")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "--data: expected at least 2 shards (1 ranks x 2 workers)" in proc.stderr and "has 1" in proc.stderr


def trained_keys(directory: Path) -> list[tuple[int, str]]:
    return [
        (int(epoch), key)
        for path in sorted(directory.glob("rank-*.txt"))
        for epoch, key in (line.split() for line in path.read_text().splitlines())
    ]


@pytest.mark.parametrize(
    ("before", "after"),
    [((2, 2, 3), (1, 2)), ((1, 2, 3), (2, 2)), ((2, 2, 2), (4, 1)), ((4, 1, 1), (3, 2))],
    ids=["2-to-1", "1-to-2", "2-to-4", "4-to-3"],
)
def test_a_job_resumed_on_another_number_of_ranks_trains_every_sample_of_the_epoch_once(tmp_path, data, before, after):
    """(ranks, workers, steps) of the first run, saved at its last step; the second run, (ranks, workers), resumes
    it and trains past the end of the epoch. Across both, no sample of epoch 0 twice; the only ones left out are a
    remainder of fewer samples than the second run has workers (the even share every rank needs)."""
    (ranks, workers, steps), (ranks2, workers2) = before, after
    checkpoints = tmp_path / "checkpoints"
    common = ["--save-every", str(steps), "--log-every", "1000"]
    train(data, checkpoints, f"--steps={steps}", f"--workers={workers}", f"--record-keys={tmp_path / 'first'}",
          *common, ranks=ranks)  # fmt: skip
    first = trained_keys(tmp_path / "first")
    assert len(first) == ranks * steps * BATCH and {e for e, _ in first} == {0}
    left = SAMPLES - len(first)
    batches = -(-left // (ranks2 * workers2) // BATCH) * workers2  # per rank, to the end of the epoch
    _, where = train(data, checkpoints, f"--steps={steps + batches + 1}", f"--workers={workers2}",
                     f"--record-keys={tmp_path / 'second'}", *common, ranks=ranks2)  # fmt: skip
    assert {r: s for r, (s, _, _) in where.items()} == dict.fromkeys(range(ranks2), steps)
    epoch0 = [key for epoch, key in first + trained_keys(tmp_path / "second") if epoch == 0]
    repeated = len(epoch0) - len(set(epoch0))
    skipped = SAMPLES - len(set(epoch0))
    assert (repeated, skipped) == (0, left % (ranks2 * workers2))
