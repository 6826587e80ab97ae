"""The staging init container for real: the command the team example's Volcano Job (stack dev-volcano, rendered
from the example project) gives its init container runs, as the kubelet would start it in the job's image, with
each mount path replaced by the directory standing in for it: the dataset claim is a directory of the real JuiceFS
mount (Redis, S3 endpoint), the hot volume a local directory. A cold copy, a verified skip on the second run, and
refusals on a source shard with one byte flipped and on a manifest that is not the one the job names; a refused
copy is never marked valid, and the trainer's `AI_STORAGE_DATASET_DIR` names the staged copy."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import harness

from ai_storage_training.data.pack import pack
from components.toolchain import render
from components.toolchain.render import ROOT
from tests.conftest import stack_file

EXAMPLE = ROOT / "examples" / "team-training"


def rendered_pod(tmp_path: Path, sha256: str) -> dict[str, Any]:
    """The pod template of the example's Volcano Job, staging the version whose manifest has ``sha256``."""
    config = stack_file(tmp_path, "dev-volcano", {"staging": {"manifestSha256": sha256}}, EXAMPLE)
    result = render.rendering("dev-volcano", render.run("dev-volcano", config, EXAMPLE))
    (job,) = [o for objs in result.manifests.values() for o in objs if o["kind"] == "Job"]
    return job["spec"]["tasks"][0]["template"]["spec"]


def local(value: str, mounts: dict[str, Path]) -> str:
    """``value`` with a container mount path replaced by the directory standing in for it."""
    for path, directory in mounts.items():
        if value == path or value.startswith(path + "/"):
            return str(directory) + value[len(path) :]
    return value


def run_init(container: dict[str, Any], mounts: dict[str, Path]) -> subprocess.CompletedProcess:
    """The init container's command and environment, run here with this checkout's library as the image's."""
    assert set(mounts) == {m["mountPath"] for m in container["volumeMounts"]}
    command = [local(arg, mounts) for arg in container["command"]]
    assert command[0] == "python"
    env = {e["name"]: local(e["value"], mounts) for e in container.get("env", [])}
    return subprocess.run(
        [sys.executable, *command[1:]],
        env=harness.subprocess_env(PYTHONPATH=str(ROOT), **env),
        capture_output=True,
        text=True,
        timeout=300,
    )


def shard_files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.name.startswith("shard-")}


def test_the_rendered_init_container_stages_skips_and_refuses_on_the_real_mount(mounted, tmp_path, as_installed):
    samples = tmp_path / "samples"
    samples.mkdir()
    for i in range(60):
        (samples / f"{i:04d}.wav").write_bytes(os.urandom(20_000 + i))
    claim = mounted.mountpoint / "datasets" / f"librispeech-{tmp_path.name}"  # the claim: /datasets/librispeech
    pack(samples, claim.parent, claim.name, "v3", shard_bytes=256 * 1024)
    source = claim / "v3"
    sha = hashlib.sha256((source / "manifest.json").read_bytes()).hexdigest()
    pod = rendered_pod(tmp_path, sha)
    (init,) = pod["initContainers"]
    (trainer,) = pod["containers"]
    hot = tmp_path / "hot"
    mounts = {"/data": claim, "/staged": hot}

    cold = run_init(init, mounts)  # a fresh hot volume: every shard is copied
    assert cold.returncode == 0, cold.stderr
    staged = Path(local(next(e["value"] for e in trainer["env"] if e["name"] == "AI_STORAGE_DATASET_DIR"), mounts))
    assert staged == hot / "v3"
    assert len(shard_files(source)) > 3 and shard_files(staged) == shard_files(source)
    assert (staged / "manifest.json").read_bytes() == (source / "manifest.json").read_bytes()
    copied = {p.name: p.stat().st_ino for p in staged.iterdir()}

    again = run_init(init, mounts)  # the volume already holds the verified version
    assert again.returncode == 0, again.stderr
    assert "already staged and verified" in again.stdout
    assert {p.name: p.stat().st_ino for p in staged.iterdir()} == copied  # nothing rewritten

    other = rendered_pod(tmp_path, "0" * 64)["initContainers"][0]  # a job naming another manifest
    refused = run_init(other, {"/data": claim, "/staged": tmp_path / "hot-3"})
    assert refused.returncode == 1, (refused.stdout, refused.stderr)
    assert "SHA-256" in refused.stderr and not (tmp_path / "hot-3" / "v3" / "manifest.json").exists()

    shard = sorted(source.glob("shard-*.tar"))[1]
    with open(shard, "r+b") as f:  # one byte flipped, size kept, on the JuiceFS mount
        f.seek(1000)
        byte = f.read(1)
        f.seek(1000)
        f.write(bytes([byte[0] ^ 0xFF]))
    fresh = {"/data": claim, "/staged": tmp_path / "hot-2"}
    refused = run_init(init, fresh)
    assert refused.returncode == 1, (refused.stdout, refused.stderr)
    assert shard.name in refused.stderr and "not marked valid" in refused.stderr
    assert not (tmp_path / "hot-2" / "v3" / "manifest.json").exists()  # the trainer would find no staged copy
