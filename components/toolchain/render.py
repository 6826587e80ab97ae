"""Offline renderer: run the same program ``pulumi up`` runs, under Pulumi's mock engine, and write it out.

Output (default ``build/<stack>``): ``plan.json`` (every registered resource in registration order, with its
``protect`` and ``retainOnDelete`` options, secrets as ``"[secret]"``), ``manifests/<component>.yaml`` (every
Kubernetes object created directly), ``charts.yaml`` (every Helm release), ``outputs.json`` (the stack
outputs, secret ones as ``"[secret]"``) and, for the platform's own stacks, ``settings.json`` (the settings the
stack resolves to, which the diff classifies). No cloud or cluster is contacted.
"""

from __future__ import annotations

import json
import runpy
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..backends.object_stores.s3 import with_provider_region
from ..common.sections import Problem, SettingsError, merge
from ..settings import PROJECT, PlatformSettings, decode, load_settings
from .mock_engine import SECRET, RecordingMonitor, Registration, run_program

ROOT = Path(__file__).resolve().parents[2]
RELEASE = "kubernetes:helm.sh/v3:Release"


def _name(urn: str) -> str:
    return urn.rsplit("::", 1)[-1]


def project_name(root: Path) -> str:
    """The Pulumi project name in ``root/Pulumi.yaml``."""
    return str(yaml.safe_load((root / "Pulumi.yaml").read_text())["name"])


def stack_file_config(path: Path, project: str = PROJECT) -> tuple[dict[str, str], list[str]]:
    """The config of a stack file as Pulumi hands it to a program; ``secure`` values are hidden."""
    if not path.is_file():
        stacks = sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in path.parent.glob("Pulumi.*.yaml"))
        raise SettingsError(
            [Problem("--stack", f"expected a stack with a file ({', '.join(stacks)})", path.name, "add it")]
        )
    data = yaml.safe_load(path.read_text()) or {}
    config: dict[str, str] = {}
    secret_keys: list[str] = []
    for key, value in (data.get("config") or {}).items():
        full = key if ":" in key else f"{project}:{key}"
        if _has_secure(value):
            secret_keys.append(full)
            value = _hide_secure(value)
        if isinstance(value, (dict, list)):
            config[full] = json.dumps(value)
        elif isinstance(value, bool):
            config[full] = "true" if value else "false"
        else:
            config[full] = str(value)
    return config, secret_keys


def stack_settings(path: Path, stack: str, overrides: Mapping[str, Any] | None = None) -> PlatformSettings:
    """The settings a stack file resolves to (its profile and the code defaults included), as the program reads them;
    ``overrides`` (section -> value) merged on top."""
    config, _ = stack_file_config(path)
    ours = {k.removeprefix(f"{PROJECT}:"): decode(v) for k, v in config.items() if k.startswith(f"{PROJECT}:")}
    return load_settings(stack, merge(with_provider_region(ours, config.get("aws:region")), overrides or {}))


def _has_secure(value: Any) -> bool:
    if isinstance(value, dict):
        return set(value) == {"secure"} or any(_has_secure(v) for v in value.values())
    return isinstance(value, list) and any(_has_secure(v) for v in value)


def _hide_secure(value: Any) -> Any:
    if isinstance(value, dict):
        return SECRET if set(value) == {"secure"} else {k: _hide_secure(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_hide_secure(v) for v in value]
    return value


def run(
    stack: str, config_file: Path | None = None, root: Path = ROOT, stack_outputs: Mapping[str, Any] | None = None
) -> RecordingMonitor:
    """Run the Pulumi program in ``root`` for ``stack`` (config from ``Pulumi.<stack>.yaml`` or
    ``config_file``) under the mock engine; every StackReference reads ``stack_outputs`` (none: a first
    deployment, with nothing to reference); return what it registered."""
    project = project_name(root)
    config, secret_keys = stack_file_config(config_file or root / f"Pulumi.{stack}.yaml", project)
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))

    def program() -> None:
        runpy.run_path(str(root / "__main__.py"), run_name="__main__")

    return run_program(program, stack, project, config, secret_keys, stack_outputs)


def rendered(
    stack: str, config_file: Path | None = None, root: Path = ROOT, stack_outputs: Mapping[str, Any] | None = None
) -> tuple[Rendering, RecordingMonitor]:
    """Run the program (``run``) and turn it into what a render writes, the platform's settings included."""
    monitor = run(stack, config_file, root, stack_outputs)
    platform = project_name(root) == PROJECT
    settings = stack_settings(config_file or root / f"Pulumi.{stack}.yaml", stack) if platform else None
    return rendering(stack, monitor, settings), monitor


@dataclass
class Rendering:
    """What a render writes, as data."""

    plan: dict[str, Any]
    manifests: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    charts: list[dict[str, Any]] = field(default_factory=list)
    outputs: dict[str, Any] = field(default_factory=dict)
    settings: dict[str, Any] | None = None
    """The platform stack's resolved settings (None for another project), for the diff's setting effects."""


