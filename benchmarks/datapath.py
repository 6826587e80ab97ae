#!/usr/bin/env python3
"""JuiceFS cold/warm cache benchmark: the course's acceptance test, measured honestly.

Runs the platform's generated redis.conf, volume Secret, cold-tier mount options and the mount pod's
postStart (the FUSE read-ahead), from ``tests/datapath/conftest.py:generated_config``, the single swap
point, on the real binaries: redis-server, moto_server (S3), juicefs format/mount (FUSE). Two network
modes, reported separately: ``loopback`` (moto on 127.0.0.1) and ``shaped`` (moto in the project's own
network namespace behind a veth pair with a rate limit and added latency: ``shaped_network.py``).

1. write FILES x FILE_MIB through a mount, unmount, throw its cache away (data only in S3);
2. for each reader count R: mount with a fresh, empty cache dir and
   - cold:  drop the page cache, read everything (bytes come from S3; checked with the client's metrics)
   - warm:  wait until the local cache holds the dataset, drop the page cache, read again
            (no S3 GET allowed: checked), i.e. local-disk cache through FUSE
   - hot:   read again without dropping the page cache (reference only)
   - limit: drop the page cache, read the cache's block files directly with the same reader
            (the local-disk limit the warm pass can at best reach);
3. sharded checkpoint: SHARDS x SHARD_MIB written in parallel with atomic promotion (fsync, rename,
   marker), MB/s of the whole save.

MB/s means 10^6 bytes per second. Results go to benchmarks/results/datapath.json under ``LABEL:MODE``
(other runs already in the file are kept, so a tuning series can be compared side by side).
Needs root (drop_caches, the namespace) and /dev/fuse. Everything listens on 127.0.0.1 or the
namespace's 10.200.0.0/30 and is stopped and removed at the end.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import hashlib
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from datapath_reads import (  # the read side; these names stay importable from here too
    MB,
    MIB,
    PASS_TIMEOUT,
    REPO,
    mbps,
    median_pass,
    one_cycle,
    read_files,
    summarize,
    write_dataset,
)

# isort: split
# Importing datapath_reads put the repository and tests/datapath on sys.path.
import checkpoint
import harness
import shaped_network
from conftest import generated_config  # the swap point

__all__ = [
    "MB",
    "MIB",
    "PASS_TIMEOUT",
    "REPO",
    "apply_overrides",
    "checkpoint_bench",
    "main",
    "mbps",
    "median_pass",
    "network",
    "one_cycle",
    "read_files",
    "run",
    "save",
    "summarize",
    "table",
    "write_dataset",
]


def apply_overrides(options: list[str], sets: list[str], unsets: list[str]) -> list[str]:
    """``--set name=value`` replaces the entry called ``name`` (or appends it); ``--unset name`` drops it."""
    out = list(options)
    for name in unsets:
        out = [o for o in out if o.split("=", 1)[0] != name]
    for entry in sets:
        name = entry.split("=", 1)[0]
        idx = [i for i, o in enumerate(out) if o.split("=", 1)[0] == name]
        if idx:
            out[idx[0]] = entry
            for i in reversed(idx[1:]):
                del out[i]
        else:
            out.append(entry)
    return out


def checkpoint_bench(stack: harness.Stack, options: list[str], shards: int, shard_bytes: int, repeat: int, log) -> dict:
    data = [os.urandom(shard_bytes) for _ in range(shards)]
    digests = [hashlib.sha256(d).hexdigest() for d in data]  # a trainer hashes while serializing
    samples = []
    with stack.mount(options, name="ckpt") as m:
        root = m.mountpoint / "checkpoints"
        for step in range(1, repeat + 1):
            harness.drop_page_cache()
            t0 = time.perf_counter()
            checkpoint.write_checkpoint(root, step, data, digests=digests)
            samples.append(time.perf_counter() - t0)
        latest = checkpoint.latest_complete(root, hashes=False)
        assert latest and latest.name == f"step-{repeat:08d}"
    total = shards * shard_bytes
    result = {
        "shards": shards,
        "shard_bytes": shard_bytes,
        "seconds": [round(s, 3) for s in samples],
        "MBps_samples": [mbps(total, s) for s in samples],
        "MBps": mbps(total, statistics.median(samples)),
    }
    log(f"  checkpoint {shards} x {shard_bytes // MIB} MiB: {result['MBps']} MB/s (median of {repeat})")
    return result


def network(args: argparse.Namespace, mode: str) -> tuple[dict, object]:
    """The run's network record and its object store (None: moto on loopback)."""
    if mode == "loopback":
        return {"mode": "loopback"}, None
    shaped = functools.partial(shaped_network.shaped_moto_s3, rate_mbit=args.rate_mbit, delay_ms=args.delay_ms)
    return {"mode": "shaped", "rate_mbit": args.rate_mbit, "delay_ms": args.delay_ms}, shaped


