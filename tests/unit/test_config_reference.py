"""Every config key (the platform's and a team workspace's) is documented, listed in docs/config.md, and refuses
bad values: a walk over the settings models feeds each key, down to list items and mapping values, a value of
the wrong type and a value that breaks each of its constraints (bounds, patterns, choices, Kubernetes names and
quantities), and the error names the key, the expectation and a hint. A new key is covered as soon as it is
declared; a new kind of constraint fails here until it gets a bad value. The walk can only test constraints
that exist, so keys whose constraint guards data (retention, schedules, percentages) also have pinned bad
values. Rules across keys (each section's ``problems()``) have explicit cases, and every section that has such
rules must have one."""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Iterator
from typing import Any, Literal

import annotated_types as at
import pytest
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from components.backends.object_stores import s3
from components.common.sections import Section, SettingsError, fields, leaf_keys
from components.settings import PlatformSettings, load_settings
from components.teams.team import TeamSettings, load_team_settings
from components.toolchain.cli import config_reference
from components.toolchain.render import ROOT

KEYS = [key for key, _, _ in leaf_keys(PlatformSettings)]
TEAM_KEYS = [key for key, _, _ in leaf_keys(TeamSettings)]

Path = tuple[str | int, ...]
"""A key path: field names (camelCase) and mapping keys, list indexes as ints."""

VALIDATORS = {
    fields._quantity: [("ten gigs", "expected a Kubernetes quantity")],
    fields._dns_label: [("Not_A_Label", "expected a DNS label")],
    fields._regex: [("(unclosed", "expected a regular expression")],
    fields._cron: [("every 4 hours", "expected a cron schedule")],
    fields._resource_ref: [("redis", "expected a resource as the diff names it")],
    s3._service_account: [("juicefs-csi", "expected `namespace:name` of a ServiceAccount")],
    fields._window: [(v, "expected a positive duration") for v in ("0m", "0s", "00h", "0ms", "5d", "5")],
    fields._pinned_image: [
        (v, "expected an image pinned by a version tag or a digest")
        for v in ("trainer", "ghcr.io/org/trainer:latest", "registry:5000/trainer", "trainer@sha256:abc", "img:")
    ],
}
"""Values each of the settings' own validators refuses, with its expectation."""
NOT_MATCHING = ("not valid!", "", "UPPER_CASE", "-")
"""Candidates for a text that a key's pattern refuses (the first that does not match is used)."""
WRONG_TYPE: dict[type, tuple[object, str]] = {
    bool: ("yes", "expected true or false"),
    int: ("3", "expected a whole number"),
    float: ("fast", "expected a number"),
    str: (5, "expected a string"),
    list: ("x", "expected a list"),
    dict: (["x"], "expected a mapping"),
}
LOADER_CHECKED = {("platform", "profile"): "expected a profile name"}
"""Keys the loader reads before the models do, with the loader's expectation for a value of the wrong type."""


def key_text(path: Path) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text


def nested(path: Path, value: object) -> Any:
    """Settings data that puts ``value`` at ``path``."""
    for part in reversed(path):
        value = [value] if isinstance(part, int) else {part: value}
    return value


def bound(value: float) -> str:
    return f"{int(value)}" if float(value).is_integer() else f"{value}"


def python_type(annotation: Any) -> type:
    """The Python type of the values a setting of ``annotation`` takes (a model's and a mapping's: dict)."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return python_type(args[0])
    if origin is Literal:
        return type(args[0])
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return dict
    return origin or annotation


def bad_values(annotation: Any, metadata: list[Any], path: Path) -> Iterator[tuple[Path, object, str]]:
    """(key path, value, expectation) of values a setting of ``annotation`` with ``metadata`` must refuse."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        branches = [a for a in args if a is not type(None)]
        for branch in branches:
            others = {python_type(b) for b in branches if b is not branch}
            # A value another branch would take is no bad value of the union.
            yield from (c for c in bad_values(branch, metadata, path) if type(c[1]) not in others)
        return
    if origin is typing.Annotated:
        items = annotation.__metadata__
        extra = [m for item in items for m in (item.metadata if isinstance(item, FieldInfo) else [item])]
        yield from bad_values(args[0], [*metadata, *extra], path)
        return
    if origin is Literal:
        yield path, "no-such-choice", "expected one of"
        return
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield path, ["x"], "expected a mapping"
        for name, info in annotation.model_fields.items():
            yield from bad_values(info.annotation, info.metadata, (*path, info.alias or name))
        return
    kind = origin or annotation
    yield path, *WRONG_TYPE[kind]
    if kind is float:  # YAML's .nan and .inf are floats too
        yield from ((path, v, "expected a finite number") for v in (float("nan"), float("inf"), float("-inf")))
    for m in metadata:
        yield from constraint_values(kind, m, path)
    if kind is list:
        yield from bad_values(args[0], [], (*path, 0))
    elif kind is dict:
        key_type, value_type = args
        if typing.get_origin(key_type) is Literal:
            yield (*path, "no-such-choice", "[key]"), {}, "expected one of"
            yield from bad_values(value_type, [], (*path, typing.get_args(key_type)[0]))
        else:
            yield from bad_values(value_type, [], (*path, "some-key"))


