"""A stand-in training job that uses the training library as a job does: it serves the training metrics
(``ai_storage_training.metrics.serve()``, port from ``$AI_STORAGE_METRICS_PORT``, on loopback here), prints
``serving``, then runs
one phase per line of stdin and answers ``done`` after each:

- ``read DIR DEPTH WORKERS SECONDS``: every file of DIR, in name order, through a PrefetchingReader with DEPTH
  files ahead and WORKERS threads, the job working SECONDS on each file;
- ``checkpoint DIR``: a save and a restore with a CheckpointManager in DIR, and a save that fails.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root, when run as a program

from ai_storage_training import CheckpointManager, PrefetchingReader, metrics


def read(directory: str, depth: str, workers: str, seconds: str) -> None:
    files = sorted(p for p in Path(directory).iterdir() if p.is_file())
    for _ in PrefetchingReader(files, depth=int(depth), workers=int(workers)):
        time.sleep(float(seconds))


def checkpoint(directory: str) -> None:
    manager = CheckpointManager(directory, keep=2)
    step = (manager.latest().step + 1) if manager.latest() else 1
    manager.save(step, lambda path: (path / "weights.bin").write_bytes(b"w" * 4096))
    with manager.load() as restored:
        assert restored is not None and (restored.path / "weights.bin").read_bytes() == b"w" * 4096

    def broken(path: Path) -> None:
        raise OSError("disk full")

    try:
        manager.save(step + 1, broken)
    except OSError:
        pass


def main() -> None:
    metrics.serve(addr="127.0.0.1")
    print("serving", flush=True)
    for line in sys.stdin:
        command, *args = line.split()
        {"read": read, "checkpoint": checkpoint}[command](*args)
        print("done", flush=True)


if __name__ == "__main__":
    main()