def _options(args: argparse.Namespace, cfg: dict) -> tuple[list[str], list[str], list[str]]:
    """The run's mount options (generated, or given, with --set/--unset applied), the mount pod's postStart and
    the extra `juicefs format` options."""
    options = apply_overrides(
        [o.strip() for o in args.mount_options.split(",") if o.strip()]
        if args.mount_options is not None
        else cfg["mount_options"],
        args.set or [],
        args.unset or [],
    )
    post_start = [] if args.no_post_start else cfg["mount_pod_post_start"]
    format_options = [o.strip() for o in (args.format_options or "").split(",") if o.strip()]
    return options, post_start, format_options


def _measure(
    stack: harness.Stack, args: argparse.Namespace, options: list[str], post_start: list[str], log: Callable
) -> tuple[dict, dict, dict | None]:
    """Write the dataset, read it per reader count (``--repeat`` cycles each), then the checkpoint save."""
    size = int(args.file_mib * MIB)
    files = [f"sample-{i:05d}.bin" for i in range(args.files)]
    with stack.mount(options, name="writer") as w:
        nbytes, secs = write_dataset(w.mountpoint / "dataset", args.files, size)
    shutil.rmtree(stack.workdir / "writer-cache", ignore_errors=True)  # the data now lives only in S3
    write = {"bytes": nbytes, "seconds": round(secs, 3), "MBps": mbps(nbytes, secs)}
    log(f"  write {args.files} x {args.file_mib} MiB: {write['MBps']} MB/s")
    per_readers = {}
    for readers in args.readers:
        read_bytes = args.read_kib * 1024
        cycles = [
            one_cycle(stack, options, files, nbytes, readers, read_bytes, args.reader, c, log, post_start)
            for c in range(args.repeat)
        ]
        per_readers[str(readers)] = {"median": summarize(cycles), "cycles": cycles}
    ckpt = None
    if args.ckpt_shards:
        shard_bytes = int(args.ckpt_shard_mib * MIB)
        ckpt = checkpoint_bench(stack, options, args.ckpt_shards, shard_bytes, args.ckpt_repeat, log)
    return write, per_readers, ckpt


def _remove_unless_mounted(workdir: Path) -> None:
    with open("/proc/self/mountinfo") as mountinfo:
        still = [line.split()[4] for line in mountinfo if line.split()[4].startswith(str(workdir))]
    if still:  # never walk into a mount that may hang: leave the directory
        print(f"still mounted, not removing {workdir}: {still}", file=sys.stderr)
    else:
        shutil.rmtree(workdir, ignore_errors=True)


def run(args: argparse.Namespace, mode: str) -> dict:
    log = functools.partial(print, flush=True)
    net, object_store = network(args, mode)
    log(f"network: {net}")
    load_before = os.getloadavg()
    reason = harness.fuse_unavailable_reason()
    if reason:
        raise SystemExit(f"FUSE unavailable: {reason}")
    cfg = generated_config()
    options, post_start, format_options = _options(args, cfg)
    workdir = Path(tempfile.mkdtemp(prefix="datapath-bench-", dir=args.workdir))
    log(f"mount options: {options}")
    if format_options:
        log(f"format options: {format_options}")
    try:
        with harness.datapath_stack(
            cfg["redis_conf"], cfg["volume_secret"], workdir, format_options=format_options, object_store=object_store
        ) as stack:
            write, per_readers, ckpt = _measure(stack, args, options, post_start, log)
    except BaseException:
        print(f"run failed; its logs are kept in {workdir}", file=sys.stderr)
        raise
    _remove_unless_mounted(workdir)
    config = {
        "mount_options": options,
        "format_options": format_options,
        **{k: getattr(args, k) for k in ("files", "file_mib", "readers", "reader", "read_kib", "repeat")},
        "mount_pod_post_start": bool(post_start),
        "juicefs": harness.run_juicefs(["version"]).stdout.strip(),
        "kernel": platform.release(),
        "cpus": os.cpu_count(),
    }
    return {
        "when": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "network": net,
        "config": config,
        # this machine is shared: the load average says how quiet it was while measuring
        "loadavg_1m_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
        "write": write,
        "read": per_readers,
        "checkpoint": ckpt,
    }


