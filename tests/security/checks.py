"""Security checks on what a render produces. Each returns a list of readable problems; empty means it passes.

The gate tests run them on every rendered stack; the broken-input tests feed them bad objects, so a check that
stops finding problems fails its own test.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pulumi.runtime.mocks import MockResourceArgs

from components.common import versions
from components.toolchain import mock_engine, render
from policy.rules import FLOATING, image_problem, pin_problems, walk

# ---------------------------------------------------------------- helpers


def label(obj: Mapping[str, Any]) -> str:
    """``Kind/namespace/name`` of a Kubernetes object, for messages."""
    meta = obj.get("metadata") or {}
    return "/".join(p for p in (obj.get("kind", "?"), meta.get("namespace"), meta.get("name", "?")) if p)


# ---------------------------------------------------------------- checkov


def run_checkov(checkov: Path, directory: Path) -> list[dict[str, Any]]:
    """checkov's JSON reports (one per framework) for the Kubernetes manifests in ``directory``."""
    flags = ["--framework", "kubernetes", "--skip-download", "--quiet", "--compact", "-o", "json"]
    done = subprocess.run([str(checkov), "-d", str(directory), *flags], capture_output=True, text=True, check=False)
    if done.returncode not in (0, 1):  # 1 means "some check failed"; anything else is a crash
        raise RuntimeError(f"checkov exited {done.returncode}: {done.stderr[-2000:]}")
    report = json.loads(done.stdout)
    return report if isinstance(report, list) else [report]


def checkov_failures(reports: Iterable[Mapping[str, Any]]) -> list[str]:
    """Every failed checkov check as ``CKV_ID resource (file): check name``."""
    return [
        f"{c['check_id']} {c['resource']} ({c['file_path'].lstrip('/')}): {c['check_name']}"
        for report in reports
        for c in (report.get("results") or {}).get("failed_checks", [])
    ]


_SKIP_KEY = re.compile(r"^checkov\.io/skip\d+$")
_SKIP_VALUE = re.compile(r"^CKV2?_[A-Z0-9]+_\d+=(?P<reason>.*)$")


def skip_annotation_problems(objects: Iterable[Mapping[str, Any]]) -> list[str]:
    """Every ``checkov.io/skipN`` annotation names one check and gives a reason of a few words."""
    problems = []
    for obj in objects:
        annotations = (obj.get("metadata") or {}).get("annotations") or {}
        for key, value in annotations.items():
            if not _SKIP_KEY.match(key):
                continue
            match = _SKIP_VALUE.match(str(value))
            if not match or len(match["reason"].split()) < 3:
                problems.append(f"{label(obj)}: {key}={value!r} needs the form CKV_K8S_nn=<reason, a few words>")
    return problems


# ---------------------------------------------------------------- Pod Security Standards

_PSS_LEVELS = ("privileged", "baseline", "restricted")
ENFORCE = "pod-security.kubernetes.io/enforce"


def pod_security_problems(
    objects: Iterable[Mapping[str, Any]], releases: Iterable[Mapping[str, Any]], privileged_ok: Mapping[str, str]
) -> list[str]:
    """Every Namespace enforces a Pod Security level; ``privileged`` only where ``privileged_ok`` (namespace ->
    reason) allows it; no Helm release creates a namespace (it would carry no Pod Security labels)."""
    problems = []
    for obj in objects:
        if obj.get("kind") != "Namespace":
            continue
        name = obj["metadata"]["name"]
        level = (obj["metadata"].get("labels") or {}).get(ENFORCE)
        if level not in _PSS_LEVELS:
            problems.append(f"Namespace/{name}: label {ENFORCE} is {level!r}, expected one of {_PSS_LEVELS}")
        elif level == "privileged" and not privileged_ok.get(name, "").strip():
            problems.append(f"Namespace/{name}: enforces privileged but is not in the allow-list (with a reason)")
    for release in releases:
        if release.get("createNamespace"):
            problems.append(
                f"Release {release.get('name')}: createNamespace makes {release.get('namespace')} "
                "without Pod Security labels; create it with components.common.kube.namespace"
            )
    return problems


# ---------------------------------------------------------------- secrets


def mock_secret_values(registrations: Iterable[render.Registration]) -> set[str]:
    """The values the mock engine generated for secrets (random passwords and strings, IAM keys)."""
    mocks = mock_engine.PlatformMocks()
    values = set()
    for r in registrations:
        _, outputs = mocks.new_resource(MockResourceArgs(r.type, r.name, r.inputs, custom=r.custom))
        values |= {outputs[k] for k in ("result", "secret") if isinstance(outputs.get(k), str)}
    return values


def plaintext_problems(texts: Mapping[str, str], secret_values: Iterable[str]) -> list[str]:
    """No generated secret value appears in any output text (file name or ``stdout`` -> content)."""
    return [
        f"{where}: contains the secret value {value!r}"
        for where, text in sorted(texts.items())
        for value in sorted(secret_values)
        if value in text
    ]


