"""No team namespace holds a key to the platform: every stack in the repo and the team example are rendered with
the secret values revealed, and every object in a team namespace (Secrets, ConfigMaps, workloads, and the
PersistentVolumes vended to it) is compared against the platform's secret values: the metadata password, the
metadata URL, the object store's admin and root keys, the JuiceFS volume's keys."""

from __future__ import annotations

import functools
import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulumi
import pytest
from pulumi.runtime.settings import get_root_resource

from components.backends.metadata_engines import redis
from components.backends.object_stores import ceph_rgw
from components.teams import tenants
from components.tiers import juicefs
from components.toolchain import mock_engine, render
from components.training import fluid_dataset
from tests.conftest import STACKS, TEAM_EXAMPLE, stack_file, stack_settings

# The platform's secrets live in these Secrets (in the platform's own namespaces): the JuiceFS volume Secret and
# the client's environment (metadata URL with its password, the volume's bucket keys), Redis' config (password),
# the object store's credentials, MinIO's root user, the RGW bucket owner's keys, and Fluid's dataset credentials
# (not the scoped keys the object store makes for each team: those belong in the team's namespace).
PLATFORM_SECRETS = (
    juicefs.SECRET_NAME,
    juicefs.CLIENT_ENV_SECRET,
    redis.CONFIG_SECRET,
    "object-store-credentials",
    "minio-root",
    f"rgw-{ceph_rgw.RGW_USER}-keys",
    fluid_dataset.CREDENTIALS_SECRET,
)

PUBLIC_KEYS = ("name", "storage", "bucket", "endpoint")
"""Keys of those Secrets that name where things are, not how to reach them."""


class Revealed(str):
    """A value the program marked secret, kept (only in this test) to compare against."""


def _revealing(original: Any) -> Any:
    def clean(value: Any) -> Any:
        if isinstance(value, dict) and value.get(mock_engine._SIG) == mock_engine.SECRET_SIGNATURE:
            inner = value.get("value")
            return Revealed(inner) if isinstance(inner, str) else _reveal_all(original(inner))
        return original(value)

    return clean