def constraint_values(kind: type, m: Any, path: Path) -> Iterator[tuple[Path, object, str]]:
    """A value that breaks the constraint ``m`` of a setting of type ``kind``."""
    step = 1 if kind is int else 0.5
    if isinstance(m, at.Ge):
        yield path, m.ge - step, f"expected a number >= {bound(m.ge)}"
    elif isinstance(m, at.Gt):
        yield path, m.gt, f"expected a number > {bound(m.gt)}"
    elif isinstance(m, at.Le):
        yield path, m.le + step, f"expected a number <= {bound(m.le)}"
    elif isinstance(m, at.Lt):
        yield path, m.lt, f"expected a number < {bound(m.lt)}"
    elif isinstance(m, at.MinLen):
        yield path, {} if kind is dict else [], f"at least {m.min_length} item"
    elif isinstance(m, at.MaxLen) and kind is str:
        yield path, "a" * (m.max_length + 1), f"at most {m.max_length} characters"
    elif getattr(m, "pattern", None):
        refused = next(text for text in NOT_MATCHING if not re.search(m.pattern, text))
        yield path, refused, "expected text matching"
    elif getattr(m, "func", None) in VALIDATORS:
        yield from ((path, value, expected) for value, expected in VALIDATORS[m.func])
    else:
        raise AssertionError(f"{key_text(path)}: no bad value for the constraint {m!r}; add one to this test")


def cases(loader: str, model: type[BaseModel]) -> list[tuple[str, Path, object, str]]:
    out = []
    for name, info in model.model_fields.items():
        for path, value, expected in bad_values(info.annotation, info.metadata, (info.alias or name,)):
            out.append((loader, path, value, LOADER_CHECKED.get((loader, key_text(path)), expected)))
    return out


CASES = cases("platform", PlatformSettings) + cases("team", TeamSettings)


def load(loader: str, data: Any) -> None:
    if loader == "platform":
        load_settings("dev", data)
    else:
        load_team_settings(data)


def refusal(loader: str, data: Any, key: str) -> list[str]:
    """The lines of the settings error that name ``key`` (the load must fail)."""
    with pytest.raises(SettingsError) as caught:
        load(loader, data)
    lines = [line for line in str(caught.value).splitlines() if line.startswith(f"  - {key}: ")]
    assert lines, f"no problem names {key}:\n{caught.value}"
    return lines


def test_docs_config_md_is_current():
    assert (ROOT / "docs" / "config.md").read_text() == config_reference(), "run: python -m components docs"


@pytest.mark.parametrize(
    ("model", "key"), [(PlatformSettings, k) for k in KEYS] + [(TeamSettings, k) for k in TEAM_KEYS]
)
def test_every_key_has_a_line_of_docs(model, key):
    info = dict((k, i) for k, i, _ in leaf_keys(model))[key]
    assert info.description and len(info.description) > 10


def test_the_walk_reaches_every_documented_key_and_the_keys_of_list_items():
    walked = {(loader, re.sub(r"\[0\]|\.\[key\]", "", key_text(path))) for loader, path, _, _ in CASES}
    assert {("platform", k) for k in KEYS} | {("team", k) for k in TEAM_KEYS} <= walked
    deep = {key_text(path) for _, path, _, _ in CASES}
    assert {"volcano.queues[0].weight", "training.runtimes[0].numNodes", "checkpoints.snapshots.keep"} <= deep


