"""Offsite checkpoint copy rehearsal on the real binaries: the generated CronJob script runs `juicefs sync` to the
S3 endpoint while a writer that writes straight into ``step-N/`` (no hidden staging directory: only the COMPLETE
marker tells a finished checkpoint from a partial one) is midway through another checkpoint, and again after
that writer was SIGKILLed; only the complete checkpoint is copied, and it restores byte-identical into an empty
directory."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

import checkpoint
import harness

from ai_storage_training.checkpoint import layout

SHARDS, SHARD_BYTES = 4, 1024 * 1024
MARKER = checkpoint.MARKER

DIRECT_WRITER = """
import os, sys, time
step, shards, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
os.makedirs(step)
for i in range(shards):
    with open(os.path.join(step, f"shard-{i:05d}-of-{shards:05d}.bin"), "wb") as f:
        if i == 2:  # half of the third shard, then it stalls until killed
            f.write(os.urandom(size // 2))
            f.flush()
            print("stalled", flush=True)
            time.sleep(600)
        f.write(os.urandom(size))
        os.fsync(f.fileno())
    print(f"wrote shard {i}", flush=True)
"""
"""A writer that creates ``step-N/`` itself and writes its shards there; it never gets to the marker."""


def digests(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def keys(s3: harness.S3Handle, prefix: str) -> list[str]:
    pages = s3.client().get_paginator("list_objects_v2").paginate(Bucket=s3.bucket, Prefix=prefix)
    return sorted(o["Key"] for page in pages for o in page.get("Contents", []))


def test_only_complete_checkpoints_go_offsite_and_restore_identical(stack, generated, tmp_path):
    root = tmp_path / "checkpoints"
    shards = [os.urandom(SHARD_BYTES) for _ in range(SHARDS)]
    done = checkpoint.write_checkpoint(root, 10, shards)
    expected = digests(done)

    # A writer midway through step 20, straight in step-00000020/: two shards written, the third half.
    partial = root / "step-00000020"
    writer = subprocess.Popen(
        [sys.executable, "-c", DIRECT_WRITER, str(partial), str(SHARDS), str(SHARD_BYTES)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        deadline, seen = time.monotonic() + 30, []
        while not any("stalled" in s for s in seen):
            seen.append(writer.stdout.readline())
            assert seen[-1] and time.monotonic() < deadline, f"the writer never reached its stall point: {seen}"
        assert sorted(p.name for p in partial.iterdir()) == [f"shard-0000{i}-of-00004.bin" for i in range(3)]

        # The generated script, run as the CronJob runs it; only the endpoint of DESTINATION changes.
        env = generated["offsite_env"]
        destination = harness.replace_hostport(env["DESTINATION"], f"{harness.LOOPBACK}:{stack.s3.port}")
        secrets = harness.key_files(tmp_path / "object-store", stack.secret["access-key"], stack.secret["secret-key"])

        def copy_offsite() -> str:
            run = harness.run_generated_script(
                generated["offsite_script"],
                tmp_path,
                CHECKPOINTS=f"{root}/",
                DESTINATION=destination,
                SECRETS=str(secrets),
            )
            assert run.returncode == 0, run.stdout + run.stderr
            assert "copied step-00000010" in run.stdout, run.stdout
            return run.stdout

        def partial_in_bucket() -> list[str]:
            return [k for k in keys(stack.s3, "") if "step-00000020" in k]

        out = copy_offsite()  # while the writer is midway
        assert partial_in_bucket() == [] and "skip step-00000020: no COMPLETE marker" in out
    finally:
        writer.kill()
        writer.wait(timeout=30)
    assert writer.returncode < 0  # killed, never finished
    out = copy_offsite()  # the next scheduled run, after the writer died mid-write
    assert partial_in_bucket() == [] and "skip step-00000020: no COMPLETE marker" in out

    prefix = destination.split(f"/{stack.s3.bucket}/", 1)[1]
    copied = keys(stack.s3, prefix)
    assert copied and all(k.startswith(f"{prefix}step-00000010/") for k in copied)  # nothing of step 20
    assert f"{prefix}step-00000010/{checkpoint.MARKER}" in copied

    restored = tmp_path / "restored"
    restored.mkdir()
    harness.run_juicefs(
        ["sync", "--no-https", f"{destination}step-00000010/", f"{restored}/"],
        env=harness.subprocess_env(
            AWS_ACCESS_KEY_ID=stack.secret["access-key"], AWS_SECRET_ACCESS_KEY=stack.secret["secret-key"]
        ),
    )
    assert digests(restored) == expected
    assert checkpoint.verify(restored)


def puts(s3: harness.S3Handle, since: int) -> list[str]:
    """The object keys the endpoint received a PUT for after byte ``since`` of its request log, in order."""
    log = s3.log_path.read_bytes()[since:].decode(errors="replace")
    found = re.findall(rf'"PUT /{re.escape(s3.bucket)}/(\S+?)(?:\?\S*)? HTTP', log)
    return [urllib.parse.unquote(k) for k in found]


def test_run_directories_go_offsite_at_their_relative_path_each_marker_last(stack, generated, tmp_path):
    """One directory per run (``<claim>/<run>/step-*``, as team jobs save) and the claim's root: exactly the
    committed checkpoints arrive, at the path they had in the claim, each marker after all of its files."""
    root = tmp_path / "checkpoints"
    part = SHARD_BYTES // 8
    committed = {
        "run-a/step-00000010": checkpoint.write_checkpoint(root / "run-a", 10, [os.urandom(part) for _ in range(2)]),
        "step-00000005": checkpoint.write_checkpoint(root, 5, [os.urandom(part) for _ in range(2)]),
    }
    staging = root / "run-a" / layout.staging_dir(20, "x")  # a save in flight (with a marker: hidden all the same)
    torn = root / "run-b" / layout.step_dir(30)  # killed between its rename and its marker
    refused = root / "run-a" / layout.REFUSED / "step-00000040.1700000000"
    for hidden in (staging, torn, refused, root / layout.RETIRED / "step-00000050.1700000000"):
        hidden.mkdir(parents=True)
        (hidden / "shard-00000-of-00001.bin").write_bytes(os.urandom(1024))
    for hidden in (staging, refused, root / layout.RETIRED / "step-00000050.1700000000"):
        (hidden / MARKER).write_text((committed["step-00000005"] / MARKER).read_text())

    env = generated["offsite_env"]
    destination = harness.replace_hostport(env["DESTINATION"], f"{harness.LOOPBACK}:{stack.s3.port}")
    destination += "per-run/"  # a prefix of its own: the stack's bucket is shared with the other tests
    secrets = harness.key_files(tmp_path / "object-store", stack.secret["access-key"], stack.secret["secret-key"])
    since = stack.s3.log_path.stat().st_size
    run = harness.run_generated_script(
        generated["offsite_script"], tmp_path, CHECKPOINTS=f"{root}/", DESTINATION=destination, SECRETS=str(secrets)
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "skip run-b/step-00000030: no COMPLETE marker" in run.stdout, run.stdout

    prefix = destination.split(f"/{stack.s3.bucket}/", 1)[1]
    expected = sorted(f"{prefix}{rel}/{f}" for rel, d in committed.items() for f in digests(d))
    assert keys(stack.s3, prefix) == expected  # nothing staged, torn, refused or retired
    order = puts(stack.s3, since)
    for rel in committed:
        sent = [k for k in order if k.startswith(f"{prefix}{rel}/")]
        assert sent and sent[-1] == f"{prefix}{rel}/{MARKER}" and sent.count(sent[-1]) == 1, (rel, sent)

    restored = tmp_path / "restored" / "run-a" / "step-00000010"  # back where it was, from its relative path
    restored.mkdir(parents=True)
    harness.run_juicefs(
        ["sync", "--no-https", f"{destination}run-a/step-00000010/", f"{restored}/"],
        env=harness.subprocess_env(
            AWS_ACCESS_KEY_ID=stack.secret["access-key"], AWS_SECRET_ACCESS_KEY=stack.secret["secret-key"]
        ),
    )
    assert digests(restored) == digests(committed["run-a/step-00000010"])
    assert checkpoint.verify(restored)
