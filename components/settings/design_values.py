"""The design's numbers, and every place a stack differs from them with the decision that says why.

``DESIGN`` lists the values the design documents give (``../shared/reference``: the JuiceFS StorageClass's mount
options, the in-pod fio benchmark and its bench pod, the JuiceFS cold/warm exercise, the tier pyramid's floors).
``DECISIONS`` records each difference a stack makes: the key, the stacks, the value it takes, why, and how that was
measured (or that it was not). ``differences()`` compares a stack's settings with the design; a difference without
a decision of the same value is undecided: ``tests/unit/test_design_values.py`` fails on it, so a value cannot
change without its record changing too. docs/tiers.md lists them all (generated).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..tiers.acceptance import DESIGN_FLOORS

JUICEFS_STORAGE_CLASS = "reference: the JuiceFS StorageClass (juicefs-ai) mount options"
FIO = "reference: the in-pod fio benchmark (three stories, bench pod 4 CPU / 8 Gi)"


@dataclass(frozen=True)
class DesignValue:
    """A value the design gives, and how to read a stack's value of it (from ``PlatformSettings``)."""

    key: str
    design: Any
    source: str
    read: Callable[[Any], Any]


@dataclass(frozen=True)
class Decision:
    """A stack's value where it differs from the design: why, and measured how. ``stacks``: the profiles that take
    it (a stack of the profile inherits the decision, as it inherits the value)."""

    key: str
    stacks: tuple[str, ...]
    value: Any
    why: str
    measured: str


CAMEL = {"seq_read_mib_s": "seqReadMibS", "seq_write_mib_s": "seqWriteMibS"}


def _floor(tier: str, figure: str) -> DesignValue:
    return DesignValue(
        f"acceptance.thresholds.{tier}.{CAMEL[figure]}",
        getattr(DESIGN_FLOORS[tier], figure),  # type: ignore[index]
        "reference: the tier pyramid (lower end of the tier's range)",
        lambda s: getattr(s.acceptance.floors(tier), figure),
    )


def _runtime(name: str, attr: str) -> DesignValue:
    return DesignValue(
        f"acceptance.stories.{name}.runtimeSeconds",
        60,
        FIO,
        lambda s: getattr(s.acceptance.stories, attr).runtime_seconds,
    )


DESIGN: list[DesignValue] = [
    DesignValue("juicefs.cache.cacheDir", "/var/jfsCache", JUICEFS_STORAGE_CLASS, lambda s: s.juicefs.cache.cache_dir),
    DesignValue("juicefs.cache.cacheSizeMib", 512000, JUICEFS_STORAGE_CLASS, lambda s: s.juicefs.cache.cache_size_mib),
    DesignValue("juicefs.cache.bufferSizeMib", 1024, JUICEFS_STORAGE_CLASS, lambda s: s.juicefs.cache.buffer_size_mib),
    DesignValue("juicefs.cache.prefetch", 3, JUICEFS_STORAGE_CLASS, lambda s: s.juicefs.cache.prefetch),
    DesignValue("juicefs.cache.maxUploads", 40, JUICEFS_STORAGE_CLASS, lambda s: s.juicefs.cache.max_uploads),
    DesignValue(
        "juicefs.cache.openCacheSeconds", 300, JUICEFS_STORAGE_CLASS, lambda s: s.juicefs.cache.open_cache_seconds
    ),
    DesignValue(
        "juicefs.cache.attrCacheSeconds",
        300,
        f"{JUICEFS_STORAGE_CLASS} (metacache-expire=300)",
        lambda s: s.juicefs.cache.attr_cache_seconds,
    ),
    DesignValue(
        "juicefs.cache.entryCacheSeconds",
        300,
        f"{JUICEFS_STORAGE_CLASS} (metacache-expire=300)",
        lambda s: s.juicefs.cache.entry_cache_seconds,
    ),
    DesignValue("acceptance.enabled", True, FIO, lambda s: s.acceptance.enabled),
    DesignValue("acceptance.stories.seqWrite.sizeMib", 10240, FIO, lambda s: s.acceptance.stories.seq_write.size_mib),
    DesignValue("acceptance.stories.seqRead.sizeMib", 10240, FIO, lambda s: s.acceptance.stories.seq_read.size_mib),
    DesignValue("acceptance.stories.randRead.sizeMib", 10240, FIO, lambda s: s.acceptance.stories.rand_read.size_mib),
    *(
        _runtime(name, attr)
        for name, attr in (("seqWrite", "seq_write"), ("seqRead", "seq_read"), ("randRead", "rand_read"))
    ),
    DesignValue("acceptance.resources.cpuRequest", "4", FIO, lambda s: s.acceptance.resources.cpu_request),
    DesignValue("acceptance.resources.memoryRequest", "8Gi", FIO, lambda s: s.acceptance.resources.memory_request),
    *(_floor(tier, figure) for tier in DESIGN_FLOORS for figure in ("seq_read_mib_s", "seq_write_mib_s")),
    DesignValue(
        "acceptance.thresholds.cold.warmColdRatio",
        3.0,
        "reference: the JuiceFS exercise (a warm read three times the cold one)",
        lambda s: s.acceptance.floors("cold").warm_cold_ratio,
    ),
]
"""The design's values the stacks are held to."""

