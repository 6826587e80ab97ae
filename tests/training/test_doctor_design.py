"""The doctor's design profile off the data path: its stories stop at their share of --seconds whatever their
size, it refuses (exit 2, one line, nothing written) when its files would not fit or it cannot write, and every
report names the host. The data-path run (a real JuiceFS mount, local disk, a small tmpfs) is
tests/datapath/test_datapath_doctor_design.py."""

from __future__ import annotations

import os
import time

import pytest

from ai_storage_training import __main__ as entry
from ai_storage_training import cli
from ai_storage_training.doctor import design
from ai_storage_training.doctor.command import diagnose


def test_the_stories_stop_at_their_share_of_the_seconds_however_much_they_could_read(fio, tmp_path):
    started = time.monotonic()
    result = design.design_test(tmp_path, 512 * 1024 * 1024, seconds=10)  # 16 x 128 MiB at 4 KiB: ~2M reads
    elapsed = time.monotonic() - started
    assert elapsed < 10, elapsed
    stories = result["stories"]
    assert max(story["seconds"] for story in stories.values()) <= (10 - 3) // 3 + 0.5
    assert stories["rand-read"]["jobs"] == 16 and list(tmp_path.iterdir()) == []


def test_a_budget_over_the_free_space_is_refused_before_anything_is_written(tmp_path, monkeypatch, capsys):
    (tmp_path / "data.bin").write_bytes(b"x" * 4096)
    monkeypatch.setattr(design, "free_bytes", lambda where: 100 * 2**20)
    argv = ["doctor", str(tmp_path), "--profile", "design", "--read-mib", "128", "--json", str(tmp_path / "r.json")]
    assert cli.main(entry.SUBCOMMANDS, argv) == cli.EXIT_BAD_ARGUMENTS
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "need 141 MiB under" in line and "100 MiB are free" in line and "lower --read-mib" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.bin"]


def test_a_place_it_cannot_write_is_refused_naming_checkpoint_dir(tmp_path):
    where = tmp_path / "a-file"  # no directory can be made under a file (true for root too, unlike permissions)
    where.write_bytes(b"")
    with pytest.raises(design.DesignRefusedError, match="Not a directory; pass a writable --checkpoint-dir"):
        design.design_test(where, 16 * 2**20, seconds=10)


def test_every_report_names_the_host(tmp_path):
    report = diagnose(tmp_path, read_mib=1, checkpoint_mib=1, saves=1, use_fio=False)
    host = report["host"]
    assert host["cpus"] == os.cpu_count() and host["memory_bytes"] > 0 and host["page_cache_bytes"] >= 0
    assert report["profile"] == "quick" and "design" not in report
