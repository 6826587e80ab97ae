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
import queue
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests" / "datapath"), str(REPO / "benchmarks")]  # components, harness

import checkpoint  # noqa: E402
import harness  # noqa: E402
import shaped_network  # noqa: E402
from conftest import generated_config  # noqa: E402  (the swap point)

MB = 1e6
MIB = 1024 * 1024
PASS_TIMEOUT = 600.0  # a read pass through FUSE that takes longer than this aborts the mount


# --------------------------------------------------------------------------------------------------
# readers


def read_files(
    paths: list[Path],
    readers: int,
    read_bytes: int,
    kind: str = "python",
    timeout: float | None = None,
    on_timeout=None,
) -> tuple[int, float]:
    """Read every file once with ``readers`` parallel workers; return (bytes, seconds).

    A pass that takes longer than ``timeout`` calls ``on_timeout`` (abort the mount's FUSE connection,
    so blocked readers fail instead of hanging) and raises.

    ``python``: each worker reads whole files with ``readinto`` of a ``read_bytes`` buffer (like a
    DataLoader worker reading a sample). ``cat``: each worker runs ``cat FILE > /dev/null``.
    """
    work: queue.Queue[Path] = queue.Queue()
    for p in paths:
        work.put(p)
    totals = [0] * readers
    errors: list[BaseException] = []

    def worker(idx: int) -> None:
        buf = bytearray(read_bytes)
        view = memoryview(buf)
        try:
            while True:
                try:
                    p = work.get_nowait()
                except queue.Empty:
                    return
                if kind == "cat":
                    subprocess.run(["cat", str(p)], stdout=subprocess.DEVNULL, check=True)
                    totals[idx] += p.stat().st_size
                    continue
                fd = os.open(p, os.O_RDONLY)
                try:
                    while n := os.readv(fd, [view]):
                        totals[idx] += n
                finally:
                    os.close(fd)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(readers)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    deadline = None if timeout is None else t0 + timeout
    for t in threads:
        t.join(None if deadline is None else max(0.0, deadline - time.perf_counter()))
    if any(t.is_alive() for t in threads):
        if on_timeout:
            on_timeout()
        for t in threads:
            t.join(30)
        raise harness.HarnessError(f"read pass over {len(paths)} files did not finish within {timeout}s")
    elapsed = time.perf_counter() - t0
    if errors:
        raise errors[0]
    return sum(totals), elapsed


# --------------------------------------------------------------------------------------------------
# options


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


# --------------------------------------------------------------------------------------------------
# the run


def mbps(nbytes: int, seconds: float) -> float:
    return round(nbytes / MB / seconds, 1) if seconds > 0 else float("inf")


def write_dataset(root: Path, files: int, size: int) -> tuple[int, float]:
    root.mkdir(parents=True, exist_ok=True)
    total, elapsed = 0, 0.0
    for i in range(files):
        data = os.urandom(size)  # generated outside the timed region
        t0 = time.perf_counter()
        with open(root / f"sample-{i:05d}.bin", "wb", buffering=0) as f:
            view = memoryview(data)
            for off in range(0, size, 4 * MIB):
                f.write(view[off : off + 4 * MIB])
        elapsed += time.perf_counter() - t0  # close() returns after the blocks are uploaded
        total += size
    return total, elapsed