@pytest.mark.parametrize(
    ("loader", "path", "value", "expected"),
    CASES,
    ids=[f"{loader}:{key_text(path)}={value!r}" for loader, path, value, _ in CASES],
)
def test_a_bad_value_is_refused_naming_the_key_the_expectation_and_a_hint(loader, path, value, expected):
    lines = refusal(loader, nested(path, value), key_text(path))
    assert any(expected in line and "Hint:" in line for line in lines), lines


PINNED = [
    # (loader, key, bad value, expectation): constraints that guard data, so that removing one fails here.
    ("platform", "checkpoints.snapshots.keep", 0, ">= 1"),
    ("platform", "checkpoints.snapshots.keep", 101, "<= 100"),
    ("platform", "checkpoints.snapshots.schedule", "every 4 hours", "expected a cron schedule"),
    ("platform", "checkpoints.snapshots.schedule", "0 */4 * * * *", "expected a cron schedule"),
    ("platform", "checkpoints.offsite.schedule", "*/30 * * *", "expected a cron schedule"),
    ("platform", "checkpoints.offsite.schedule", "60 * * * *", "expected a cron schedule"),
    ("platform", "checkpoints.offsite.schedule", "*/0 * * * *", "expected a cron schedule"),
    ("platform", "juicefs.metadataBackup.schedule", "0 24 * * *", "expected a cron schedule"),
    ("platform", "juicefs.metadataBackup.schedule", "0 0 0 * *", "expected a cron schedule"),
    ("platform", "juicefs.metadataBackup.schedule", "0 0 * 13 *", "expected a cron schedule"),
    ("platform", "juicefs.metadataBackup.schedule", "0 0 * * 7", "expected a cron schedule"),
    ("platform", "juicefs.metadataBackup.schedule", "0 0 * * FRI-MON", "expected a cron schedule"),
    ("platform", "checkpoints.offsiteRetentionDays", 0, ">= 1"),
    ("platform", "juicefs.metadataBackup.schedule", "@daily", "expected a cron schedule"),
    ("platform", "juicefs.metadataBackup.retentionDays", 0, ">= 1"),
    ("platform", "juicefs.cache.fuseReadAheadKib", -1, ">= 0"),
    ("platform", "juicefs.cache.fuseReadAheadKib", 262145, "<= 262144"),
    ("platform", "juicefs.cache.verifyCacheChecksum", "sometimes", "expected one of"),
    ("platform", "monitoring.rules.pendingFor", "10 minutes", "expected text matching"),
    ("platform", "monitoring.rules.gangPendingFor", "30", "expected text matching"),
    ("platform", "monitoring.rules.checkpointWindow", "1 hour", "expected a positive duration"),
    ("platform", "tiers.decisions.checkpoint.restoreObjective", "0m", "expected text matching"),
    ("platform", "tiers.decisions.hot.acceptableColdStart", "0s", "expected text matching"),
    ("platform", "monitoring.rules.thresholds.cacheHitRatioPercent.warning", 150, "<= 100"),
    ("platform", "monitoring.rules.thresholds.checkpointSaveFailurePercent.critical", 101, "<= 100"),
    ("platform", "monitoring.rules.thresholds.checkpointSaveSeconds.warning", -1, ">= 0"),
    ("team", "checkpoint.snapshots.keep", 0, ">= 1"),
    ("team", "checkpoint.offsite.schedule", "hourly", "expected a cron schedule"),
]


@pytest.mark.parametrize(("loader", "key", "value", "expected"), PINNED, ids=[f"{k}={v!r}" for _, k, v, _ in PINNED])
def test_a_pinned_bad_value_is_refused(loader, key, value, expected):
    *heads, last = key.split(".")
    levels = {"warning": 90, "critical": 95} if last in ("warning", "critical") else {}
    data = nested(tuple(heads), {**levels, last: value})
    assert any(expected in line and "Hint:" in line for line in refusal(loader, data, key))


@pytest.mark.parametrize(
    "schedule", ["0 */4 * * *", "*/30 * * * *", "17 */6 * * *", "0 2 * * MON-FRI", "5,35 0-6/2 1-15 jan,Jul ?"]
)
def test_a_cron_schedule_kubernetes_accepts_is_accepted(schedule):
    settings = load_settings("dev", {"checkpoints": {"snapshots": {"schedule": schedule}}})
    assert settings.checkpoints.snapshots.schedule == schedule


