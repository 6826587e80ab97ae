"""Shared fixtures: render a stack under Pulumi's mock engine, with extra config on top of its stack file."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.toolchain import mock_engine, render

Render = Callable[..., tuple[render.Rendering, render.RecordingMonitor]]
Build = Callable[[Callable[[], object]], tuple[render.Rendering, render.RecordingMonitor]]

STACKS = sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in render.ROOT.glob("Pulumi.*.yaml"))
"""Every stack in the repository (one ``Pulumi.<stack>.yaml`` each)."""


def stack_file(tmp: Path, stack: str, overrides: dict[str, Any], root: Path = render.ROOT) -> Path:
    """A copy of ``root/Pulumi.<stack>.yaml`` with ``overrides`` (section -> value) deep-merged into its config."""
    from components.common.sections import merge

    project = render.project_name(root)
    data = yaml.safe_load((root / f"Pulumi.{stack}.yaml").read_text()) or {}
    config = data.setdefault("config", {})
    for key, value in overrides.items():
        full = f"{project}:{key}"
        current = config.get(full)
        config[full] = merge(current, value) if isinstance(current, dict) and isinstance(value, dict) else value
    path = tmp / f"Pulumi.{stack}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def stack_settings(stack: str, overrides: dict[str, Any] | None = None) -> Any:
    """The settings of a stack as its program loads them: ``Pulumi.<stack>.yaml`` over its profile (S3's region
    from ``aws:region``), ``overrides`` on top."""
    return render.stack_settings(render.ROOT / f"Pulumi.{stack}.yaml", stack, overrides)


@pytest.fixture
def render_stack(tmp_path: Path) -> Render:
    """``render_stack("dev", objectStore={"backend": "s3"})`` -> (Rendering, RecordingMonitor)."""

    def run(stack: str = "dev", **overrides: Any) -> tuple[render.Rendering, render.RecordingMonitor]:
        return render.rendered(stack, stack_file(tmp_path, stack, overrides))

    return run


@pytest.fixture(scope="session")
def as_installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Make ``ai_storage_platform``, the installed name the team example imports, load this checkout's
    components/."""
    path = tmp_path_factory.mktemp("site")
    (path / "ai_storage_platform").symlink_to(render.ROOT / "components", target_is_directory=True)
    sys.path.insert(0, str(path))
    yield
    sys.path.remove(str(path))


TEAM_EXAMPLE = render.ROOT / "examples" / "team-training"
"""The team example: a Pulumi project of its own, importing the installed package."""


@pytest.fixture
def render_team(tmp_path: Path, as_installed: None) -> Render:
    """``render_team("dev-volcano", dataset={"size": "1Ti"})``: a stack of the team example with config overrides."""

    def run(stack: str = "dev", **overrides: object) -> tuple[render.Rendering, render.RecordingMonitor]:
        config = stack_file(tmp_path, stack, overrides, TEAM_EXAMPLE)
        monitor = render.run(stack, config, TEAM_EXAMPLE)
        return render.rendering(stack, monitor), monitor

    return run


@pytest.fixture
def build() -> Build:
    """``build(lambda: MetadataEngine("meta", MetadataEngineArgs(MetadataSettings())))`` -> (Rendering,
    RecordingMonitor): one component (or a few) built from hand-made args under the mock engine, without any
    stack file. Values the program passes to ``pulumi.export`` land in ``Rendering.outputs``."""

    def run(program: Callable[[], object]) -> tuple[render.Rendering, render.RecordingMonitor]:
        def main() -> None:
            program()

        monitor = mock_engine.run_program(main)
        return render.rendering("test", monitor), monitor

    return run


def objects(result: render.Rendering, kind: str) -> list[dict[str, Any]]:
    """Every rendered Kubernetes object of ``kind``."""
    return [o for objs in result.manifests.values() for o in objs if o.get("kind") == kind]


def by_name(result: render.Rendering, kind: str, name: str) -> dict[str, Any]:
    """The rendered object of ``kind`` named ``name``."""
    found = [o for o in objects(result, kind) if o["metadata"]["name"] == name]
    assert found, f"no {kind} named {name} in the render"
    return found[0]


def dumps(value: Any) -> str:
    """Stable JSON text, for asserting on whole inputs."""
    return json.dumps(value, sort_keys=True)


@pytest.fixture(scope="module")
def packed_dataset(tmp_path_factory):
    """A packed dataset version of 400 samples of 16 KiB in 13 shards (the step tests' data)."""
    from ai_storage_training.data.pack import pack

    root = tmp_path_factory.mktemp("steps-data")
    (root / "files").mkdir()
    for i in range(400):
        (root / "files" / f"s{i:05d}.bin").write_bytes(os.urandom(16 * 1024))
    pack(root / "files", root / "packed", "steps", "v1", shard_bytes=512 * 1024)
    return root / "packed" / "steps" / "v1"


def external_dataset_claims(profile: str = "dev") -> dict[str, Any]:
    """Overrides giving ``profile``'s training runtimes ``externalClaim: true``: for variants without the Fluid
    dataset the runtimes' claims name (the claim then has to come from elsewhere)."""
    runtimes = yaml.safe_load((render.ROOT / "stacks" / f"{profile}.yaml").read_text())["training"]["runtimes"]
    return {"training": {"runtimes": [{**r, "externalClaim": True} for r in runtimes]}}


def scoped_policy(bucket: str, prefix: str) -> dict[str, Any]:
    """The IAM policy of a read-write scope of ``bucket`` on ``prefix``, written out as docs/components/object_store.md
    describes it (the expectation of the tests that read a scope's policy; not computed by the code they test)."""
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "ObjectsUnderPrefix",
                "Effect": "Allow",
                "Action": [
                    "s3:GetObject",
                    "s3:PutObject",
                    "s3:DeleteObject",
                    "s3:AbortMultipartUpload",
                    "s3:ListMultipartUploadParts",
                ],
                "Resource": f"arn:aws:s3:::{bucket}/{prefix}*",
            },
            {
                "Sid": "ListUnderPrefix",
                "Effect": "Allow",
                "Action": ["s3:ListBucket"],
                "Resource": f"arn:aws:s3:::{bucket}",
                "Condition": {"StringLike": {"s3:prefix": [f"{prefix}*"]}},
            },
            {
                "Sid": "BucketLocation",
                "Effect": "Allow",
                "Action": ["s3:GetBucketLocation"],
                "Resource": f"arn:aws:s3:::{bucket}",
            },
        ],
    }
