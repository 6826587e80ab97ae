"""The monitoring on the real programs: every metric the rules and dashboards use appears in a real scrape (the
JuiceFS client's `--metrics` and redis_exporter beside the harness's redis-server), and a real Prometheus
scraping both during a cold and a warm read computes a low cache hit ratio after the cold pass and a high one
after the warm pass."""

from __future__ import annotations

import json
import os
import re
import time

import harness
import observability
import pytest

from components.alert_rules import RuleSettings, rule_groups
from components.dashboards import dashboards

WINDOW_SECONDS = 10
FILE_BYTES = 32 * 1024 * 1024

OTHER_EXPORTERS = {
    "ceph_health_status": "Ceph mgr prometheus module (Rook: CephCluster monitoring)",
    "ceph_pool_rd_bytes": "Ceph mgr prometheus module",
    "ceph_pool_wr_bytes": "Ceph mgr prometheus module",
    "ceph_pool_metadata": "Ceph mgr prometheus module",
    "volcano_queue_pod_group_pending_count": "volcano-sh/volcano pkg/scheduler/metrics (scheduler, port 8080)",
    "topolvm_volumegroup_available_bytes": "topolvm/topolvm node metrics (chart PodMonitor)",
}
"""Metrics of exporters that cannot run on this machine, with where they come from."""


def used_metrics() -> set[str]:
    groups = rule_groups(RuleSettings(), replicas=2, ceph=True, volcano=True)
    exprs = [r["expr"] for g in groups for r in g["rules"]]
    exprs += [
        t["expr"] for board in dashboards("5m").values() for p in json.loads(board)["panels"] for t in p["targets"]
    ]
    names = set()
    for expr in exprs:
        for name in re.findall(r"(?<![:\w])((?:juicefs|redis|ceph|volcano|topolvm|minio)_[a-z0-9_]+)", expr):
            names.add(
                re.sub(r"_(bucket|sum|count)$", "", name) if "histogram" in name or "size_bytes" in name else name
            )
    return names


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


def test_every_metric_the_rules_and_dashboards_use_is_exported(mounted, exporter, replica_and_sentinel):
    file = mounted.mountpoint / "metrics-probe.bin"
    file.write_bytes(os.urandom(8 * 1024 * 1024))
    file.read_bytes()
    scraped = observability.metric_names(observability.scrape(mounted.metrics_port))
    for port in (exporter, *replica_and_sentinel):
        scraped |= observability.metric_names(observability.scrape(port))
    used = used_metrics()
    assert {"juicefs_fuse_read_size_bytes", "redis_master_link_up", "redis_sentinel_master_status"} <= used
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
