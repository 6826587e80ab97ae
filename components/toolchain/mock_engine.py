"""Pulumi's mock engine, recording: run a program (a whole stack or one component) without a cluster or cloud,
and keep every registration with its inputs as plain data (secrets hidden, references as URNs).

The mock engine answers every resource with its inputs (plus the few computed outputs the program reads), so
what a resource was given is what a reviewer sees.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
from google.protobuf import json_format
from pulumi.runtime import mocks as pulumi_mocks
from pulumi.runtime.config import set_all_config
from pulumi.runtime.settings import get_root_resource, reset_options
from pulumi.runtime.stack import run_pulumi_func
from pulumi.runtime.sync_await import _sync_await

from ..settings import PROJECT

SECRET = "[secret]"
_SIG = "4dabf18193072939515e22adb298388d"
SECRET_SIGNATURE = "1b47061264138c4ac30d75fd1eb44270"
_RESOURCE_SIG = "5cf8f73096256a8f31e491e813e4eb8e"


def clean(value: Any) -> Any:
    """Wire-format values as plain data: secrets hidden, resource references as URNs, nulls dropped."""
    if isinstance(value, dict):
        if value.get(_SIG) == SECRET_SIGNATURE:
            inner = value.get("value")
            return {k: SECRET for k in sorted(inner)} if isinstance(inner, dict) else SECRET
        if value.get(_SIG) == _RESOURCE_SIG:
            return value.get("urn")
        return {k: clean(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [clean(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


@dataclass
class Registration:
    """One resource as the program registered it."""

    type: str
    name: str
    urn: str
    parent: str
    dependencies: list[str]
    inputs: dict[str, Any]
    custom: bool
    protect: bool
    retain_on_delete: bool


class RecordingMonitor(pulumi_mocks.MockMonitor):
    """A mock resource monitor that also keeps every registration and the stack outputs."""

    def __init__(self, mocks: pulumi_mocks.Mocks):
        super().__init__(mocks)
        self.registrations: list[Registration] = []
        self.stack_outputs: dict[str, Any] = {}
        self.project = PROJECT

    def RegisterResource(self, request: Any) -> Any:  # noqa: N802 (gRPC method name)
        response = super().RegisterResource(request)
        if request.type != "pulumi:pulumi:Stack":
            self.registrations.append(
                Registration(
                    type=request.type,
                    name=request.name,
                    urn=response.urn,
                    parent=request.parent,
                    dependencies=sorted(set(request.dependencies)),
                    inputs=clean(json_format.MessageToDict(request.object)),
                    custom=bool(request.custom),
                    protect=bool(request.protect),
                    retain_on_delete=bool(request.retainOnDelete),
                )
            )
        return response


class PlatformMocks(pulumi_mocks.Mocks):
    """Echo inputs back as outputs, plus the few computed outputs the program reads. A StackReference answers
    with ``stack_outputs`` (the outputs of the stack's last update: none for a first deployment)."""

    def __init__(self, stack_outputs: Mapping[str, Any] | None = None):
        super().__init__()
        self.stack_outputs = dict(stack_outputs or {})

    def new_resource(self, args: pulumi_mocks.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        outputs = dict(args.inputs)
        if args.typ == "pulumi:pulumi:StackReference":
            outputs.update(outputs=self.stack_outputs, secretOutputNames=[])
        elif args.typ.startswith("aws:elasticache/"):
            outputs.setdefault("name", args.name)
            outputs["primaryEndpointAddress"] = f"{args.name}.mock.cache.amazonaws.com"
        elif args.typ.startswith("random:"):
            outputs["result"] = f"mock-{args.name}"
        elif args.typ == "aws:s3/bucket:Bucket":
            outputs.setdefault("bucket", args.name)
            outputs["arn"] = f"arn:aws:s3:::{outputs['bucket']}"
        elif args.typ.startswith("aws:iam/"):
            outputs["arn"] = f"arn:aws:iam::000000000000:{args.name}"
            outputs.setdefault("name", args.name)
            outputs["secret"] = f"mock-{args.name}"
        return f"{args.name}_id", outputs

    def call(self, args: pulumi_mocks.MockCallArgs) -> tuple[dict[str, Any], None]:
        return {}, None


def run_program(
    program: Callable[[], None],
    stack: str = "test",
    project: str = PROJECT,
    config: Mapping[str, str] | None = None,
    secret_keys: Sequence[str] = (),
    stack_outputs: Mapping[str, Any] | None = None,
) -> RecordingMonitor:
    """Run ``program`` (any function that registers resources: a whole Pulumi program, or one component built
    by a test) under the mock engine, with ``config`` and the ``stack_outputs`` of a previous update; return
    what it registered."""
    mocks = PlatformMocks(stack_outputs)
    monitor = RecordingMonitor(mocks)
    monitor.project = project
    reset_options()
    pulumi.runtime.set_mocks(
        mocks, project=project, stack=stack, preview=False, monitor=monitor, organization="organization"
    )
    set_all_config(dict(config or {}), list(secret_keys))
    _sync_await(run_pulumi_func(program))
    monitor.stack_outputs = _sync_await(_exports())
    return monitor


def close_event_loops() -> None:
    """Close the event loops the mock engine left open (one per thread it ran in). Left to the interpreter's
    shutdown, a loop's ``__del__`` can meet its already-closed self-pipe and print a traceback."""
    for loop in [o for o in gc.get_objects() if isinstance(o, asyncio.AbstractEventLoop)]:
        if not loop.is_running() and not loop.is_closed():
            loop.close()
    asyncio.set_event_loop(asyncio.new_event_loop())  # a later run in this process gets an open loop


async def _exports() -> dict[str, Any]:
    """The values the program exported, with secret ones hidden (mocks never register stack outputs)."""
    stack = get_root_resource()
    exported: dict[str, Any] = {}
    for key, value in sorted(getattr(stack, "outputs", {}).items()):
        output = pulumi.Output.from_input(value)
        exported[key] = SECRET if await output.is_secret() else await output.future()
    return exported