def table(label: str, result: dict) -> str:
    lines = [
        f"## {label}",
        "| readers | cold | warm | limit | hot (page cache) | warm/cold | warm/limit |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for readers, r in result["read"].items():
        m = r["median"]
        lines.append(
            f"| {readers} | {m['cold']} | {m['warm']} | {m['limit']} | {m['hot']} | "
            f"{m['warm_over_cold']} | {m['warm_over_limit']} |"
        )
    lines.append(
        f"write: {result['write']['MBps']} MB/s; load average before/after: {result['loadavg_1m_before_after']}"
    )
    if result.get("checkpoint"):
        c = result["checkpoint"]
        lines.append(f"checkpoint ({c['shards']} x {c['shard_bytes'] // MIB} MiB, atomic): {c['MBps']} MB/s")
    return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    """The command line (see the module docstring)."""
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--files", type=int, default=256, help="number of files (default 256)")
    ap.add_argument("--file-mib", type=float, default=4, help="size of each file in MiB (default 4)")
    ap.add_argument(
        "--readers",
        type=lambda s: [int(x) for x in s.split(",")],
        default=[1, 4],
        help="comma-separated parallel reader counts (default 1,4)",
    )
    ap.add_argument(
        "--reader",
        choices=["python", "cat"],
        default="python",
        help="python: readinto a --read-kib buffer; cat: one `cat` per file (default python)",
    )
    ap.add_argument("--read-kib", type=int, default=1024, help="read size of the python reader (default 1024)")
    ap.add_argument("--repeat", type=int, default=3, help="cycles (fresh cache each) per reader count; median")
    ap.add_argument("--mount-options", help="replace the generated mount options (comma-separated entries)")
    ap.add_argument("--set", action="append", metavar="NAME=VALUE", help="override/add one mount option")
    ap.add_argument("--unset", action="append", metavar="NAME", help="drop one mount option")
    ap.add_argument("--format-options", help="extra `juicefs format` options, comma-separated (e.g. block-size=8192)")
    ap.add_argument(
        "--no-post-start",
        action="store_true",
        help="skip the mount pod's generated postStart (the FUSE read-ahead juicefs.cache.fuseReadAheadKib); "
        "for A/B runs only",
    )
    ap.add_argument("--ckpt-shards", type=int, default=8, help="checkpoint shards (0 skips; default 8)")
    ap.add_argument("--ckpt-shard-mib", type=float, default=32, help="MiB per shard (default 32)")
    ap.add_argument("--ckpt-repeat", type=int, default=3)
    ap.add_argument(
        "--modes",
        type=lambda s: s.split(","),
        default=["loopback", "shaped"],
        help="loopback: moto on 127.0.0.1; shaped: moto in its own network namespace behind a veth pair with "
        "--rate-mbit and --delay-ms (default: both, one after the other)",
    )
    ap.add_argument(
        "--rate-mbit",
        type=float,
        default=1000,
        help="shaped mode: link rate each way in Mbit/s (default 1000; see docs/datapath.md)",
    )
    ap.add_argument(
        "--delay-ms",
        type=float,
        default=20,
        help="shaped mode: latency added to every request/response round trip in ms (default 20)",
    )
    ap.add_argument("--workdir", default=None, help="parent dir for the run (must be a real disk, not tmpfs)")
    ap.add_argument("--label", default="default", help="name of this run in the results file")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "datapath.json")
    ap.add_argument("--no-save", action="store_true", help="print only")
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = parser()
    args = ap.parse_args(argv)

    unknown = set(args.modes) - {"loopback", "shaped"}
    if unknown:
        ap.error(f"--modes: unknown {sorted(unknown)}; expected loopback and/or shaped")
    for mode in args.modes:
        label = f"{args.label}:{mode}"
        result = run(args, mode)
        print(table(label, result))
        if not args.no_save:
            save(args.out, label, result)
    return 0


def add_link_arguments(parser: argparse.ArgumentParser) -> None:
    """The modes to run (loopback, the shaped link) and the shaped link's rate and delay, as the data-path
    benchmarks take them."""
    parser.add_argument("--modes", type=lambda s: s.split(","), default=["loopback", "shaped"])
    parser.add_argument("--rate-mbit", type=float, default=1000, help="shaped link rate each way (default 1000)")
    parser.add_argument("--delay-ms", type=float, default=20, help="shaped link round-trip delay (default 20)")
    parser.add_argument("--workdir", default=None, help="parent dir for the run (a real disk, not tmpfs)")


def save(out: Path, label: str, result: dict, unit: str = "medians over --repeat cycles") -> None:
    """Add (or replace) the run ``label`` in the results file; other runs stay."""
    out.parent.mkdir(parents=True, exist_ok=True)
    doc = json.loads(out.read_text()) if out.exists() else {}
    doc.setdefault("unit", f"MB/s = 10^6 bytes per second; {unit}")
    doc.setdefault("runs", {})[label] = result
    tmp = out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    os.replace(tmp, out)
    print(f"saved {out} [{label}]")


if __name__ == "__main__":
    sys.exit(main())