def one_cycle(
    stack: harness.Stack,
    options: list[str],
    files: list[str],
    dataset_bytes: int,
    readers: int,
    read_bytes: int,
    kind: str,
    cycle: int,
    log,
    post_start: list[str],
) -> dict:
    name = f"read-r{readers}-c{cycle}"
    cache_root = stack.workdir / f"{name}-cache"
    shutil.rmtree(cache_root, ignore_errors=True)
    with stack.mount(options, name=name, cache_root=cache_root) as m:
        if post_start:  # what the platform's mount pod runs once mounted (the FUSE read-ahead)
            m.run_post_start(post_start)
        paths = [m.mountpoint / "dataset" / f for f in files]
        assert m.cached_bytes() == 0, "the cold pass must start from an empty cache"
        guard = {"timeout": PASS_TIMEOUT, "on_timeout": lambda: harness.abort_fuse_connection(m.mountpoint)}
        out: dict = {}

        harness.drop_page_cache()
        get0 = m.object_get_bytes()
        n, s = read_files(paths, readers, read_bytes, kind, **guard)
        out["cold"] = {
            "bytes": n,
            "seconds": round(s, 3),
            "MBps": mbps(n, s),
            "s3_get_bytes": int(m.object_get_bytes() - get0),
        }

        t0 = time.perf_counter()
        cached, refills = m.wait_cached(dataset_bytes, timeout=60), 0
        while cached < dataset_bytes and refills < 3:
            # The client drops blocks it cannot queue for the cache disk fast enough (juicefs_blockcache_drops,
            # seen with 4 cold readers); read again, untimed, to fill the cache before the warm pass.
            read_files(paths, readers, read_bytes, kind, **guard)
            cached, refills = m.wait_cached(dataset_bytes, timeout=60), refills + 1
        out["cache_fill"] = {
            "cached_bytes": cached,
            "waited_seconds": round(time.perf_counter() - t0, 2),
            "dropped_blocks": int(m.metric("juicefs_blockcache_drops")),
            "refill_passes": refills,
        }
        if cached < dataset_bytes:
            raise harness.HarnessError(f"the cache holds {cached} of {dataset_bytes} bytes after {refills} refills")

        harness.drop_page_cache()
        get1, hit1 = m.object_get_bytes(), m.metric("juicefs_blockcache_hit_bytes")
        n, s = read_files(paths, readers, read_bytes, kind, **guard)
        out["warm"] = {
            "bytes": n,
            "seconds": round(s, 3),
            "MBps": mbps(n, s),
            "s3_get_bytes": int(m.object_get_bytes() - get1),
            "cache_hit_bytes": int(m.metric("juicefs_blockcache_hit_bytes") - hit1),
        }
        if out["warm"]["s3_get_bytes"]:
            raise harness.HarnessError(f"the warm pass fetched {out['warm']['s3_get_bytes']} bytes from S3")

        n, s = read_files(paths, readers, read_bytes, kind, **guard)
        out["hot"] = {"bytes": n, "seconds": round(s, 3), "MBps": mbps(n, s)}

        blocks = m.cache_block_files()
        harness.drop_page_cache()
        n, s = read_files(blocks, readers, read_bytes, kind)
        out["limit"] = {"bytes": n, "files": len(blocks), "seconds": round(s, 3), "MBps": mbps(n, s)}
    log(
        f"  readers={readers} cycle={cycle} load={os.getloadavg()[0]:.1f}: "
        + "  ".join(f"{k} {out[k]['MBps']:.0f}" for k in ("cold", "warm", "hot", "limit"))
        + " MB/s"
    )
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


def median_pass(cycles: list[dict], key: str) -> float:
    return round(statistics.median(c[key]["MBps"] for c in cycles), 1)


def network(args: argparse.Namespace, mode: str) -> tuple[dict, object]:
    """The run's network record and its object store (None: moto on loopback)."""
    if mode == "loopback":
        return {"mode": "loopback"}, None
    shaped = functools.partial(shaped_network.shaped_moto_s3, rate_mbit=args.rate_mbit, delay_ms=args.delay_ms)
    return {"mode": "shaped", "rate_mbit": args.rate_mbit, "delay_ms": args.delay_ms}, shaped