def secret_object_problems(objects: Iterable[Mapping[str, Any]]) -> list[str]:
    """Every value of every Secret's ``data`` and ``stringData`` is a Pulumi secret (rendered ``[secret]``)."""
    return [
        f"{label(obj)}: {field}.{key} is in plain text"
        for obj in objects
        if obj.get("kind") == "Secret"
        for field in ("data", "stringData")
        for key, value in (obj.get(field) or {}).items()
        if value != render.SECRET
    ]


_SENSITIVE_KEY = re.compile(r"(?i)(pass(word|wd)?|secret|token|credential|private.?key|access.?key|api.?key)")
_REFERENCE_KEY = re.compile(r"(?i)(name|ref|arn|namespace|file|path)$")


def stack_file_problems(name: str, data: Mapping[str, Any]) -> list[str]:
    """No config key in a stack file that looks like a password or key holds anything but ``secure:``."""
    problems = []
    for path, key, value in walk(data.get("config") or {}):
        last = key.rsplit(":", 1)[-1]
        sensitive = _SENSITIVE_KEY.search(last) and not _REFERENCE_KEY.search(last)
        if sensitive and not (isinstance(value, Mapping) and set(value) == {"secure"}):
            problems.append(f"{name}: {path.lstrip('.')} looks like a secret; set it with pulumi config set --secret")
    return problems


# ---------------------------------------------------------------- pins

_RANGE = re.compile(r"[\^~*<>x|, ]|^$")


def image_problems(where: str, value: Any) -> list[str]:
    """Every ``image`` string and every ``tag`` in ``value`` (an object, or chart values) is pinned."""
    return [f"{where}{problem}" for problem in pin_problems(value)]


def chart_problems(charts: Iterable[Mapping[str, Any]]) -> list[str]:
    """Every chart has an exact version, and every image or tag it sets in its values is pinned."""
    problems = []
    for chart in charts:
        where = f"chart {chart.get('name')} ({chart.get('chart')})"
        version = str(chart.get("version") or "")
        if _RANGE.search(version) or FLOATING.match(version):
            problems.append(f"{where}: version {version!r} is not an exact version")
        problems += image_problems(f"{where} values", chart.get("values") or {})
    return problems


def versions_problems(module: Any) -> list[str]:
    """Every chart pin in a versions module has an exact version, and every ``*_IMAGE`` constant is pinned."""
    problems = []
    for name, value in sorted(vars(module).items()):
        if isinstance(value, versions.ChartPin):
            problems += chart_problems([{"name": name, "chart": value.chart, "version": value.version}])
        elif name.endswith("_IMAGE"):
            why = image_problem(value) if isinstance(value, str) else f"{value!r} is not an image reference"
            problems += [f"{module.__name__}.{name}: {why}"] if why else []
    return problems


# ---------------------------------------------------------------- stateful resources

STATEFUL_TYPES = {
    "aws:s3/bucket:Bucket": "bucket",
    "aws:s3/bucketV2:BucketV2": "bucket",
    "kubernetes:core/v1:PersistentVolumeClaim": "volume claim",
    "kubernetes:ceph.rook.io/v1:CephCluster": "Ceph cluster",
    "aws:elasticache/replicationGroup:ReplicationGroup": "metadata replication group",
}


def is_stateful(reg: render.Registration) -> bool:
    """A bucket, PVC, Ceph cluster, or a StatefulSet with PVC templates (Redis and MinIO data)."""
    if reg.type in STATEFUL_TYPES:
        return True
    return reg.type == "kubernetes:apps/v1:StatefulSet" and bool(
        (reg.inputs.get("spec") or {}).get("volumeClaimTemplates")
    )


def protection_problems(registrations: Iterable[render.Registration], protect: bool) -> list[str]:
    """Every stateful resource has ``protect`` and ``retain_on_delete`` equal to ``protect`` (the settings)."""
    return [
        f"{r.type} {r.name}: protect={r.protect}, retain_on_delete={r.retain_on_delete}; settings say {protect}"
        for r in registrations
        if is_stateful(r) and (r.protect, r.retain_on_delete) != (protect, protect)
    ]


# ---------------------------------------------------------------- determinism


def difference_problems(a: Path, b: Path) -> list[str]:
    """Files that exist in only one of two render folders, or differ in a byte."""
    files_a = {p.relative_to(a) for p in a.rglob("*") if p.is_file()}
    files_b = {p.relative_to(b) for p in b.rglob("*") if p.is_file()}
    problems = [f"{f}: only in {a if f in files_a else b}" for f in sorted(files_a ^ files_b)]
    problems += [f"{f}: differs" for f in sorted(files_a & files_b) if (a / f).read_bytes() != (b / f).read_bytes()]
    return problems