def problem_sections() -> set[str]:
    """Every settings section with rules across its keys (its own ``problems()``)."""
    found, todo = set(), list(Section.__subclasses__())
    while todo:
        cls = todo.pop()
        todo += cls.__subclasses__()
        if "problems" in cls.__dict__:
            found.add(cls.__name__)
    return found


RUNTIME = {"name": "r", "queue": "q", "datasetClaim": "d"}
CACHE_LEVEL = {"medium": "MEM", "path": "/dev/shm", "quota": "1Gi", "low": 0.9, "high": 0.8}
THRESHOLDS = "monitoring.rules.thresholds"
CROSS_FIELD: list[tuple[str, str, dict[str, Any], str, str]] = [
    # (section whose rule it is, loader, {key: value}, the key the error names, its expectation)
    (
        "KustomizeSources",
        "platform",
        {"sources.kustomize.snapshotCrds": "https://github.com/kubernetes-csi/external-snapshotter/tree/master/x"},
        "sources.kustomize.snapshotCrds",
        "expected a URL at a tag or commit",
    ),
    (
        "SourcesSettings",
        "platform",
        {"sources.charts": {"rook": "https://mirror.example/charts"}},
        "sources.charts.rook",
        "expected one of the pinned charts",
    ),
    (
        "ElastiCacheSettings",
        "platform",
        {"metadata.elasticache.memoryWarningPercent": 90, "metadata.elasticache.memoryCriticalPercent": 80},
        "metadata.elasticache.memoryCriticalPercent",
        "expected above memoryWarningPercent (90)",
    ),
    (
        "TierDecisions",
        "platform",
        {"tiers.decisions.checkpoint.checkpointInterval": None},
        "tiers.decisions.checkpoint.checkpointInterval",
        "expected a duration",
    ),
    (
        "Threshold",
        "platform",
        {f"{THRESHOLDS}.readLatencyMs": {"warning": 100, "critical": 50}},
        f"{THRESHOLDS}.readLatencyMs.critical",
        "expected critical above warning",
    ),
    (
        "Threshold",
        "platform",
        {f"{THRESHOLDS}.prefetchHitRatioPercent": {"warning": 60, "critical": 80}},
        f"{THRESHOLDS}.prefetchHitRatioPercent.critical",
        "expected critical below warning",
    ),
    ("EfsSettings", "platform", {"efs.enabled": True}, "efs.fileSystemId", "expected an EFS file system id (fs-...)"),
    (
        "EfsSettings",
        "platform",
        {"efs.gidRangeStart": 5000, "efs.gidRangeEnd": 5000},
        "efs.gidRangeEnd",
        "expected more than gidRangeStart (5000)",
    ),
    ("FsxLustreSettings", "platform", {"fsxLustre.enabled": True}, "fsxLustre.subnetId", "expected a subnet id"),
    (
        "FsxLustreSettings",
        "platform",
        {"fsxLustre.deploymentType": "SCRATCH_2"},
        "fsxLustre.perUnitStorageThroughput",
        "expected none for scratch",
    ),
    (
        "FsxLustreSettings",
        "platform",
        {"fsxLustre.perUnitStorageThroughput": 200},
        "fsxLustre.perUnitStorageThroughput",
        "expected one of 125, 250, 500, 1000",
    ),
    (
        "RookCephSettings",
        "platform",
        {"rookCeph.enabled": True, "rookCeph.replicaSize": 2, "rookCeph.acceptDataLossRisk": False},
        "rookCeph.replicaSize",
        "at least 3 copies",
    ),
    (
        "RookCephSettings",
        "platform",
        {"rookCeph.enabled": True, "rookCeph.minSize": 3, "rookCeph.replicaSize": 2},
        "rookCeph.minSize",
        "at most replicaSize",
    ),
    (
        "FluidSettings",
        "platform",
        {"fluid.enabled": True, "fluid.datasets": [{"name": "a"}, {"name": "a"}]},
        "fluid.datasets[1].name",
        "unique in its namespace",
    ),
    (
        "CacheLevel",
        "platform",
        {"fluid.enabled": True, "fluid.datasets": [{"name": "a", "cache": [CACHE_LEVEL]}]},
        "fluid.datasets[0].cache[0].low",
        "below high",
    ),
    (
        "DatasetSettings",
        "platform",
        {"fluid.enabled": True, "fluid.datasets": [{"name": "all", "runtime": "alluxio", "path": "/"}]},
        "fluid.datasets[0].path",
        "expected a directory of the bucket",
    ),
    (
        "ClusterSettings",
        "platform",
        {"cluster.kubernetesVersion": "1.29"},
        "cluster.kubernetesVersion",
        "1.30 or later",
    ),
    (
        "ContainerDefaults",
        "platform",
        {"teams.quota.containerDefaults": {"memoryRequest": "1Gi", "memoryLimit": "512Mi"}},
        "teams.quota.containerDefaults.memoryLimit",
        "expected at least memoryRequest",
    ),
    (
        "TeamNamespace",
        "platform",
        {"teams.workspaces": [{"name": "a", "datasets": ["x", "x"]}]},
        "teams.workspaces[0].datasets",
        "expected each dataset once",
    ),
    (
        "PlatformSettings",
        "platform",
        {"teams.workspaces": [{"name": "team-a"}]},
        "teams.workspaces[0].name",
        "expected a name no other Queue has",
    ),
    ("JobSettings", "team", {"job.kind": "volcano"}, "job.image", "expected an image with kind: volcano"),
    ("AcceptanceSettings", "platform", {"acceptance.volumeSize": "1Gi"}, "acceptance.volumeSize", "expected room"),
    (
        "DatasetCache",
        "platform",
        {"fluid.datasets": [{"name": "d", "path": "/datasets/d", "warmupSchedule": "0 1 * * *"}]},
        "fluid.datasets[0].prewarm",
        "expected true with warmupSchedule",
    ),
    (
        "JobVolume",
        "team",
        {"job.volumes": [{"name": "scratch", "mountPath": "/scratch", "hostPath": "/mnt/nvme"}]},
        "job.volumes[0].hostPath",
        "expected no hostPath volume",
    ),
    (
        "RuntimeSettings",
        "platform",
        {
            "training": {"enabled": True, "runtimes": [{**RUNTIME, "staging": {"enabled": True, "version": "v1"}}]},
            "volcano": {"enabled": True, "queues": [{"name": "q"}]},
        },
        "training.runtimes[0].image",
        "expected an image with the training library",
    ),
    (
        "StagingSettings",
        "team",
        {"job.kind": "volcano", "job.image": "x/y:1", "staging.enabled": True},
        "staging.version",
        "expected a dataset version with enabled: true",
    ),
    (
        "LocalNVMeSettings",
        "platform",
        {"localNvme.deviceClasses": [{"name": "a", "volumeGroup": "vg", "default": False}]},
        "localNvme.deviceClasses",
        "exactly one device class",
    ),
    (
        "MetadataSettings",
        "platform",
        {"metadata.engine": "sentinel", "metadata.sentinel": {"replicas": 1, "minReplicasToWrite": 2}},
        "metadata.sentinel.minReplicasToWrite",
        "at most sentinel.replicas",
    ),
    ("MinioSettings", "platform", {"objectStore.minio.replicas": 3}, "objectStore.minio.replicas", "1, or 4 to 16"),
    (
        "PlatformSettings",
        "platform",
        {"training.enabled": True, "volcano.enabled": False},
        "training.enabled",
        "expected volcano.enabled: true",
    ),
    (
        "PlatformSettings",
        "platform",
        {"monitoring.namespace": "volcano-system", "volcano.enabled": True},
        "volcano.namespace",
        "not used by monitoring",
    ),
    (
        "TiersSettings",
        "platform",
        {"tiers.hot": "none", "tiers.defaultTier": "hot"},
        "tiers.defaultTier",
        "a tier that has a backend",
    ),
    (
        "TiersSettings",
        "platform",
        {"tiers.warm": "topolvm"},
        "tiers.warm",
        "expected a backend that serves the warm tier",
    ),
    (
        "TeamSettings",
        "team",
        {"dataset.name": "ckpt", "checkpoint.claim": "ckpt"},
        "checkpoint.claim",
        "expected a claim name other than dataset.name",
    ),
    (
        "TrainingSettings",
        "platform",
        {
            "training": {"enabled": True, "operators": ["training-operator-v1"], "runtimes": [RUNTIME]},
            "volcano": {"enabled": True, "queues": [{"name": "q"}]},
        },
        "training.runtimes",
        "expected no runtimes without trainer-v2",
    ),
    (
        "QueueSettings",
        "platform",
        {"volcano.enabled": True, "volcano.queues": [{"name": "default"}]},
        "volcano.queues[0].name",
        "other than 'default' and 'root'",
    ),
    (
        "VolcanoSettings",
        "platform",
        {"volcano.enabled": True, "volcano.queues": [{"name": "a"}, {"name": "a"}]},
        "volcano.queues[1].name",
        "not already used",
    ),
    ("WorkspaceSettings", "team", {"workspace.namespace": "kube-system"}, "workspace.namespace", "not kube-*"),
    *(
        ("Toleration", "platform", {"nodeStorage.tolerations": [toleration]}, f"nodeStorage.tolerations[0].{key}", text)
        for toleration, key, text in [
            ({"key": "nvidia.com/gpu", "operator": "Exists", "value": "present"}, "value", "no value with operator"),
            ({"operator": "Equal", "value": "present"}, "key", "a key with operator: Equal"),
            ({"key": "a", "effect": "NoSchedule", "tolerationSeconds": 60}, "tolerationSeconds", "effect: NoExecute"),
        ]
    ),
]