def _reveal_all(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _reveal_all(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_reveal_all(v) for v in value]
    return Revealed(value) if isinstance(value, str) else value


async def _revealed_exports() -> dict[str, Any]:
    exported = {}
    for key, value in getattr(get_root_resource(), "outputs", {}).items():
        exported[key] = await pulumi.Output.from_input(value).future()
    return exported


@pytest.fixture(scope="module")
def revealed() -> Iterator[None]:
    """Render with secret values revealed (stack outputs included), for this module only."""
    patch = pytest.MonkeyPatch()
    patch.setattr(mock_engine, "clean", _revealing(mock_engine.clean))
    patch.setattr(mock_engine, "_exports", _revealed_exports)
    yield
    patch.undo()


PROBE = {"name": "probe", "datasets": ["corpus"], "space": "1Gi", "fluidDatasets": ["datasets"]}
"""A team for the stacks whose files vend none (staging, prod: S3, Sentinels), reading their Fluid dataset."""


@functools.cache
def platform(stack: str) -> render.Rendering:
    """The stack as its files say; with the PROBE team when they vend no team namespace."""
    result = render.rendering(stack, render.run(stack))
    if team_namespaces(result):
        return result
    with tempfile.TemporaryDirectory() as tmp:
        config = stack_file(Path(tmp), stack, {"teams": {"workspaces": [PROBE]}})
        return render.rendering(stack, render.run(stack, config))


def leaves(value: Any) -> Iterator[str]:
    """Every string in an object (mapping keys too), and the JSON of any embedded document."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield str(k)
            yield from leaves(v)
    elif isinstance(value, list):
        for v in value:
            yield from leaves(v)
    elif isinstance(value, str):
        yield value


def platform_secrets(result: render.Rendering) -> set[str]:
    """The values of the platform's own Secrets (outside team namespaces) that the program marked secret."""
    teams = team_namespaces(result)
    found = set()
    for obj in (o for objs in result.manifests.values() for o in objs):
        meta = obj["metadata"]
        if obj["kind"] != "Secret" or meta.get("namespace") in teams:
            continue
        if meta["name"].startswith(PLATFORM_SECRETS):
            values = [v for k, v in obj.get("stringData", {}).items() if k not in PUBLIC_KEYS]
            # An empty value hides nothing (the admin keys of an S3 store, which has none, are empty).
            found |= {v for v in leaves(values) if isinstance(v, Revealed) and v}
    return found


def team_namespaces(result: render.Rendering) -> set[str]:
    return {
        o["metadata"]["name"]
        for o in render_objects(result)
        if o["kind"] == "Namespace" and tenants.TEAM_LABEL in o["metadata"].get("labels", {})
    }


def render_objects(result: render.Rendering) -> list[dict[str, Any]]:
    return [o for objs in result.manifests.values() for o in objs]


def in_team_namespaces(result: render.Rendering, teams: set[str]) -> list[dict[str, Any]]:
    """Every object in a team namespace, the namespaces themselves, and the volumes vended to them."""
    return [
        o
        for o in render_objects(result)
        if o["metadata"].get("namespace") in teams or tenants.TEAM_LABEL in o["metadata"].get("labels", {})
    ]


def leaks(objects: list[dict[str, Any]], secrets: set[str]) -> list[str]:
    """``kind/name: <which secret>`` for every object that holds one of ``secrets`` (whole or inside a value)."""
    found = []
    for obj in objects:
        text = list(leaves(obj))
        for secret in secrets:
            if any(secret in value for value in text):
                found.append(f"{obj['kind']}/{obj['metadata'].get('namespace')}/{obj['metadata']['name']}")
    return sorted(set(found))


@pytest.mark.parametrize("stack", STACKS)
def test_no_object_in_a_team_namespace_holds_a_platform_secret(revealed, stack):
    result = platform(stack)
    secrets = platform_secrets(result)
    # The comparison has something to find: the metadata URL, its password and the volume's keys at least; with
    # ElastiCache and IRSA (no keys), the metadata URL with its auth token inside.
    settings = stack_settings(stack)
    assert len(secrets) >= (1 if settings.metadata.engine == "elasticache" else 3), secrets
    teams = team_namespaces(result)
    assert teams == ({t.name for t in settings.teams.workspaces} or {"probe"})
    assert leaks(in_team_namespaces(result, teams), secrets) == []


@pytest.mark.parametrize("stack", ["dev", "dev-pytorchjob", "dev-tfjob", "dev-volcano", "dev-volcano-tasks"])
def test_the_team_example_holds_no_platform_secret_and_reads_no_platform_output(revealed, as_installed, stack):
    # The example runs against the dev platform; its StackReferences (there must be none) would read the
    # platform's outputs with their real values.
    dev = platform("dev")
    outputs = dict(dev.outputs)
    read: list[str] = []
    answer = mock_engine.PlatformMocks.new_resource

    def recording(mocks: mock_engine.PlatformMocks, args: Any) -> Any:
        read.append(args.typ)  # a StackReference is read, never registered: only the mocks see it
        return answer(mocks, args)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(mock_engine.PlatformMocks, "new_resource", recording)
        result = render.rendering(stack, render.run(stack, root=TEAM_EXAMPLE, stack_outputs=outputs))
    assert read and "pulumi:pulumi:StackReference" not in read
    objects = render_objects(result)
    assert objects and {o["metadata"]["namespace"] for o in objects} <= team_namespaces(dev)
    assert leaks(objects, platform_secrets(dev) | {v for v in outputs.values() if isinstance(v, Revealed)}) == []


def test_the_comparison_finds_a_copied_key(revealed):
    """The check itself: a copy of the volume's metadata URL (inside a value) or a key is found."""
    result = platform("dev")
    secrets = platform_secrets(result)
    volume = next(o for o in render_objects(result) if o["metadata"]["name"] == juicefs.SECRET_NAME)
    metaurl = volume["stringData"]["metaurl"]
    copied = {"kind": "ConfigMap", "metadata": {"name": "x", "namespace": "vision"}, "data": {"u": f"url={metaurl}"}}
    key = {"kind": "Secret", "metadata": {"name": "y", "namespace": "vision"}, "stringData": dict(volume["stringData"])}
    assert leaks([copied, key], secrets) == ["ConfigMap/vision/x", "Secret/vision/y"]
    assert json.dumps(metaurl) and metaurl in secrets
