"""Packed datasets with real torch: 2 ranks (gloo) x 2 DataLoader workers read every sample of an epoch once, a
job killed with SIGKILL after saving its StatefulDataLoader state resumes with exactly the samples it had not
yielded, the same seed gives the same order, each refusal of the reader names the shard, the version and what
differs, and a scrape of the training process counts every read its workers made."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from ai_storage_training.data import manifest as mf
from ai_storage_training.data.pack import pack

pytest.importorskip("torch")
from ai_storage_training.data.datasets import ShardDataset
from tests.training.corruption import flip_byte

JOB = [sys.executable, str(Path(__file__).with_name("dataset_job.py"))]
SAMPLES = 96
REPO = Path(__file__).resolve().parents[2]


def make_files(directory: Path, count: int = SAMPLES) -> Path:
    directory.mkdir(parents=True)
    for i in range(count):
        (directory / f"img{i:04d}.bin").write_bytes(os.urandom(2000))
        (directory / f"img{i:04d}.cls").write_text(str(i % 10))
    return directory


@pytest.fixture
def version(tmp_path) -> Path:
    """96 samples packed into 16 shards of 6 (2 ranks x 2 workers get 4 shards each)."""
    result = pack(
        make_files(tmp_path / "files"), tmp_path / "datasets", "toy", "v1", shard_bytes=6 * 3584
    )  # 3584: a sample's two tar members
    assert [s.samples for s in result.shards] == [6] * 16
    return tmp_path / "datasets" / "toy" / "v1"


@pytest.fixture
def uneven(tmp_path) -> Path:
    """90 samples in 15 shards of 6: 2 ranks x 2 workers hold 4, 4, 4 and 3 shards (24, 24, 24, 18 samples)."""
    result = pack(make_files(tmp_path / "files", 90), tmp_path / "datasets", "toy", "v2", shard_bytes=6 * 3584)
    assert [s.samples for s in result.shards] == [6] * 15
    return tmp_path / "datasets" / "toy" / "v2"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ranks(*args: str, world: int = 2, **env: str) -> list[subprocess.Popen]:
    """``world`` ranks of the job (gloo on loopback); ``{rank}`` in an argument becomes the rank."""
    port = str(free_port())
    return [
        subprocess.Popen(
            [*JOB, *(a.format(rank=r) for a in args)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
            env={
                **os.environ,
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": port,
                "RANK": str(r),
                "WORLD_SIZE": str(world),
                "PYTHONPATH": str(REPO),
                **env,
            },
        )
        for r in range(world)
    ]


def finish(procs: list[subprocess.Popen]) -> list[list[str]]:
    out = []
    try:
        for p in procs:
            stdout, stderr = p.communicate(timeout=180)
            assert p.returncode == 0, stderr[-3000:]
            out.append(json.loads(stdout.strip().splitlines()[-1]))
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    return out


def all_keys() -> list[str]:
    return [f"img{i:04d}" for i in range(SAMPLES)]


def test_two_ranks_of_two_workers_read_every_sample_once_and_the_seed_fixes_the_order(version):
    first = finish(ranks("epoch", "--data", str(version), "--seed", "7"))
    assert sorted(first[0] + first[1]) == all_keys()  # every sample once, across ranks and workers
    assert len(first[0]) == len(first[1]) == SAMPLES // 2
    again = finish(ranks("epoch", "--data", str(version), "--seed", "7"))
    assert again == first  # same seed, same order on each rank
    other = finish(ranks("epoch", "--data", str(version), "--seed", "7", "--epoch", "1"))
    assert sorted(other[0] + other[1]) == all_keys() and other != first  # the next epoch: another order


@pytest.mark.parametrize("context", ["fork", "forkserver", "spawn"])
def test_each_sample_is_read_by_one_rank_whatever_starts_the_workers(version, context):
    # forkserver and spawn workers start without torch.distributed: the rank is fixed where the dataset is made.
    got = finish(ranks("epoch", "--data", str(version), "--seed", "5", "--context", context, "--no-rank-env"))
    assert sorted(got[0] + got[1]) == all_keys() and not set(got[0]) & set(got[1])


def test_a_rank_of_several_that_cannot_say_which_it_is_refuses_to_make_the_dataset(version, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.delenv("RANK", raising=False)
    with pytest.raises(ValueError, match="rank: WORLD_SIZE says 2 ranks but this process has no rank"):
        ShardDataset(version)
    monkeypatch.setenv("RANK", "1")
    assert (ShardDataset(version).rank, ShardDataset(version).world_size) == (1, 2)


def test_a_job_killed_after_saving_its_loader_state_resumes_with_exactly_the_samples_not_yet_yielded(version, tmp_path):
    uninterrupted = finish(ranks("epoch", "--data", str(version), "--seed", "3"))
    state = str(tmp_path / "rank{rank}.pt")
    procs = ranks("save", "--data", str(version), "--seed", "3", "--after", "5", "--state", state)
    for p in procs:
        assert p.stdout is not None and p.stdout.readline() == "saved\n"
    for p in procs:
        os.killpg(p.pid, signal.SIGKILL)  # the rank and its DataLoader workers, mid-epoch
        p.wait(timeout=30)
        assert p.returncode == -signal.SIGKILL
    resumed = finish(ranks("resume", "--data", str(version), "--seed", "3", "--state", state))
    for r in range(2):
        before = json.loads(Path(state.format(rank=r) + ".keys").read_text())
        assert len(before) == 15 and resumed[r]  # killed mid-epoch, and there was more to read
        assert before + resumed[r] == uninterrupted[r]  # nothing repeated, nothing skipped, same order


def test_a_scrape_of_the_training_process_counts_every_read_its_two_workers_made(version, tmp_path):
    multiproc = tmp_path / "prometheus"
    multiproc.mkdir()
    (proc,) = ranks("metrics", "--data", str(version), world=1, PROMETHEUS_MULTIPROC_DIR=str(multiproc))
    stdout, stderr = proc.communicate(timeout=180)
    assert proc.returncode == 0, stderr[-3000:]
    scrape = {
        line.rpartition(" ")[0]: float(line.rpartition(" ")[2])
        for line in stdout.splitlines()
        if line.startswith("ai_storage_")
    }
    shards = mf.load(version).shards
    reads = scrape["ai_storage_prefetch_hits_total"] + scrape["ai_storage_prefetch_misses_total"]
    assert reads == len(shards) == 16  # every shard the 2 workers read, none in the main process
    assert scrape["ai_storage_read_bytes_total"] == sum(s.size for s in shards)
    assert scrape["ai_storage_read_seconds_count"] == len(shards)


def read_until_refused(dataset: ShardDataset) -> tuple[list[dict], str]:
    got: list[dict] = []
    with pytest.raises(mf.DatasetError) as refused:
        for sample in dataset:
            got.append(sample)
    return got, str(refused.value)


def test_a_flipped_byte_refuses_the_shard_before_any_of_its_samples_is_used(version):
    flip_byte(version / "shard-000005.tar", 700, 0xFF)  # same size, one byte of a sample's data
    got, error = read_until_refused(ShardDataset(version, shuffle_buffer=1))
    assert "shard shard-000005.tar of dataset toy version v1: CRC32C" in error and "manifest says" in error
    assert not [s for s in got if s["__url__"] == "shard-000005.tar"]


def test_a_shard_of_another_size_or_a_missing_shard_is_refused(version):
    shard = version / "shard-000002.tar"
    size = shard.stat().st_size
    shard.write_bytes(shard.read_bytes() + b"\0" * 512)
    assert (
        f"shard-000002.tar of dataset toy version v1: size {size + 512} bytes, manifest says {size}"
        in (read_until_refused(ShardDataset(version))[1])
    )
    shard.unlink()
    assert "shard-000002.tar of dataset toy version v1: missing" in read_until_refused(ShardDataset(version))[1]


def test_a_shard_holding_another_sample_count_than_its_manifest_entry_is_refused(tmp_path, version):
    body = json.loads((version / "manifest.json").read_text())
    body["shards"][3]["samples"] += 1
    body["samples"] += 1
    (version / "manifest.json").write_text(json.dumps(body))
    error = read_until_refused(ShardDataset(version))[1]
    assert "shard-000003.tar of dataset toy version v1: 6 samples, manifest says 7" in error


def test_a_manifest_of_another_version_a_truncated_one_or_one_not_matching_the_pinned_hash_is_refused(
    version, monkeypatch
):
    with pytest.raises(mf.DatasetError, match="holds version 'v1' of toy; expected 'v2'"):
        ShardDataset(version, version="v2")
    good = mf.load(version).sha256
    monkeypatch.setenv(mf.SHA256_VARIABLE, "0" * 64)
    with pytest.raises(mf.DatasetError, match=f"SHA-256 {good} does not match the expected 0000"):
        ShardDataset(version)
    monkeypatch.setenv(mf.SHA256_VARIABLE, good)
    assert ShardDataset(version).manifest.sha256 == good
    raw = (version / "manifest.json").read_bytes()
    (version / "manifest.json").write_bytes(raw[: len(raw) // 2])
    monkeypatch.delenv(mf.SHA256_VARIABLE)
    with pytest.raises(mf.DatasetError, match=r"manifest\.json: truncated or not JSON"):
        ShardDataset(version)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"shuffle_buffer": 0}, "shuffle_buffer: expected an integer >= 1; got 0"),
        ({"readahead": "2"}, "readahead: expected an integer >= 1; got '2'"),
        ({"rank": 1}, "rank, world_size: give both or neither"),
        ({"rank": 2, "world_size": 2}, r"rank: expected 0 <= rank < world_size \(2\); got 2"),
        ({"even": "yes"}, r"even: expected True \(equal shares per rank and worker\) or False; got 'yes'"),
    ],
)
def test_bad_reader_arguments_are_refused_with_the_argument_named(version, kwargs, message):
    with pytest.raises(ValueError, match=message):
        ShardDataset(version, **kwargs)


def shares(directory: Path, monkeypatch, **kwargs) -> list[list[str]]:
    """The keys each worker of 2 ranks x 2 DataLoader workers yields in epoch 0, in this process (the worker is
    what ``get_worker_info`` says, as inside a DataLoader worker)."""
    from types import SimpleNamespace

    from ai_storage_training.data import datasets

    out = []
    for rank in range(2):
        for worker in range(2):
            monkeypatch.setattr(datasets, "get_worker_info", lambda w=worker: SimpleNamespace(id=w, num_workers=2))
            dataset = ShardDataset(directory, rank=rank, world_size=2, **kwargs)
            out.append([sample["__key__"] for sample in dataset])
    return out


def test_every_worker_of_every_rank_yields_the_same_number_of_samples_of_an_uneven_version(uneven, monkeypatch):
    even = shares(uneven, monkeypatch)
    assert [len(keys) for keys in even] == [18] * 4  # the fewest any worker holds
    assert len({key for keys in even for key in keys}) == 72  # none twice
    every = shares(uneven, monkeypatch, even=False)
    assert sorted(len(keys) for keys in every) == [18, 24, 24, 24]
    assert sorted(key for keys in every for key in keys) == [f"img{i:04d}" for i in range(90)]


def test_two_ranks_all_reducing_every_batch_finish_an_epoch_of_an_uneven_version(uneven):
    """What DDP does: an all-reduce per batch. With unequal shares the rank with more batches waits for ever."""
    done = finish(ranks("epoch", "--data", str(uneven), "--allreduce"))
    assert len(done[0]) == len(done[1]) == 36 and not set(done[0]) & set(done[1])


def test_a_version_with_fewer_shards_than_ranks_x_workers_is_refused_naming_the_counts(version, monkeypatch):
    from types import SimpleNamespace

    from ai_storage_training.data import datasets

    monkeypatch.setattr(datasets, "get_worker_info", lambda: SimpleNamespace(id=0, num_workers=16))
    with pytest.raises(mf.DatasetError, match="has 16 shards for 2 ranks x 16 DataLoader workers: some would get"):
        list(ShardDataset(version, rank=0, world_size=2))
    assert list(ShardDataset(version, rank=0, world_size=2, even=False))  # workers without a shard: allowed
    with pytest.raises(mf.DatasetError, match="has 16 shards for 32 ranks x 16 DataLoader workers"):
        list(ShardDataset(version, rank=0, world_size=32, even=False))  # ranks without one: refused


def test_a_loader_position_saved_with_other_workers_is_refused_in_one_line(version):
    from torchdata.stateful_dataloader import StatefulDataLoader

    from ai_storage_training.data.datasets import load_loader_state

    def loader(workers: int) -> StatefulDataLoader:
        dataset = ShardDataset(version, rank=0, world_size=1, shuffle_buffer=4)
        return StatefulDataLoader(dataset, batch_size=3, num_workers=workers, collate_fn=lambda b: b)

    two = loader(2)
    batches = iter(two)
    next(batches), next(batches)
    state = two.state_dict()
    with pytest.raises(
        ValueError, match=r"^num_workers: the saved DataLoader position is of 2 worker\(s\), this loader has 1"
    ):
        load_loader_state(loader(1), state)
    again = loader(2)
    load_loader_state(again, state)  # the same count: torchdata takes it
    assert len(list(again)) > 0


def run_layout(directory: Path, world: int, workers: int, batches: int, state: dict | None, even: bool = True):
    """Every rank of a layout in turn, in this process: its loader resumed from ``state`` (a DataPosition's), run for
    ``batches`` batches per rank (0: to the end of the epoch); the keys trained and the position saved after."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    from ai_storage_training.data.position import DataPosition, worker_counts

    keys, yielded, position = [], [], None
    for rank in range(world):
        dataset = ShardDataset(directory, rank=rank, world_size=world, shuffle_buffer=8, even=even)
        loader = StatefulDataLoader(
            dataset, batch_size=4, num_workers=workers, collate_fn=lambda b: [s["__key__"] for s in b]
        )
        position = DataPosition(loader)
        if state is not None:
            position.load_state_dict(state)
        for n, batch in enumerate(loader, 1):
            keys += batch
            if n == batches:
                break
        yielded.append(worker_counts(loader.state_dict(), workers)[1])
    assert position is not None
    earlier = json.loads(state["position"])["segments"] if state else []
    segment = {"world": world, "workers": workers, "yielded": yielded}
    return keys, {"position": json.dumps({**position._identity(), "epoch": 0, "segments": [*earlier, segment]})}


@pytest.mark.parametrize("even", [True, False])
def test_resumed_on_other_layouts_every_sample_of_the_epoch_is_trained_once(version, even):
    """2 ranks x 2 workers, then 1 x 3, then 3 x 1 to the end of the epoch: no sample twice; with even shares the
    last layout's 3 workers take 17 each of the 52 left, and 1 is left out of the epoch."""
    first, state = run_layout(version, 2, 2, 3, None, even)
    second, state = run_layout(version, 1, 3, 5, state, even)
    third, _ = run_layout(version, 3, 1, 0, state, even)
    trained = first + second + third
    assert (len(first), len(second), len(third)) == (24, 20, 51 if even else 52)
    assert len(trained) == len(set(trained)) == (SAMPLES - 1 if even else SAMPLES)


def test_a_position_of_another_dataset_or_seed_is_refused_naming_it(version, tmp_path):
    from torchdata.stateful_dataloader import StatefulDataLoader

    from ai_storage_training.data.position import DataPosition

    _, state = run_layout(version, 1, 0, 2, None)
    other = ShardDataset(version, rank=0, world_size=1, shuffle_buffer=8, seed=1)
    with pytest.raises(ValueError, match=r"^seed: the checkpoint's data position is of 0, this dataset is 1"):
        DataPosition(StatefulDataLoader(other, batch_size=4)).load_state_dict(state)