EVERY = ("dev", "staging", "prod")
DEV_FLOORS = (
    "a dev cluster's disks are whatever its laptop or VM has and Ceph keeps one copy on them: 100 MiB/s read and "
    "50 MiB/s write still catch a tier that does not work (stacks/dev.yaml)"
)
NOT_MEASURED = "not measured: a dev cluster's disks are not the production hardware the floor is for"
DECISIONS: list[Decision] = [
    Decision(
        "juicefs.cache.cacheDir",
        EVERY,
        "/var/lib/ai-storage-cache/juicefs",
        "the design's /var/jfsCache is on the node's root disk; the cache gets a volume of its own on the node's "
        "NVMe (components/tiers/node_cache.py)",
        "tests/training/test_doctor.py: the doctor tells a cache on the root filesystem from one on its own volume",
    ),
    Decision(
        "juicefs.cache.cacheSizeMib",
        ("dev",),
        10240,
        "dev nodes have small disks (its cache volume is 16 GiB)",
        "not measured",
    ),
    Decision(
        "juicefs.cache.cacheSizeMib",
        ("staging",),
        204800,
        "a tenth of production's datasets (tiers.decisions.cold in stacks/staging.yaml)",
        "not measured",
    ),
    Decision(
        "juicefs.cache.cacheSizeMib",
        ("prod",),
        1048576,
        "the hot working set of the cold tier's datasets (tiers.decisions.cold: 10 TiB of shards) is larger than "
        "the design's 500 GB example",
        "not measured; sized from the decision record",
    ),
    Decision(
        "juicefs.cache.bufferSizeMib",
        ("prod",),
        2048,
        "prod's mount pods read ahead for more concurrent readers per node than the design's example",
        "not measured",
    ),
    Decision(
        "juicefs.cache.maxUploads",
        EVERY,
        20,
        "JuiceFS's own default: checkpoints land on the checkpoint tier (CephFS), so the cold tier uploads only "
        "dataset versions and artifacts, where 20 PUTs in flight per client already fill the link",
        "benchmarks/checkpoints.py (the generated max-uploads, with 4 ranks writing through one client each)",
    ),
    Decision(
        "juicefs.cache.openCacheSeconds",
        EVERY,
        0,
        "the cold tier is written as well as read (dataset versions, artifacts): an open-file cache of 300 s would "
        "serve a file's old attributes to other clients; read-only datasets get it through Fluid instead",
        "not measured",
    ),
    *(
        Decision(
            f"juicefs.cache.{key}",
            EVERY,
            1,
            "a client keeps the kernel's cached entry of a file another client removed for this long: lock files "
            "of a multi-rank save meet it (300 s would stall a save for minutes)",
            "tests/datapath/test_datapath_rank_clients.py (two JuiceFS clients of one volume)",
        )
        for key in ("attrCacheSeconds", "entryCacheSeconds")
    ),
    *(
        Decision(
            f"acceptance.stories.{name}.sizeMib", ("dev",), size, "a dev cluster's volumes are small", NOT_MEASURED
        )
        for name, size in (("seqWrite", 256), ("seqRead", 256), ("randRead", 128))
    ),
    *(
        Decision(
            f"acceptance.stories.{name}.runtimeSeconds",
            ("dev",),
            30,
            "the Jobs run on every dev `pulumi up`",
            NOT_MEASURED,
        )
        for name in ("seqWrite", "seqRead", "randRead")
    ),
    Decision("acceptance.resources.cpuRequest", ("dev",), "500m", "dev nodes are small", NOT_MEASURED),
    Decision("acceptance.resources.memoryRequest", ("dev",), "256Mi", "dev nodes are small", NOT_MEASURED),
    *(
        Decision(f"acceptance.thresholds.{tier}.seqReadMibS", ("dev",), 100, DEV_FLOORS, NOT_MEASURED)
        for tier in DESIGN_FLOORS
    ),
    *(
        Decision(f"acceptance.thresholds.{tier}.seqWriteMibS", ("dev",), 50, DEV_FLOORS, NOT_MEASURED)
        for tier in DESIGN_FLOORS
    ),
    Decision(
        "acceptance.thresholds.cold.warmColdRatio",
        ("dev",),
        1.3,
        "dev's object store (MinIO) runs in the cluster beside the cache, so a cold read is not much slower than a "
        "warm one; 1.3x still catches a cache that serves nothing",
        "the data path measured packed shards at 117.4 MB/s cold and 163.3 MB/s warm (1.4x, docs/tiers.md)",
    ),
]
"""Every difference the stacks make from ``DESIGN``, decided."""


def differences(settings: Any) -> list[tuple[DesignValue, Any, Decision | None]]:
    """Where a stack's settings differ from the design: (the design's value, the stack's, its decision or None)."""
    found = []
    profile = settings.profile
    for value in DESIGN:
        actual = value.read(settings)
        if actual == value.design:
            continue
        decision = next(
            (d for d in DECISIONS if d.key == value.key and profile in d.stacks and d.value == actual), None
        )
        found.append((value, actual, decision))
    return found