def run(args: argparse.Namespace, mode: str) -> dict:
    log = lambda msg: print(msg, flush=True)
    net, object_store = network(args, mode)
    log(f"network: {net}")
    load_before = os.getloadavg()
    reason = harness.fuse_unavailable_reason()
    if reason:
        raise SystemExit(f"FUSE unavailable: {reason}")
    cfg = generated_config()
    options = apply_overrides(
        [o.strip() for o in args.mount_options.split(",") if o.strip()]
        if args.mount_options is not None
        else cfg["mount_options"],
        args.set or [],
        args.unset or [],
    )
    post_start = [] if args.no_post_start else cfg["mount_pod_post_start"]
    format_options = [o.strip() for o in (args.format_options or "").split(",") if o.strip()]
    size = int(args.file_mib * MIB)
    files = [f"sample-{i:05d}.bin" for i in range(args.files)]
    workdir = Path(tempfile.mkdtemp(prefix="datapath-bench-", dir=args.workdir))
    log(f"mount options: {options}")
    if format_options:
        log(f"format options: {format_options}")
    try:
        with harness.datapath_stack(
            cfg["redis_conf"], cfg["volume_secret"], workdir, format_options=format_options, object_store=object_store
        ) as stack:
            with stack.mount(options, name="writer") as w:
                nbytes, secs = write_dataset(w.mountpoint / "dataset", args.files, size)
            shutil.rmtree(workdir / "writer-cache", ignore_errors=True)  # the data now lives only in S3
            write = {"bytes": nbytes, "seconds": round(secs, 3), "MBps": mbps(nbytes, secs)}
            log(f"  write {args.files} x {args.file_mib} MiB: {write['MBps']} MB/s")

            per_readers = {}
            for readers in args.readers:
                cycles = [
                    one_cycle(
                        stack,
                        options,
                        files,
                        nbytes,
                        readers,
                        args.read_kib * 1024,
                        args.reader,
                        c,
                        log,
                        post_start,
                    )
                    for c in range(args.repeat)
                ]
                summary = {k: median_pass(cycles, k) for k in ("cold", "warm", "hot", "limit")}
                # ratios per cycle (passes seconds apart, so host noise mostly cancels), then the median
                for c in cycles:
                    c["warm_over_cold"] = round(c["warm"]["MBps"] / c["cold"]["MBps"], 2)
                    c["warm_over_limit"] = round(c["warm"]["MBps"] / c["limit"]["MBps"], 2)
                summary["warm_over_cold"] = round(statistics.median(c["warm_over_cold"] for c in cycles), 2)
                summary["warm_over_limit"] = round(statistics.median(c["warm_over_limit"] for c in cycles), 2)
                per_readers[str(readers)] = {"median": summary, "cycles": cycles}

            ckpt = (
                checkpoint_bench(
                    stack, options, args.ckpt_shards, int(args.ckpt_shard_mib * MIB), args.ckpt_repeat, log
                )
                if args.ckpt_shards
                else None
            )
    except BaseException:
        print(f"run failed; its logs are kept in {workdir}", file=sys.stderr)
        raise
    else:
        still = [line.split()[4] for line in open("/proc/self/mountinfo") if line.split()[4].startswith(str(workdir))]
        if still:  # never walk into a mount that may hang: leave the directory
            print(f"still mounted, not removing {workdir}: {still}", file=sys.stderr)
        else:
            shutil.rmtree(workdir, ignore_errors=True)

    version = harness.run_juicefs(["version"]).stdout.strip()
    return {
        "when": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "network": net,
        "config": {
            "mount_options": options,
            "format_options": format_options,
            "files": args.files,
            "file_mib": args.file_mib,
            "readers": args.readers,
            "reader": args.reader,
            "read_kib": args.read_kib,
            "repeat": args.repeat,
            "mount_pod_post_start": bool(post_start),
            "juicefs": version,
            "kernel": platform.release(),
            "cpus": os.cpu_count(),
        },
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


def main(argv: list[str] | None = None) -> int:
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


def save(out: Path, label: str, result: dict) -> None:
    """Add (or replace) the run ``label`` in the results file; other runs stay."""
    out.parent.mkdir(parents=True, exist_ok=True)
    doc = json.loads(out.read_text()) if out.exists() else {}
    doc.setdefault("unit", "MB/s = 10^6 bytes per second; medians over --repeat cycles")
    doc.setdefault("runs", {})[label] = result
    tmp = out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    os.replace(tmp, out)
    print(f"saved {out} [{label}]")


if __name__ == "__main__":
    sys.exit(main())