def from_keys(values: dict[str, Any]) -> dict[str, Any]:
    """Settings data from ``{dotted key: value}``."""
    data: dict[str, Any] = {}
    for key, value in values.items():
        *heads, last = key.split(".")
        at_ = data
        for head in heads:
            at_ = at_.setdefault(head, {})
        at_[last] = value
    return data


def test_every_section_with_rules_across_keys_has_a_case():
    assert {name for name, *_ in CROSS_FIELD} == problem_sections()


@pytest.mark.parametrize(("name", "loader", "config", "key", "expected"), CROSS_FIELD, ids=[c[3] for c in CROSS_FIELD])
def test_a_rule_across_keys_is_refused_naming_the_key(name, loader, config, key, expected):
    lines = refusal(loader, from_keys(config), key)
    assert any(expected in line and "Hint:" in line for line in lines), lines


def test_every_type_in_the_reference_reads_as_a_type():
    """A constrained type shows as what it constrains (a pattern's brackets once leaked: ``list[str+$')])]]``)."""
    rows = [
        line.split(" | ") for line in (ROOT / "docs" / "config.md").read_text().splitlines() if line.startswith("| `")
    ]
    word = r"[A-Za-z]+(\[[\w., \[\]-]+\])?"
    for row in rows:
        assert re.fullmatch(rf"({word}|one of [\w., -]+)( or {word})*", row[1]), row[:2]
        assert not set("$'()+") & set(row[1]), row[:2]