def is_kubernetes_object(reg: Registration) -> bool:
    """A Kubernetes object created directly (not a provider, not a Helm release)."""
    return reg.custom and reg.type.startswith("kubernetes:") and reg.type != RELEASE


def component_of(reg: Registration, by_urn: dict[str, Registration]) -> str:
    """The component a resource belongs to: its ancestor just below the Platform, or else its top-level
    component (a program that uses the library without the Platform); ``stack`` for neither."""
    current = reg
    while current.parent in by_urn:
        parent = by_urn[current.parent]
        if parent.type == "ai-storage:platform:Platform":
            return current.name.removeprefix(parent.name + "-")
        current = parent
    return current.name if current is not reg and current.type.startswith("ai-storage:") else "stack"


def ordered(regs: list[Registration]) -> list[Registration]:
    """Registrations in a stable order the engine could register them in: parents and dependencies first,
    then by type and name (the mock engine's own order varies with thread timing)."""
    by_urn = {r.urn: r for r in regs}
    before = {r.urn: {u for u in [r.parent, *r.dependencies] if u in by_urn} for r in regs}
    done: set[str] = set()
    out: list[Registration] = []
    while len(out) < len(regs):
        ready = [r for r in regs if r.urn not in done and before[r.urn] <= done]
        first = min(ready, key=lambda r: (r.type, r.name))
        out.append(first)
        done.add(first.urn)
    return out


def rendering(stack: str, monitor: RecordingMonitor, settings: PlatformSettings | None = None) -> Rendering:
    """Turn the registrations into the plan, manifests and charts (and the platform's ``settings`` as data)."""
    regs = ordered(monitor.registrations)
    by_urn = {r.urn: r for r in regs}
    plan = {
        "project": monitor.project,
        "stack": stack,
        "resources": [
            {
                "type": r.type,
                "name": r.name,
                "parent": _name(r.parent) if r.parent in by_urn else None,
                "dependsOn": [_name(d) for d in r.dependencies],
                "inputs": r.inputs,
                "protect": r.protect,
                "retainOnDelete": r.retain_on_delete,
            }
            for r in regs
        ],
    }
    dumped = settings.model_dump(by_alias=True, mode="json") if settings is not None else None
    out = Rendering(plan=plan, outputs=monitor.stack_outputs, settings=dumped)
    for r in regs:
        if is_kubernetes_object(r):
            out.manifests.setdefault(component_of(r, by_urn), []).append(r.inputs)
        elif r.type == RELEASE:
            i = r.inputs
            repo, chart = (i.get("repositoryOpts") or {}).get("repo"), i.get("chart")
            if repo is None and str(chart).startswith("oci://"):
                repo, chart = str(chart).rsplit("/", 1)  # an OCI chart is named by its full reference
            out.charts.append(
                {
                    "name": i.get("name"),
                    "namespace": i.get("namespace"),
                    "chart": chart,
                    "repo": repo,
                    "version": i.get("version"),
                    "values": i.get("values") or {},
                }
            )
    return out


def write(result: Rendering, out_dir: Path) -> None:
    """Write plan.json, manifests/*.yaml, charts.yaml and outputs.json (the stack outputs, secrets hidden);
    byte-identical for the same input."""
    manifests = out_dir / "manifests"
    manifests.mkdir(parents=True, exist_ok=True)
    for old in manifests.glob("*.yaml"):
        old.unlink()
    (out_dir / "plan.json").write_text(json.dumps(result.plan, indent=2, sort_keys=True) + "\n")
    for component, objects in sorted(result.manifests.items()):
        (manifests / f"{component}.yaml").write_text(yaml.safe_dump_all(objects, sort_keys=True))
    (out_dir / "charts.yaml").write_text(yaml.safe_dump(result.charts, sort_keys=True))
    (out_dir / "outputs.json").write_text(json.dumps(result.outputs, indent=2, sort_keys=True) + "\n")
    if result.settings is not None:
        (out_dir / "settings.json").write_text(json.dumps(result.settings, indent=2, sort_keys=True) + "\n")


def summary(result: Rendering) -> str:
    """The short report printed after a render."""
    resources = result.plan["resources"]
    components = [r for r in resources if r["type"].startswith("ai-storage:")]
    lines = [f"stack {result.plan['stack']}: {len(resources)} resources, {len(result.charts)} Helm releases"]
    lines.append("components:")
    lines += [f"  {r['name']} ({r['type']})" for r in components]
    lines.append("storage classes:")
    for objects in result.manifests.values():
        for o in objects:
            if o.get("kind") == "StorageClass":
                lines.append(
                    f"  {o['metadata']['name']}: {o['provisioner']}, {o.get('reclaimPolicy')}, "
                    f"{o.get('volumeBindingMode')}"
                )
    lines.append("charts:")
    lines += [f"  {c['name']} {c['chart']}@{c['version']} in {c['namespace']}" for c in result.charts]
    lines.append("outputs:")
    lines += [f"  {k}: {json.dumps(v, sort_keys=True)}" for k, v in sorted(result.outputs.items())]
    return "\n".join(lines)
