"""A team's space held to its size by the real client: the platform's quota script, run as its Job runs it (the
metadata URL from a file), sets the quota on `/teams/<team>`; a mount of that directory alone (`--subdir`, as the
team's PersistentVolume mounts it) sees the quota as its size, and the quota counts what the team writes."""

from __future__ import annotations

import os
import subprocess

import harness

from components.teams.team_spaces import quota_script, space_quotas
from tests.conftest import stack_settings


def test_the_quota_job_holds_each_team_space_to_its_claim(stack, fuse_ok, generated, tmp_path):
    teams = stack_settings("dev").teams.workspaces
    quotas = space_quotas({t.name: t.space for t in teams})
    assert quotas == {"/teams/vision": 5, "/teams/speech": 4}  # dev's spaces: 5Gi and 4Gi
    secrets, client_env = tmp_path / "secrets", tmp_path / "client-env"
    secrets.mkdir()
    client_env.mkdir()
    (secrets / "metaurl").write_text(stack.secret["metaurl"])
    binary = os.path.dirname(harness.find_binary("juicefs"))
    env = {"PATH": f"{binary}:/usr/bin:/bin", "SECRETS": str(secrets), "CLIENT_ENV": str(client_env), "HOME": "/tmp"}
    for _ in range(2):  # a second run (the Job again) changes nothing and does not fail
        run = subprocess.run(["sh", "-c", quota_script(quotas)], env=env, capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stdout + run.stderr
    assert quota_row(stack)[:2] == ["/teams/vision", "5.0 GiB"]

    options = [*generated["mount_options"], "subdir=/teams/vision"]
    with stack.mount(options, name="vision-space") as space:
        (space.mountpoint / "notes.bin").write_bytes(os.urandom(2 * 1024 * 1024))
        os.sync()
        size = os.statvfs(space.mountpoint)
        assert size.f_blocks * size.f_frsize == 5 * 2**30  # the team sees its claim's size, not the volume's
    assert quota_row(stack)[2] == "2.0 MiB"  # what the team wrote counts against it


def quota_row(stack) -> list[str]:
    """`juicefs quota get`'s row for /teams/vision: path, size, used, ..."""
    table = harness.run_juicefs(["quota", "get", stack.secret["metaurl"], "--path", "/teams/vision"]).stdout
    (row,) = [line for line in table.splitlines() if "/teams/vision" in line]
    return [cell.strip() for cell in row.strip("|").split("|")]
