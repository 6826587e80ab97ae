"""A team's offsite copy on the real binaries, with only what the platform delivered into its namespace: the team
example's CronJob (rendered from the example project) takes its prefix of the bucket and its sync flags from the
platform's ``offsite-target`` ConfigMap (rendered from the platform's dev stack), its keys from files, and
Kubernetes' ``$(VAR)`` expansion builds its destination; `juicefs sync` puts the complete checkpoint the job saved
in its own directory of the claim (``<job name>/step-*``, where the restore test reads) under
``checkpoints/<namespace>/<claim>/<job name>/`` of the S3 endpoint."""

from __future__ import annotations

import os
import re
from typing import Any

import checkpoint
import harness

from components.teams import tenants
from components.toolchain import render
from components.toolchain.render import ROOT
from components.training.trainer import CHECKPOINT_PATH


def objects(result: render.Rendering) -> list[dict[str, Any]]:
    return [o for objs in result.manifests.values() for o in objs]


def expanded_env(env: list[dict[str, Any]], config_maps: dict[str, dict[str, str]]) -> dict[str, str]:
    """A container's environment as the kubelet builds it: ``configMapKeyRef`` values read, ``$(NAME)`` replaced by
    a variable defined before it (left as is otherwise), in order."""
    out: dict[str, str] = {}
    for e in env:
        if "valueFrom" in e:
            ref = e["valueFrom"]["configMapKeyRef"]
            out[e["name"]] = config_maps[ref["name"]][ref["key"]]
        else:
            out[e["name"]] = re.sub(r"\$\((\w+)\)", lambda m: out.get(m.group(1), m.group(0)), e["value"])
    return out


def test_a_team_copies_its_checkpoints_under_its_prefix_with_the_delivered_target(stack, tmp_path, as_installed):
    platform = render.rendering("dev", render.run("dev"))
    meta = {"name": tenants.OFFSITE_TARGET, "namespace": "vision"}
    (target,) = [o for o in objects(platform) if o["kind"] == "ConfigMap" and o["metadata"] | meta == o["metadata"]]
    team = render.rendering("dev", render.run("dev", root=ROOT / "examples" / "team-training"))
    (job,) = [o for o in objects(team) if o["kind"] == "CronJob" and o["metadata"]["name"] == "checkpoints-offsite"]
    (copy,) = job["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    env = expanded_env(copy["env"], {tenants.OFFSITE_TARGET: target["data"]})
    assert env["SYNC_FLAGS"] == "--no-https"  # MinIO on dev speaks plain HTTP inside the cluster
    assert env["DESTINATION"].endswith("/ai-datasets-dev/checkpoints/vision/checkpoints/")

    # The job saves under its own directory of the claim, the one the rendered restore test reads.
    (restore,) = [
        o for o in objects(team) if o["kind"] == "CronJob" and o["metadata"]["name"].endswith("-restore-test")
    ]
    (test,) = restore["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    run_dir = test["command"][-1].removeprefix(CHECKPOINT_PATH + "/")
    assert run_dir and "/" not in run_dir, test["command"]
    root = tmp_path / "checkpoints"
    done = checkpoint.write_checkpoint(root / run_dir, 30, [os.urandom(256 * 1024) for _ in range(2)])
    destination = harness.replace_hostport(env["DESTINATION"], f"{harness.LOOPBACK}:{stack.s3.port}")
    destination = destination.replace("/ai-datasets-dev/", f"/{stack.s3.bucket}/")
    delivered = tmp_path / "offsite-credentials"  # the delivered Secret, mounted as files
    secrets = harness.key_files(delivered, stack.secret["access-key"], stack.secret["secret-key"])
    run = harness.run_generated_script(
        copy["command"][-1],
        tmp_path,
        **{k: v for k, v in env.items() if k not in ("HOME", "DESTINATION", "CHECKPOINTS", "SECRETS")},
        CHECKPOINTS=f"{root}/",
        DESTINATION=destination,
        SECRETS=str(secrets),
    )
    assert run.returncode == 0, run.stdout + run.stderr
    listing = stack.s3.client().get_paginator("list_objects_v2")
    pages = listing.paginate(Bucket=stack.s3.bucket, Prefix="checkpoints/vision/")
    copied = sorted(o["Key"] for page in pages for o in page.get("Contents", []))
    step = f"checkpoints/vision/checkpoints/{run_dir}/step-00000030/"
    assert copied and all(k.startswith(step) for k in copied), copied
    assert {k.removeprefix(step) for k in copied} == {p.name for p in done.iterdir()}
