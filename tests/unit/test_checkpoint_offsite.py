"""The offsite copy's script (rendered by ``checkpoint_offsite``), run under ``sh`` with a stand-in ``juicefs`` that
logs its calls: which checkpoint directories it sends, where, in which order, and how a failed copy ends the run.
The same script against the real ``juicefs sync``: tests/datapath/test_datapath_offsite.py."""

from __future__ import annotations

import subprocess

from components.protection.checkpoints import MARKER, offsite_script

FAILING_SYNC = """#!/bin/sh
echo "$@" >> "$SYNC_LOG"
case "$*" in *"--exclude {marker} "*{fail}/*) exit 1 ;; esac
"""


def offsite_run(tmp_path, checkpoints: dict[str, bool], fail: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    """The offsite script over a claim holding ``checkpoints`` (relative path: with its marker?), with a stand-in
    `juicefs` that logs its arguments and fails the data copy of ``fail``; the run and the logged calls."""
    for rel, complete in checkpoints.items():
        (tmp_path / "ckpt" / rel).mkdir(parents=True)
        if complete:
            (tmp_path / "ckpt" / rel / MARKER).write_text("{}")
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "juicefs").write_text(FAILING_SYNC.format(marker=MARKER, fail=fail))
    (tmp_path / "bin" / "juicefs").chmod(0o755)
    env = {
        "PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin",
        "CHECKPOINTS": f"{tmp_path / 'ckpt'}/",
        "DESTINATION": "s3://b/x/",
        "SECRETS": str(tmp_path / "none"),
        "SYNC_LOG": str(tmp_path / "sync.log"),
    }
    run = subprocess.run(["sh", "-c", offsite_script([])], env=env, capture_output=True, text=True)
    log = tmp_path / "sync.log"
    return run, log.read_text().splitlines() if log.exists() else []


def test_a_failed_data_copy_never_sends_the_marker_and_fails_the_run(tmp_path):
    """The copy of step 2's files fails (a `juicefs sync` exiting 1): its marker is not sent, step 1's is, and the
    run exits 1 so the CronJob's Job fails."""
    run, calls = offsite_run(tmp_path, {"step-00000001": True, "step-00000002": True}, fail="step-00000002")
    markers_sent = [line.split()[-1] for line in calls if "--include" in line]
    assert markers_sent == ["s3://b/x/step-00000001/"]
    assert run.returncode == 1 and "copy of step-00000002 failed" in run.stdout


def test_run_directories_go_offsite_at_their_relative_path_and_hidden_ones_never(tmp_path):
    """One directory per run (``<run>/step-*``) and the claim's root: each committed step goes to the same
    relative path, its data then its marker; staging, torn, refused and retired ones are never sent; a failed
    data copy of a run's step sends no marker of it and fails the run."""
    claim = {
        "step-00000005": True,
        "run-a/step-00000010": True,
        "run-a/step-00000011": True,  # its data copy fails
        "run-a/.step-00000020.tmp-x": True,  # a save in flight
        "run-b/step-00000030": False,  # torn
        "run-a/.refused/step-00000040.1700000000": True,
        ".retired/step-00000050.1700000000": True,
        ".hidden-run/step-00000060": True,
    }
    run, calls = offsite_run(tmp_path, claim, fail="run-a/step-00000011")
    pairs = [(line.split()[1], line.split()[-2], line.split()[-1]) for line in calls]  # after `sync`
    source = f"{tmp_path / 'ckpt'}/"
    sent = [("--exclude", f"{source}{rel}/", f"s3://b/x/{rel}/") for rel in ("step-00000005", "run-a/step-00000010")]
    assert pairs == [
        sent[0],
        ("--include", *sent[0][1:]),
        sent[1],
        ("--include", *sent[1][1:]),
        ("--exclude", f"{source}run-a/step-00000011/", "s3://b/x/run-a/step-00000011/"),
    ], calls
    assert "skip run-b/step-00000030: no COMPLETE marker" in run.stdout
    assert run.returncode == 1 and "copy of run-a/step-00000011 failed" in run.stdout


def test_the_offsite_copy_skips_checkpoints_without_their_marker_and_sends_the_marker_last():
    script = offsite_script(["--no-https"]).splitlines()
    check = next(i for i, line in enumerate(script) if f'[ ! -f "${{dir}}{MARKER}" ]' in line)
    first = next(i for i, line in enumerate(script) if f"--exclude {MARKER}" in line)
    last = next(i for i, line in enumerate(script) if f"--include {MARKER}" in line)
    assert check < first < last
    assert "juicefs sync --no-https" in script[first]
