"""PrefetchingReader (order, bounded read-ahead, hits and misses) and the metrics endpoint's names."""

from __future__ import annotations

import threading
import time
import urllib.request

import pytest
from prometheus_client import REGISTRY

from ai_storage_training import CheckpointManager, PrefetchingReader, metrics
from ai_storage_training.data import reader

CONTRACT = {
    "ai_storage_checkpoint_save_seconds": "histogram",
    "ai_storage_checkpoint_restore_seconds": "histogram",
    "ai_storage_checkpoint_save_failures_total": "counter",
    "ai_storage_prefetch_hits_total": "counter",
    "ai_storage_prefetch_misses_total": "counter",
    "ai_storage_read_bytes_total": "counter",
    "ai_storage_read_seconds": "histogram",
}


def sample(name: str) -> float:
    return REGISTRY.get_sample_value(name) or 0.0


@pytest.fixture
def files(tmp_path):
    paths = []
    for i in range(12):
        path = tmp_path / f"part-{i:03d}.bin"
        path.write_bytes(bytes([i]) * (1000 + i))
        paths.append(path)
    return paths


@pytest.fixture
def slow_reads(monkeypatch):
    """Every read takes 50 ms; records how many are running at once and how many have started."""
    state = {"now": 0, "most": 0, "started": 0}
    lock = threading.Lock()
    real = reader._read

    def read(path):
        with lock:
            state["now"] += 1
            state["started"] += 1
            state["most"] = max(state["most"], state["now"])
        time.sleep(0.05)
        try:
            return real(path)
        finally:
            with lock:
                state["now"] -= 1

    monkeypatch.setattr(reader, "_read", read)
    return state


def test_files_come_back_in_order_with_their_bytes(files):
    got = list(PrefetchingReader(files, depth=3, workers=2))
    assert [p for p, _ in got] == files
    assert all(data == p.read_bytes() for p, data in got)


def test_a_job_that_outpaces_the_storage_misses_and_one_that_computes_hits(files, slow_reads):
    fast = PrefetchingReader(files, depth=4, workers=1)
    for _ in fast:
        pass  # no work between reads: one reader thread never gets ahead
    assert fast.misses >= 11 and fast.hit_ratio < 0.1
    hits, misses, read_bytes = (
        sample("ai_storage_prefetch_hits_total"),
        sample("ai_storage_prefetch_misses_total"),
        sample("ai_storage_read_bytes_total"),
    )
    busy = PrefetchingReader(files, depth=4, workers=1)
    for _ in busy:
        time.sleep(0.1)  # a training step longer than a read: the next files are ready
    assert busy.hits >= 10 and busy.hit_ratio > 0.8
    assert sample("ai_storage_prefetch_hits_total") - hits == busy.hits
    assert sample("ai_storage_prefetch_misses_total") - misses == busy.misses
    assert sample("ai_storage_read_bytes_total") - read_bytes == sum(p.stat().st_size for p in files)


def test_read_ahead_stays_within_depth(files, slow_reads):
    held = []
    for path, data in PrefetchingReader(files, depth=3, workers=8):
        held.append((path, len(data)))
        time.sleep(0.08)
        # Memory stays bounded: besides the file the job holds, at most `depth` are read or being read ahead.
        assert slow_reads["started"] - len(held) <= 3
    assert slow_reads["most"] <= 3  # never more than `depth` files read at once, however many workers
    assert len(held) == len(files)


def test_a_missing_file_raises_where_the_job_reads_it(files):
    files[5].unlink()
    seen = []
    with pytest.raises(FileNotFoundError):
        for path, _ in PrefetchingReader(files, depth=4):
            seen.append(path)
    assert seen == files[:5]


@pytest.mark.parametrize("arg", ["depth", "workers"])
def test_a_bad_depth_or_worker_count_is_refused_with_its_name(files, arg):
    with pytest.raises(ValueError, match=f"{arg}: expected a positive integer"):
        PrefetchingReader(files, **{arg: 0})


def test_a_scrape_shows_every_metric_of_the_contract(tmp_path, files):
    manager = CheckpointManager(tmp_path / "ckpt")
    manager.save(1, lambda d: (d / "w").write_bytes(b"w"))
    with manager.load():
        pass
    list(PrefetchingReader(files[:2]))
    server = metrics.serve(port=0, addr="127.0.0.1")
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{server.server_port}/metrics", timeout=10).read().decode()
    finally:
        server.shutdown()
    for name, kind in CONTRACT.items():
        assert f"# TYPE {name} {kind}" in text
    assert 'ai_storage_checkpoint_save_seconds_bucket{le="30.0"}' in text
    assert 'ai_storage_read_seconds_bucket{le="0.0025"}' in text
    assert "ai_storage_checkpoint_save_failures_total " in text


def test_the_port_comes_from_the_environment(monkeypatch):
    monkeypatch.delenv(metrics.PORT_VARIABLE, raising=False)
    assert metrics.port_from_environment() == 9095
    monkeypatch.setenv(metrics.PORT_VARIABLE, "9200")
    assert metrics.port_from_environment() == 9200
    monkeypatch.setenv(metrics.PORT_VARIABLE, "http")
    with pytest.raises(ValueError, match="AI_STORAGE_METRICS_PORT: expected a TCP port"):
        metrics.port_from_environment()
