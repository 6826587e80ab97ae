"""A smoke run of the checkpoint benchmark (``benchmarks/checkpoint_staging.py``) on the CPU: every part runs, and
the torn-checkpoint check holds for every way of saving it compares."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[2]


def test_the_checkpoint_benchmark_runs_every_part_and_finds_no_torn_checkpoint(tmp_path):
    out = tmp_path / "result.json"
    command = [sys.executable, str(REPO / "benchmarks" / "checkpoint_staging.py"), "--state-mib", "8"]
    command += ["--repeat", "1", "--dir", str(tmp_path), "--keep-page-cache", "--out", str(out)]
    subprocess.run(command, check=True, capture_output=True, timeout=300)
    result = json.loads(out.read_text())
    assert result["device"] == "cpu" and result["state_mib"] > 0 and result["tensors"] > 0
    assert {name: part["tensors"] for name, part in result["torn"].items() if name != "seconds"} == {
        "library": result["tensors"],
        "library_with_DefaultStager_async": result["tensors"],
        "overlap_with_guard": result["tensors"],
    }
    assert [part["differing"] for name, part in result["torn"].items() if name != "seconds"] == [0, 0, 0]
    assert result["restore"]["cache_dropped"] is False  # --keep-page-cache: the figures say they are warm
    for part, figure in (("blocked", "library_save_dcp"), ("durable", "dd_s"), ("restore", "validated_s")):
        assert result[part][figure] > 0
    assert not list(tmp_path.glob("checkpoint-staging-*"))  # its scratch directory is removed
