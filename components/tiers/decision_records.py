"""Decision records: what each storage tier was sized for, kept next to its StorageClass.

The design asks to "record the dataset size, file-count shape, expected reuse rate, checkpoint interval, restore
objective, and acceptable cold-start time next to the StorageClass", so a reviewer can tell whether a new
workload still matches the assumptions a tier was built on. Each tier's record is a typed settings section
(``tiers.decisions.<tier>``, defaults below say what each tier was sized for); ``StorageTiers`` renders it onto
the tier's StorageClass as annotations ``ai-storage-platform/decision.<field>``, and docs/tiers.md is generated
from the records of every stack, beside the measured figures (``python -m components docs``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field, model_validator

from ..common.kube import gib_text, quantity_bytes
from ..common.sections import DnsLabel, Problem, Quantity, Section
from .ceph import filesystem_class

DURATION = r"^[0-9]*[1-9][0-9]*(s|m|h|d)$"
"""A positive duration in seconds, minutes, hours or days (`90s`, `30m`, `4h`, `2d`; never `0m`)."""
ANNOTATION_PREFIX = "ai-storage-platform/decision."
"""Prefix of the decision-record annotations on a tier StorageClass (`<prefix><field>`, kebab-case)."""
FileShape = Literal["small-files", "packed-shards", "large-files", "checkpoint-shards", "block-volumes"]


class DecisionRecord(Section):
    """The workload a tier was sized for (the design's storage decision record)."""

    dataset_size: Quantity = "1Ti"
    """Data the tier was sized to hold for one workload (a node's working set for the hot tier)."""
    file_count: int = Field(100_000, ge=1, le=10**12)
    """Number of files that data was expected to be in."""
    file_shape: FileShape = "packed-shards"
    """Shape of those files: `small-files`, `packed-shards`, `large-files`, `checkpoint-shards` or `block-volumes`."""
    expected_reuse_percent: float = Field(50.0, ge=0, le=100)
    """Share of reads expected to hit data read before (epochs, repeated jobs), %: what the caches were sized for."""
    checkpoint_interval: str | None = Field(None, pattern=DURATION)
    """How often checkpoints land on the tier (e.g. `30m`); unset: the tier holds no checkpoints."""
    restore_objective: str | None = Field(None, pattern=DURATION)
    """Longest acceptable time to restore a job's state from the tier (e.g. `15m`); unset: nothing is restored."""
    acceptable_cold_start: str = Field("10m", pattern=DURATION)
    """Longest acceptable time from a job's start to its first full-speed step with empty caches (e.g. `10m`)."""
    checkpoint_size_per_rank: Quantity | None = None
    """Size of one rank's shard of a checkpoint (the checkpoint tier's sizing; unset: no arithmetic)."""
    ranks: int | None = Field(None, ge=1, le=1_000_000)
    """Ranks whose shards land on the tier at once, at each save."""
    save_objective: str | None = Field(None, pattern=DURATION)
    """Longest acceptable time for every rank's shard of one save to land on the tier (e.g. `5m`)."""
    devices: int | None = Field(None, ge=1, le=100_000)
    """Devices (Ceph OSDs of the tier's device class) that hold the tier's data."""
    device_class: DnsLabel | None = None
    """Ceph device class of those devices (`hdd`, `ssd`, `nvme` or a class of the stack's own): on the checkpoint
    tier it must be the class its pools use (`rookCeph.checkpoint.deviceClass`, else `rookCeph.deviceClass`); the
    devices' MB/s come from `tiers.deviceSpeeds` unless the two keys below say."""
    device_write_mb_s: int | None = Field(None, ge=1, le=100_000)
    """Sequential write of one such device, MB/s, over `tiers.deviceSpeeds` (its data sheet, or the tier's
    acceptance Job over `devices`); unset: the device class's."""
    device_read_mb_s: int | None = Field(None, ge=1, le=100_000)
    """Sequential read of one such device, MB/s, over `tiers.deviceSpeeds`; unset: the device class's."""
    kept_checkpoints: int = Field(3, ge=1, le=10_000)
    """Checkpoints a job keeps on the tier (`CheckpointManager(keep=...)`, 3 in the docs): a claim holds one more
    while a save lands before the oldest is removed."""


class DeviceSpeed(Section):
    """Sequential throughput of one device of a class."""

    write_mb_s: int = Field(ge=1, le=100_000)
    """Sequential write, MB/s."""
    read_mb_s: int = Field(ge=1, le=100_000)
    """Sequential read, MB/s."""


DEVICE_SPEEDS: dict[str, DeviceSpeed] = {
    "hdd": DeviceSpeed(write_mb_s=200, read_mb_s=250),
    "ssd": DeviceSpeed(write_mb_s=500, read_mb_s=550),
    "nvme": DeviceSpeed(write_mb_s=2000, read_mb_s=3000),
}
"""Ceph's own device classes at the speeds a record assumes unless it says: a 7,200 rpm SATA disk, a SATA/SAS
flash disk (the 6 Gb/s link's ceiling), a PCIe Gen4 data-centre NVMe disk (sustained, past its write cache)."""


DEFAULTS: dict[str, DecisionRecord] = {
    "hot": DecisionRecord(
        dataset_size="2Ti",
        file_count=20_000,
        file_shape="packed-shards",
        expected_reuse_percent=95,
        checkpoint_interval="15m",
        acceptable_cold_start="10m",
    ),
    "warm": DecisionRecord(
        dataset_size="10Ti",
        file_count=20_000_000,
        file_shape="small-files",
        expected_reuse_percent=80,
        acceptable_cold_start="5m",
    ),
    "cold": DecisionRecord(
        dataset_size="50Ti",
        file_count=500_000,
        file_shape="packed-shards",
        expected_reuse_percent=30,
        restore_objective="4h",
        acceptable_cold_start="30m",
    ),
    "checkpoint": DecisionRecord(
        dataset_size="10Ti",
        file_count=50_000,
        file_shape="checkpoint-shards",
        expected_reuse_percent=5,
        checkpoint_interval="30m",
        restore_objective="15m",
        acceptable_cold_start="5m",
        checkpoint_size_per_rank="10Gi",
        ranks=64,
        save_objective="5m",
        devices=6,
        device_class="nvme",
    ),
    "block": DecisionRecord(
        dataset_size="1Ti",
        file_count=1_000,
        file_shape="block-volumes",
        expected_reuse_percent=50,
        restore_objective="1h",
        acceptable_cold_start="1m",
    ),
}
"""What each tier was sized for: the hot tier a node's packed working set, staged once and re-read every epoch;
the warm tier shared many-small-file datasets re-read by many jobs; the cold tier the durable copy of every
version, read mostly once per job through the cache; the checkpoint tier sharded saves every 30 minutes of 64 ranks
x 10 GiB, landing within 5 minutes on 6 NVMe OSDs (2 GB/s write, 3 GB/s read each: 3 storage nodes x 2), read
back only on a restore; the block tier single-writer volumes of services."""


class TierDecisions(Section):
    """The decision record of each tier; keys a stack sets override the tier's defaults one by one."""

    hot: DecisionRecord = DEFAULTS["hot"]
    """What the hot tier was sized for."""
    warm: DecisionRecord = DEFAULTS["warm"]
    """What the warm tier was sized for."""
    cold: DecisionRecord = DEFAULTS["cold"]
    """What the cold tier was sized for."""
    checkpoint: DecisionRecord = DEFAULTS["checkpoint"]
    """What the checkpoint tier was sized for."""
    block: DecisionRecord = DEFAULTS["block"]
    """What the block tier was sized for."""

    def problems(self) -> list[Problem]:
        """The checkpoint tier says how often checkpoints land: the one interval the checkpoint lag alert counts in."""
        if self.checkpoint.checkpoint_interval is None:
            hint = "the checkpoint lag alert counts in it; e.g. 30m"
            return [Problem("checkpoint.checkpointInterval", "expected a duration", None, hint)]
        return []

    @model_validator(mode="before")
    @classmethod
    def _over_tier_defaults(cls, data: Any) -> Any:
        """Each tier's keys start from that tier's defaults, not from the generic record's."""
        if not isinstance(data, Mapping):
            return data
        merged = dict(data)
        for tier, given in data.items():
            if tier in DEFAULTS and isinstance(given, Mapping):
                merged[tier] = {**DEFAULTS[tier].model_dump(by_alias=True, exclude_none=True), **given}
        return merged


def record_annotations(record: DecisionRecord) -> dict[str, str]:
    """The record as StorageClass annotations, ``<prefix><key in kebab-case>`` (``none`` for an unset duration)."""
    out = {}
    for name, info in DecisionRecord.model_fields.items():
        kebab = re.sub(r"[A-Z]", lambda m: "-" + m.group(0).lower(), info.alias or name)
        out[f"{ANNOTATION_PREFIX}{kebab}"] = _text(getattr(record, name))
    return out


def _text(value: object) -> str:
    if value is None:
        return "none"
    return f"{value:g}" if isinstance(value, float) else str(value)


def _seconds(duration: str) -> int:
    return int(duration[:-1]) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[duration[-1]]


def device_speed(record: DecisionRecord, speeds: Mapping[str, DeviceSpeed]) -> tuple[int, int] | None:
    """(write, read) MB/s of one of ``record``'s devices: its own figures over its class's in ``speeds``; None when
    either is unknown."""
    known = speeds.get(record.device_class) if record.device_class else None
    write = record.device_write_mb_s or (known.write_mb_s if known else None)
    read = record.device_read_mb_s or (known.read_mb_s if known else None)
    return (write, read) if write and read else None


def checkpoint_sizing(
    record: DecisionRecord, copies: int, speeds: Mapping[str, DeviceSpeed] = DEVICE_SPEEDS
) -> tuple[float, float] | None:
    """(seconds to save, seconds to restore) one checkpoint of ``record``'s ranks on its devices, each byte written
    ``copies`` times (Ceph's replicas) and read once; None when the record lacks a figure."""
    r, speed = record, device_speed(record, speeds)
    if r.checkpoint_size_per_rank is None or r.ranks is None or r.devices is None or speed is None:
        return None
    total = quantity_bytes(r.checkpoint_size_per_rank) * r.ranks
    return total * copies / (r.devices * speed[0] * 1e6), total / (r.devices * speed[1] * 1e6)


def checkpoint_sizing_problems(s: Any) -> list[Problem]:
    """A stack's checkpoint tier on Ceph is the device class its record names, and meets its save and restore
    objectives on the devices its record names; the checkpoint claim holds the saves a job keeps (``s``: the
    PlatformSettings); refused with the arithmetic otherwise."""
    record, ceph = s.tiers.decisions.checkpoint, s.rook_ceph
    found = _claim_problems(record, s.training)
    if s.tiers.checkpoint != "cephfs" or not ceph.enabled:
        return found
    speeds = {**DEVICE_SPEEDS, **s.tiers.device_speeds}
    found += _device_class_problems(record, filesystem_class(ceph, "checkpoint"), speeds)
    times = checkpoint_sizing(record, ceph.replica_size, speeds)
    if found or times is None:
        return found
    for (what, objective), seconds in zip(
        (("saveObjective", record.save_objective), ("restoreObjective", record.restore_objective)), times, strict=True
    ):
        if objective is None or seconds <= _seconds(objective):
            continue
        rate = device_speed(record, speeds)[what == "restoreObjective"]  # type: ignore[index]
        copies = f" x {ceph.replica_size} copies" if what == "saveObjective" else ""
        arithmetic = (
            f"{record.ranks} ranks x {record.checkpoint_size_per_rank}{copies} over {record.devices} "
            f"{record.device_class + ' ' if record.device_class else ''}devices at {rate} MB/s takes {seconds:,.0f} s"
        )
        found.append(
            Problem(
                f"tiers.decisions.checkpoint.{what}",
                f"expected devices that meet it: {arithmetic}",
                objective,
                "give the checkpoint tier more or faster devices (rookCeph.checkpoint.deviceClass; the record's "
                "devices and deviceClass), fewer ranks or smaller shards, or a longer objective",
            )
        )
    return found


INODE_CACHE_BYTES = 2048
"""MDS cache one file's metadata takes, about ("each file inode in MDS uses about 2k memory": Yan, Zheng, CephFS
maintainer, ceph-users, March 2016)."""
MDS_CACHE_SHARE = 0.5
"""The share of an MDS pod's memory limit Rook gives its cache (``mds_cache_memory_limit``, rook
pkg/operator/ceph/file/mds: ``mdsCacheMemoryLimitFactor``; the MDS uses about 125 % of it)."""


def mds_sizing_problems(s: Any) -> list[Problem]:
    """Each Ceph filesystem's active metadata servers cache the metadata of the files its tier's record holds."""
    ceph, found = s.rook_ceph, []
    if not ceph.enabled:
        return []
    cache = quantity_bytes(ceph.resources.mds.memory_limit) * MDS_CACHE_SHARE
    for tier, mds, key in (("warm", ceph.mds, "mds"), ("checkpoint", ceph.checkpoint.mds, "checkpoint.mds")):
        files = getattr(s.tiers.decisions, tier).file_count
        needed = -(-files * INODE_CACHE_BYTES // int(cache))
        if getattr(s.tiers, tier) != "cephfs" or mds.active_count >= needed:
            continue
        arithmetic = (
            f"{files:,} files (tiers.decisions.{tier}.fileCount) x 2 KiB over {gib_text(cache, 1)} of cache per server "
            f"(half of rookCeph.resources.mds.memoryLimit {ceph.resources.mds.memory_limit}): {needed}"
        )
        hint = (
            "a server whose cache cannot hold the tier's metadata reads it back from the metadata pool on every "
            "miss: raise the active count (each with its standby-replay), rookCeph.resources.mds.memoryLimit "
            "(Red Hat advises 8 to 64 GB of cache per server), or set the record to the tier's files"
        )
        found.append(Problem(f"rookCeph.{key}.activeCount", f"expected at least {arithmetic}", mds.active_count, hint))
    return found


def _device_class_problems(
    record: DecisionRecord, pools: str | None, speeds: Mapping[str, DeviceSpeed]
) -> list[Problem]:
    """The record's devices are the class the checkpoint pools use, and their speed is known."""
    key = "tiers.decisions.checkpoint.deviceClass"
    if record.device_class != pools:
        where = f"rookCeph.checkpoint.deviceClass or rookCeph.deviceClass: {pools}" if pools else "unset: every OSD"
        hint = (
            "the record's devices and their MB/s are the devices its checkpoints land on: name the pools' class "
            "in the record (with its devices), or move the pools to the record's class"
            + ("" if pools else "; pools on every OSD have no one class: set deviceClass: null and the MB/s")
        )
        return [Problem(key, f"expected the checkpoint pools' device class ({where})", record.device_class, hint)]
    if record.devices is not None and device_speed(record, speeds) is None:
        known = ", ".join(sorted(speeds))
        hint = "add the class to tiers.deviceSpeeds, or give the record's deviceWriteMbS and deviceReadMbS"
        return [Problem(key, f"expected a class of tiers.deviceSpeeds ({known})", record.device_class, hint)]
    return []


def _claim_problems(record: DecisionRecord, training: Any) -> list[Problem]:
    """The training namespace's checkpoint claim holds the saves a job of the record keeps, plus the one landing."""
    if not training.enabled or record.checkpoint_size_per_rank is None or record.ranks is None:
        return []
    saves = record.kept_checkpoints + 1
    need = quantity_bytes(record.checkpoint_size_per_rank) * record.ranks * saves
    if quantity_bytes(training.checkpoint_size) >= need:
        return []
    arithmetic = (
        f"{record.ranks} ranks x {record.checkpoint_size_per_rank} x {saves} saves (keptCheckpoints "
        f"{record.kept_checkpoints} + the one landing) = {gib_text(need)}"
    )
    hint = (
        "the first saves fill the claim and the next one fails: raise training.checkpointSize, or lower the "
        "record's ranks, checkpointSizePerRank or keptCheckpoints (tiers.decisions.checkpoint) to the jobs' own"
    )
    return [Problem("training.checkpointSize", f"expected at least {arithmetic}", training.checkpoint_size, hint)]
