#!/usr/bin/env python3
"""What the step timer costs a training loop: the same loop with and without ``StepTimer.iterate``.

The loop takes ready batches from a list (no data wait: the timer's own cost is all that differs) and spends
``--step-ms`` of CPU per step (a busy loop: the host's share of a GPU step). Each round runs ``--steps`` steps plain
and timed, in alternating order; the overhead is the median over ``--rounds`` rounds of (timed - plain) / plain.
Run twice: with this process's metrics, and with ``PROMETHEUS_MULTIPROC_DIR`` set (``--multiprocess``: every
counter increment writes the shared files, as in a job whose DataLoader workers report). The target is at most
1 % of step time. Results go to benchmarks/results/step_timer_overhead.json with the command line.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def busy(seconds: float) -> None:
    until = time.perf_counter() + seconds
    while time.perf_counter() < until:
        pass


def measure(steps: int, step_ms: float, rounds: int) -> dict:
    """This process's rounds (the metrics mode is the environment's)."""
    from ai_storage_training.steps import StepTimer

    batches = list(range(steps))
    overheads, plain_steps = [], []
    for r in range(rounds):
        seconds = {}
        for mode in ("plain", "timed") if r % 2 == 0 else ("timed", "plain"):
            source = StepTimer(log_every=10**9, log=lambda _: None).iterate(batches) if mode == "timed" else batches
            started = time.perf_counter()
            for _ in source:
                busy(step_ms / 1000)
            seconds[mode] = time.perf_counter() - started
        overheads.append((seconds["timed"] - seconds["plain"]) / seconds["plain"])
        plain_steps.append(seconds["plain"] / steps)
    return {
        "overhead_percent_median": round(100 * statistics.median(overheads), 3),
        "overhead_percent_rounds": [round(100 * o, 3) for o in overheads],
        "per_step_cost_us": round(1e6 * statistics.median(overheads) * statistics.median(plain_steps), 2),
        "plain_step_ms": round(1000 * statistics.median(plain_steps), 3),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=2000, help="steps per run (default 2000)")
    ap.add_argument("--step-ms", type=float, default=5, help="CPU per step in ms (default 5)")
    ap.add_argument("--rounds", type=int, default=7, help="rounds of plain and timed runs (default 7)")
    ap.add_argument("--child", choices=["local", "multiprocess"], help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "step_timer_overhead.json")
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(measure(args.steps, args.step_ms, args.rounds)))
        return 0
    results = {}
    for mode in ("local", "multiprocess"):
        with tempfile.TemporaryDirectory() as shared:
            env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
            if mode == "multiprocess":
                env["PROMETHEUS_MULTIPROC_DIR"] = shared
            argv_child = [sys.executable, __file__, "--child", mode, "--steps", str(args.steps)]
            argv_child += ["--step-ms", str(args.step_ms), "--rounds", str(args.rounds)]
            done = subprocess.run(argv_child, env=env, capture_output=True, text=True, check=True)
            results[mode] = json.loads(done.stdout.splitlines()[-1])
        print(
            f"  {mode:12} overhead {results[mode]['overhead_percent_median']} % of a {args.step_ms} ms step", flush=True
        )
    doc = {
        "when": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": "python benchmarks/step_timer_overhead.py " + " ".join(sys.argv[1:]),
        "device": "CPU",
        "config": {"steps": args.steps, "step_ms": args.step_ms, "rounds": args.rounds},
        "kernel": platform.release(),
        "cpus": os.cpu_count(),
        "target_percent": 1.0,
        "results": results,
        "within_target": all(r["overhead_percent_median"] <= 1.0 for r in results.values()),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"saved {args.out}; within 1 %: {doc['within_target']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
