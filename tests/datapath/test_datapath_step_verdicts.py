"""Is the GPU fed, on the real data path: benchmarks/step_verdicts.py's three runs of a two-rank job (CPU, gloo), at
a smaller size. A dataset on a JuiceFS volume read cold over the shaped link is storage-bound, the same data on
local disk with a CPU-heavy transform CPU-bound, with a long compute step compute-bound: each verdict from
``doctor job`` on that run's metrics scrape."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import step_verdicts


def test_three_runs_get_their_verdicts(root, fuse_ok, tmp_path):
    out = tmp_path / "verdicts.json"
    # The compute run's steps long enough (250 ms) that the loaders' one-off stalls on a busy CPU stay far below the
    # 20 % input share (the default 80 ms was judged storage-bound at a load average of 8 to 29 on 2 cores).
    argv = ["--samples", "480", "--steps", "25", "--compute-ms", "250", "--out", str(out), "--workdir", str(tmp_path)]
    status = step_verdicts.main(argv)
    runs = json.loads(out.read_text())["runs"]
    verdicts = {name: run["verdict"]["verdict"] for name, run in runs.items()}
    assert verdicts == {"storage": "storage-bound", "cpu": "CPU-bound", "compute": "compute-bound"}
    assert status == 0
    storage = runs["storage"]["verdict"]
    assert storage["figures"]["loader_read_share"] > 0.5 and "warm the Fluid dataset" in storage["next_step"]
    assert runs["cpu"]["verdict"]["figures"]["loader_read_share"] < 0.5
