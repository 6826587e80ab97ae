#!/usr/bin/env python3
"""Is the GPU fed? Three runs of a small two-rank job (CPU, gloo) and the verdict ``doctor job`` gives each.

The job is ``tests/training/steps_job.py`` (a ShardDataset through a DataLoader with 2 workers per rank, a compute
step per batch, timed by ``ai_storage_training.steps.StepTimer``), started by torchrun with 2 ranks sharing one
``PROMETHEUS_MULTIPROC_DIR``; rank 0 saves the job's scrape, ``python -m ai_storage_training doctor job`` judges it.

- ``storage``: the dataset on a JuiceFS volume whose S3 is behind the shaped link (``shaped_network.py``, rate
  ``--rate-mbit``), read cold (an empty cache) by a job with a short compute step: expected storage-bound.
- ``cpu``: the same dataset on local disk, a transform of ``--transform-ms`` of CPU per sample: expected CPU-bound.
- ``compute``: the dataset on local disk, a long compute step (``--compute-ms``): expected compute-bound.

Results (each run's verdict, its figures and the per-second rates the promtool test turns into series) go to
benchmarks/results/step_verdicts.json with the command line. Needs root (the namespace) and /dev/fuse.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests" / "datapath"), str(REPO / "benchmarks")]

import datapath  # noqa: E402
import harness  # noqa: E402
from conftest import generated_config  # noqa: E402  (the swap point)

from ai_storage_training.data.pack import pack  # noqa: E402
from ai_storage_training.doctor.job import from_scrape  # noqa: E402

JOB = REPO / "tests" / "training" / "steps_job.py"
EXPECTED = {"storage": "storage-bound", "cpu": "CPU-bound", "compute": "compute-bound"}


def run_job(name: str, data: Path, workdir: Path, job_args: list[str]) -> dict:
    """One two-rank run; its scrape's figures and ``doctor job``'s verdict."""
    multiproc = workdir / f"{name}-multiproc"
    multiproc.mkdir()
    scrape = workdir / f"{name}.prom"
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(multiproc), "PYTHONPATH": str(REPO)}
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", str(JOB)]
    argv += ["--data", str(data), "--scrape", str(scrape), *job_args]
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=900)
    if done.returncode:
        raise SystemExit(f"{name}: the job failed:\n{done.stderr[-3000:]}")
    seconds = time.perf_counter() - started
    tier = "cold" if name == "storage" else "hot"
    doctor = [sys.executable, "-m", "ai_storage_training", "doctor", "job", str(scrape), "--json", "--tier", tier]
    verdict = json.loads(subprocess.run(doctor, capture_output=True, text=True, check=True, cwd=REPO).stdout)
    figures = from_scrape(scrape.read_text())
    lines = [line for line in done.stderr.splitlines() if line.startswith("step ")]
    print(f"  {name:8} {verdict['verdict']:14} {verdict['because']}", flush=True)
    return {
        "job_args": job_args,
        "tier": tier,
        "wall_seconds": round(seconds, 1),
        "verdict": verdict,
        "expected": EXPECTED[name],
        "totals": {k: round(v, 4) for k, v in figures.items()},
        "log_lines_rank0": lines[-2:],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", type=int, default=800, help="samples (default 800)")
    ap.add_argument("--sample-kib", type=int, default=64, help="bytes of each sample in KiB (default 64)")
    ap.add_argument("--steps", type=int, default=40, help="steps per rank (default 40: within one epoch)")
    ap.add_argument("--transform-ms", type=float, default=6, help="cpu run: CPU per sample in ms (default 6)")
    ap.add_argument("--compute-ms", type=float, default=80, help="compute run: step in ms (default 80)")
    datapath.add_link_arguments(ap)
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "step_verdicts.json")
    args = ap.parse_args(argv)
    args.rate_mbit = args.rate_mbit if args.rate_mbit != 1000 else 40  # a slow link unless told otherwise
    net, object_store = datapath.network(args, "shaped")
    cfg = generated_config()
    workdir = Path(tempfile.mkdtemp(prefix="step-verdicts-", dir=args.workdir))
    files = workdir / "files"
    files.mkdir()
    for i in range(args.samples):
        (files / f"sample{i:06d}.bin").write_bytes(os.urandom(args.sample_kib * 1024))
    pack(files, workdir / "local", "bench", "v1", shard_bytes=2 * 1024 * 1024)
    local = workdir / "local" / "bench" / "v1"
    common = ["--steps", str(args.steps), "--batch", "8", "--log-every", "10"]
    runs = {}
    with harness.datapath_stack(cfg["redis_conf"], cfg["volume_secret"], workdir, object_store=object_store) as stack:
        with stack.mount([], name="writer") as w:
            shutil.copytree(workdir / "local", w.mountpoint / "packed")
        shutil.rmtree(stack.workdir / "writer-cache", ignore_errors=True)  # the data now lives only in S3
        with stack.mount(cfg["mount_options"], name="cold") as m:
            if cfg["mount_pod_post_start"]:
                m.run_post_start(cfg["mount_pod_post_start"])
            harness.drop_page_cache()
            runs["storage"] = run_job(
                "storage", m.mountpoint / "packed" / "bench" / "v1", workdir, [*common, "--compute-ms", "5"]
            )
    runs["cpu"] = run_job(
        "cpu", local, workdir, [*common, "--transform-ms", str(args.transform_ms), "--compute-ms", "5"]
    )
    runs["compute"] = run_job("compute", local, workdir, [*common, "--compute-ms", str(args.compute_ms)])
    shutil.rmtree(workdir, ignore_errors=True)
    result = {
        "when": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": "python benchmarks/step_verdicts.py " + " ".join(sys.argv[1:]),
        "device": "CPU (gloo), no GPU: the GPU figures are absent",
        "network": net,
        "config": {k: v for k, v in vars(args).items() if k not in ("out", "workdir", "modes")},
        "kernel": platform.release(),
        "cpus": os.cpu_count(),
        "runs": runs,
        "all_as_expected": all(r["verdict"]["verdict"] == r["expected"] for r in runs.values()),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"saved {args.out}; verdicts as expected: {result['all_as_expected']}")
    return 0 if result["all_as_expected"] else 1


if __name__ == "__main__":
    sys.exit(main())
