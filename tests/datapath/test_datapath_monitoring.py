"""The monitoring on the real programs: every metric the rules and dashboards use appears in a real scrape (the
JuiceFS client's `--metrics`, redis_exporter beside the harness's redis-server, and a job using the training
library), and a real Prometheus with the generated rules computes a low cache hit ratio after a cold read and
a high one after a warm read, and a low prefetch hit ratio for a job reading cold with nothing prefetched and a
high one for a job whose reader runs ahead of its work."""

from __future__ import annotations

import json
import os
import re
import time

import harness
import observability
import pytest

from components.observability.alert_rules import RuleSettings, rule_groups
from components.observability.dashboards import dashboards

WINDOW_SECONDS = 10
FILE_BYTES = 32 * 1024 * 1024
PREFETCH_FILES = 48

OTHER_EXPORTERS = {
    "ceph_health_status": "Ceph mgr prometheus module (Rook: CephCluster monitoring)",
    "ceph_pool_rd_bytes": "Ceph mgr prometheus module",
    "ceph_pool_wr_bytes": "Ceph mgr prometheus module",
    "ceph_pool_metadata": "Ceph mgr prometheus module",
    "volcano_queue_pod_group_pending_count": "volcano-sh/volcano pkg/scheduler/metrics (scheduler, port 8080)",
    "topolvm_volumegroup_available_bytes": "topolvm/topolvm node metrics (chart PodMonitor)",
    **dict.fromkeys(
        [
            "kube_cronjob_created",
            "kube_cronjob_next_schedule_time",
            "kube_cronjob_status_last_schedule_time",
            "kube_cronjob_status_last_successful_time",
            "kube_job_failed",
            "kube_job_owner",
            "kube_job_status_start_time",
            "kube_job_status_failed",
        ],
        "kube-state-metrics (kube-prometheus-stack), docs/metrics/workload/{cronjob,job}-metrics.md",
    ),
}
"""Metrics of exporters that cannot run on this machine, with where they come from."""


def used_metrics() -> set[str]:
    groups = rule_groups(RuleSettings(), replicas=2, ceph=True, volcano=True, acceptance="storage-acceptance")
    exprs = [r["expr"] for g in groups for r in g["rules"]]
    exprs += [
        t["expr"]
        for board in dashboards("5m").values()
        for p in json.loads(board)["panels"]
        for t in p.get("targets", [])
    ]
    names = set()
    for expr in exprs:
        # Label names are no metrics: drop grouping clauses (`by (ai_storage_platform_data_tier)`) and matchers.
        expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
        expr = re.sub(r"\{[^}]*\}", "", expr)
        for name in re.findall(
            r"(?<![:\w])((?:juicefs|redis|ceph|volcano|topolvm|minio|ai_storage|kube)_[a-z0-9_]+)", expr
        ):
            names.add(
                re.sub(r"_(bucket|sum|count)$", "", name) if "histogram" in name or "size_bytes" in name else name
            )
    return names


def training_job_scrape(root, workdir) -> str:
    """The metrics of a job using the training library after it read a few files through the prefetching
    reader, saved and restored a checkpoint and failed a save, on the JuiceFS mount: the names the rules
    read, and values that count what the job did."""
    data = root / "data"
    data.mkdir(parents=True)
    for i in range(4):
        (data / f"part-{i}.bin").write_bytes(os.urandom(64 * 1024))
    with observability.training_job(workdir / "training-job") as job:
        job.run("read", data, 2, 2, 0)
        job.run("checkpoint", root / "checkpoints")
        text = observability.scrape(job.port)
    values = observability.samples(text)
    hits, misses = values["ai_storage_prefetch_hits_total"], values["ai_storage_prefetch_misses_total"]
    assert hits + misses == 4 and values["ai_storage_read_bytes_total"] == 4 * 64 * 1024
    assert values["ai_storage_read_seconds_count"] == 4
    assert values["ai_storage_checkpoint_save_seconds_count"] == 1
    assert values["ai_storage_checkpoint_restore_seconds_count"] == 1
    assert values["ai_storage_checkpoint_save_failures_total"] == 1
    return text


@pytest.fixture(scope="module")
def passwords(generated, tmp_path_factory):
    path = tmp_path_factory.mktemp("exporter") / "generated-passwords.json"
    path.write_text(generated["exporter_passwords"])
    return path


@pytest.fixture(scope="module")
def exporter(stack, passwords):
    with observability.redis_exporter(stack.redis.port, passwords, passwords.parent) as port:
        yield port


@pytest.fixture(scope="module")
def replica_and_sentinel(stack, generated, passwords):
    """A replica of the harness's Redis (the generated conf plus replicaof) and a Sentinel watching the primary,
    each with a redis_exporter: the metrics only replicas and Sentinels export."""
    workdir = passwords.parent
    password = stack.redis.password
    replica_conf = f"{generated['redis_conf']}replicaof {harness.LOOPBACK} {stack.redis.port}\nmasterauth {password}\n"
    with harness.redis_server(replica_conf, workdir / "replica") as replica:
        sentinel_port = harness.free_port()
        conf = workdir / "sentinel.conf"
        conf.write_text(
            f"bind {harness.LOOPBACK}\nport {sentinel_port}\nrequirepass {password}\n"
            f"sentinel monitor juicefs {harness.LOOPBACK} {stack.redis.port} 1\nsentinel auth-pass juicefs {password}\n"
        )
        log = workdir / "sentinel.log"
        with open(log, "wb") as out:
            sentinel = harness.subprocess.Popen(
                [harness.find_binary("redis-sentinel"), str(conf)], stdout=out, stderr=harness.subprocess.STDOUT
            )
        try:
            harness._wait_port(sentinel_port, sentinel, "redis-sentinel", log, 20)
            with (
                observability.redis_exporter(replica.port, passwords, workdir) as replica_metrics,
                observability.redis_exporter(sentinel_port, passwords, workdir) as sentinel_metrics,
            ):
                time.sleep(2)  # the replica links to the primary; the Sentinel sees it
                yield replica_metrics, sentinel_metrics
        finally:
            harness._stop(sentinel)