def test_entries_of_lists_have_their_own_tables():
    """A key typed ``list[CephNode]`` once had no table of a CephNode's keys, and the team entry's `artifacts` and
    `artifactReaders` were nowhere."""
    page = (ROOT / "docs" / "config.md").read_text()
    items = page.split("## Items of lists and mappings", 1)[1]
    ceph_node = items.split("### CephNode", 1)[1].split("###", 1)[0]
    assert (
        "An entry of `rookCeph.storage.nodes`" in ceph_node
        and "| `devices` | list[CephDevice] | `required` |" in ceph_node
    )
    team = items.split("### TeamNamespace", 1)[1].split("###", 1)[0]
    assert "| `artifacts` | bool | `true` |" in team and "| `artifactReaders` | list[str] | `[]` |" in team
    assert "PydanticUndefined" not in page


def test_the_reference_shows_the_value_a_setting_has_when_unset_not_required():
    """A key required on its own class but set by its section's default (an alert's warning and critical levels)
    shows that default; `required` is left for keys of list entries, which have none."""
    text = (ROOT / "docs" / "config.md").read_text()
    keys = text[: text.index("## Items of lists and mappings")]
    assert "| `required` |" not in keys
    row = next(
        line for line in keys.splitlines() if line.startswith("| `monitoring.rules.thresholds.readLatencyMs.critical`")
    )
    assert "| `500.0` |" in row
