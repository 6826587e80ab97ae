"""The datasets benchmark's plot: drawn from the committed results, refused on results it cannot plot, and shown in
the docs beside the table."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "plot_datasets.py"
RESULTS = ROOT / "benchmarks" / "results" / "datasets.json"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def plot(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120)


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from the PNG's IHDR chunk (after checking the signature)."""
    head = path.read_bytes()[:24]
    assert head[:8] == PNG_SIGNATURE, f"{path} is not a PNG"
    assert head[12:16] == b"IHDR"
    return struct.unpack(">II", head[16:24])


def test_plots_the_committed_results_into_a_png(tmp_path):
    out = tmp_path / "plot.png"
    proc = plot("--results", str(RESULTS), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    width, height = png_size(out)
    assert width >= 1000 and height >= 500, (width, height)


def test_results_missing_a_link_are_refused_in_one_line_naming_the_key(tmp_path):
    runs = json.loads(RESULTS.read_text())
    del runs["runs"]["shaped"]["read"]["packed"]["evicted"]
    bad = tmp_path / "datasets.json"
    bad.write_text(json.dumps(runs))
    out = tmp_path / "plot.png"
    proc = plot("--results", str(bad), "--out", str(out))
    assert proc.returncode != 0
    message = proc.stderr.strip()
    assert "runs.shaped.read.packed.evicted.MBps" in message and "--modes shaped" in message, message
    assert "Traceback" not in message and len(message.splitlines()) == 1, message
    assert not out.exists()


def test_the_docs_show_the_committed_plot_beside_the_table():
    page = (ROOT / "docs" / "training.md").read_text()
    assert "](datasets-benchmark.png)" in page
    assert page.index("| loopback | **packed / small** |") < page.index("](datasets-benchmark.png)")
    png_size(ROOT / "docs" / "datasets-benchmark.png")