def test_every_metric_the_rules_and_dashboards_use_is_exported(mounted, exporter, replica_and_sentinel, tmp_path):
    file = mounted.mountpoint / "metrics-probe.bin"
    file.write_bytes(os.urandom(8 * 1024 * 1024))
    file.read_bytes()
    scraped = observability.metric_names(observability.scrape(mounted.metrics_port))
    for port in (exporter, *replica_and_sentinel):
        scraped |= observability.metric_names(observability.scrape(port))
    scraped |= observability.metric_names(training_job_scrape(mounted.mountpoint / "training-probe", tmp_path))
    used = used_metrics()
    assert {"juicefs_fuse_read_size_bytes", "redis_master_link_up", "redis_sentinel_master_status"} <= used
    assert {"ai_storage_prefetch_hits_total", "ai_storage_checkpoint_save_seconds_count"} <= used
    missing = sorted(used - scraped - set(OTHER_EXPORTERS))
    assert not missing, f"used but not exported by juicefs or redis_exporter: {missing}"
    assert "ceph_health_status" in used and used & set(OTHER_EXPORTERS) == set(OTHER_EXPORTERS)


def test_prometheus_computes_a_low_cache_hit_ratio_cold_and_a_high_one_warm(mounted, exporter, tmp_path):
    groups = rule_groups(RuleSettings(window=f"{WINDOW_SECONDS}s"), replicas=None, ceph=False, volcano=False)
    targets = {"juicefs": mounted.metrics_port, "redis": exporter}
    data = mounted.mountpoint / "hit-ratio.bin"
    data.write_bytes(os.urandom(FILE_BYTES))  # closed: uploaded to the object store
    with observability.prometheus(targets, groups, tmp_path / "prometheus") as prom:
        prom.wait_targets_up(2)
        assert prom.value("redis_up") == 1.0
        for block in mounted.cache_block_files():  # the cold pass reads from the object store
            block.unlink()
        time.sleep(WINDOW_SECONDS + 2)  # the write's cache traffic leaves the window
        harness.drop_page_cache()
        data.read_bytes()
        time.sleep(3)
        cold = prom.value("max(ai_storage:juicefs_cache_hit_ratio)")
        time.sleep(WINDOW_SECONDS + 2)  # the cold pass leaves the window
        harness.drop_page_cache()
        data.read_bytes()
        time.sleep(3)
        warm = prom.value("max(ai_storage:juicefs_cache_hit_ratio)")
    print(f"cache hit ratio computed by the rules: cold {cold:.2f}, warm {warm:.2f}")
    assert cold is not None and warm is not None
    assert cold < 0.2 and warm > 0.9


def test_prometheus_computes_a_low_prefetch_hit_ratio_cold_and_a_high_one_warm(mounted, tmp_path):
    """A job reads the same files twice through the training library's reader: cold (its cache blocks and the
    page cache dropped, one file ahead and no work per file: every read waits) and warm (eight files ahead of a
    job that works 20 ms per file). Prometheus, scraping the job, computes the hit ratio from the generated
    recording rule, and the generated alert conditions (< 80 % warning, < 60 % critical) see the difference."""
    groups = rule_groups(RuleSettings(window=f"{WINDOW_SECONDS}s"), replicas=None, ceph=False, volcano=False)
    t = RuleSettings().thresholds.prefetch_hit_ratio_percent
    data = mounted.mountpoint / "prefetch"
    data.mkdir()
    for i in range(PREFETCH_FILES):
        (data / f"sample-{i:03d}.bin").write_bytes(os.urandom(256 * 1024))  # closed: uploaded
    with (
        observability.training_job(tmp_path / "training-job") as job,
        observability.prometheus({"training": job.port}, groups, tmp_path / "prometheus") as prom,
    ):
        prom.wait_targets_up(1)
        for block in mounted.cache_block_files():  # the cold pass reads from the object store
            block.unlink()
        harness.drop_page_cache()
        job.run("read", data, 1, 1, 0)
        time.sleep(3)
        cold = prom.value("max(ai_storage:prefetch_hit_ratio)")
        cold_alerts = [
            len(prom.query(f"ai_storage:prefetch_hit_ratio * 100 < {level:g}")) for level in (t.warning, t.critical)
        ]
        time.sleep(WINDOW_SECONDS + 2)  # the cold pass leaves the window
        job.run("read", data, 8, 4, 0.02)
        time.sleep(3)
        warm = prom.value("max(ai_storage:prefetch_hit_ratio)")
        warm_alerts = [
            len(prom.query(f"ai_storage:prefetch_hit_ratio * 100 < {level:g}")) for level in (t.warning, t.critical)
        ]
    print(f"prefetch hit ratio computed by the rules: cold {cold:.2f}, warm {warm:.2f}")
    assert cold is not None and warm is not None
    assert cold < 0.2 and warm > 0.9
    assert cold_alerts == [1, 1] and warm_alerts == [0, 0]  # cold: warning and critical; warm: neither
