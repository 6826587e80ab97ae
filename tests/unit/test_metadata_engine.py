"""MetadataEngine: Redis configured so JuiceFS never loses metadata."""

import json

import pulumi
import pytest

from components.backends.metadata_engines.elasticache import ElastiCacheSettings
from components.backends.metadata_engines.redis import redis_conf
from components.backends.metadata_engines.redis_sentinel import SentinelSettings, replication_lines, sentinel_conf
from components.common import versions
from components.common.sections import Resources, SettingsError
from components.settings import load_settings
from components.tiers.metadata_engine import (
    MetadataEngine,
    MetadataEngineArgs,
    MetadataSettings,
    migration_problem,
    previous_engine,
    previous_flavor,
)
from components.toolchain import mock_engine, render
from components.toolchain.cli import main
from tests.conftest import by_name, objects, stack_settings

ELASTICACHE = {"subnetIds": ["subnet-0a", "subnet-0b"], "securityGroupIds": ["sg-01"]}


STANDALONE = MetadataSettings(engine="standalone")


def engine(settings: MetadataSettings = STANDALONE, protect: bool = False) -> MetadataEngine:
    built = MetadataEngine("meta", MetadataEngineArgs(settings, protect))
    pulumi.export("host", built.host)
    pulumi.export("url", built.url)
    return built


def test_redis_conf_is_durable_and_never_evicts():
    conf = redis_conf(MetadataSettings(), "pw").splitlines()
    for line in ("appendonly yes", "appendfsync everysec", "maxmemory-policy noeviction", "requirepass pw"):
        assert line in conf
    assert "maxmemory 1717986918" in conf  # 80% of the 2Gi limit


def test_redis_runs_the_pinned_image_with_probes_limits_and_its_own_volume(build):
    settings = MetadataSettings(engine="standalone", storage_size="5Gi", resources=Resources(memory_limit="1Gi"))
    result, _ = build(lambda: engine(settings))
    sts = by_name(result, "StatefulSet", "redis")
    container = sts["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == versions.REDIS_IMAGE
    assert container["livenessProbe"] and container["readinessProbe"]
    assert container["resources"]["limits"]["memory"] == "1Gi"
    assert sts["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"] == "5Gi"


def test_durability_flags_are_on_the_command_line_where_a_reviewer_sees_them(build):
    result, _ = build(engine)
    command = by_name(result, "StatefulSet", "redis")["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[command.index("--appendonly") + 1] == "yes"
    assert command[command.index("--maxmemory-policy") + 1] == "noeviction"


def test_password_and_url_are_secrets(build):
    result, _ = build(engine)
    assert by_name(result, "Secret", "redis-config")["stringData"] == {"password": "[secret]", "redis.conf": "[secret]"}
    assert result.outputs == {"host": "redis.juicefs-meta.svc.cluster.local", "url": "[secret]"}
    assert "mock-meta-password" not in str(result.plan)


def test_the_data_volume_is_protected_only_when_asked(build):
    for protect in (False, True):
        _, monitor = build(lambda protect=protect: engine(protect=protect))
        redis = next(r for r in monitor.registrations if r.type == "kubernetes:apps/v1:StatefulSet")
        assert (redis.protect, redis.retain_on_delete) == (protect, protect)


# ---------------------------------------------------------------- Redis with Sentinel


def sentinel_engine(**sentinel: object) -> MetadataEngine:
    return engine(MetadataSettings(engine="sentinel", sentinel=SentinelSettings(**sentinel)))


def test_sentinel_layout_runs_a_primary_with_replicas_and_a_majority_of_sentinels(build):
    result, _ = build(lambda: sentinel_engine(replicas=2, sentinels=3))
    data, sentinels = by_name(result, "StatefulSet", "redis"), by_name(result, "StatefulSet", "redis-sentinel")
    assert data["spec"]["replicas"] == 3 and sentinels["spec"]["replicas"] == 3
    conf = sentinel_conf(SentinelSettings(sentinels=3), "pw").splitlines()
    assert "sentinel monitor juicefs @PRIMARY@ 6379 2" in conf  # a majority of three
    assert "requirepass pw" in conf and "sentinel auth-pass juicefs pw" in conf


@pytest.mark.parametrize("count", range(1, 8))
def test_the_sentinel_quorum_is_a_strict_majority_of_every_allowed_count(count):
    conf = sentinel_conf(SentinelSettings(sentinels=count), "pw").splitlines()
    (monitor,) = [line for line in conf if line.startswith("sentinel monitor")]
    quorum = int(monitor.split()[-1])
    assert count / 2 < quorum <= count, monitor


@pytest.mark.parametrize("percent", [96, 100, 150])
def test_redis_may_not_use_more_than_95_percent_of_its_memory_limit(percent):
    """Above that, Redis's own overhead (AOF rewrite buffers, client buffers) meets the container limit: the
    kernel kills it instead of Redis refusing writes."""
    with pytest.raises(SettingsError) as caught:
        load_settings("dev", {"metadata": {"maxmemoryPercent": percent}})
    assert "metadata.maxmemoryPercent: expected a number <= 95" in str(caught.value)
    assert load_settings("dev", {"metadata": {"maxmemoryPercent": 95}}).metadata.maxmemory_percent == 95


def test_every_data_node_is_durable_and_the_sentinels_are_not_data_nodes(build):
    result, _ = build(sentinel_engine)
    data = by_name(result, "StatefulSet", "redis")["spec"]["template"]["spec"]["containers"][0]
    assert data["command"][-4:] == ["--appendonly", "yes", "--maxmemory-policy", "noeviction"]
    conf = redis_conf(MetadataSettings(), "pw", *replication_lines(SentinelSettings(), "pw")).splitlines()
    assert {"appendonly yes", "maxmemory-policy noeviction", "masterauth pw", "min-replicas-to-write 1"} <= set(conf)
    assert not by_name(result, "StatefulSet", "redis-sentinel")["spec"].get("volumeClaimTemplates")


def test_pods_of_each_kind_are_spread_over_nodes_and_budgeted(build):
    result, _ = build(sentinel_engine)
    for name in ("redis", "redis-sentinel"):
        spec = by_name(result, "StatefulSet", name)["spec"]
        labels = spec["selector"]["matchLabels"]
        anti = spec["template"]["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert anti == [{"labelSelector": {"matchLabels": labels}, "topologyKey": "kubernetes.io/hostname"}]
        budget = by_name(result, "PodDisruptionBudget", name)["spec"]
        assert budget == {"maxUnavailable": 1, "selector": {"matchLabels": labels}}


def test_preferred_spread_lets_pods_share_a_node(build):
    result, _ = build(lambda: sentinel_engine(spread="preferred"))
    affinity = by_name(result, "StatefulSet", "redis")["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    assert list(affinity) == ["preferredDuringSchedulingIgnoredDuringExecution"]


def test_the_metadata_url_is_the_sentinel_form_and_secret(build):
    url = {}

    def program() -> None:
        built = sentinel_engine(sentinels=3)
        built.url.apply(lambda u: url.setdefault("url", u))

    result, _ = build(program)
    sentinels = ",".join(f"redis-sentinel-{i}.redis-sentinel.juicefs-meta.svc.cluster.local" for i in range(3))
    timing = "read-timeout=5s&max-retry-backoff=2s"  # fail over in seconds, not JuiceFS's default 30 s read timeout
    assert url["url"] == f"redis://:mock-meta-password@juicefs,{sentinels}:26379/1?{timing}"
    assert result.outputs["url"] == "[secret]"
    assert result.outputs["host"] == "redis-sentinel.juicefs-meta.svc.cluster.local"


def test_pods_find_their_peers_by_stable_dns_names(build):
    result, _ = build(lambda: sentinel_engine(replicas=1, sentinels=3))
    env = {
        e["name"]: e.get("value")
        for e in by_name(result, "StatefulSet", "redis")["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["SELF_HOST"] == "$(POD_NAME).redis.juicefs-meta.svc.cluster.local"
    assert env["NODES"].split() == [f"redis-{i}.redis.juicefs-meta.svc.cluster.local" for i in range(2)]
    assert env["INITIAL_PRIMARY"] == "redis-0.redis.juicefs-meta.svc.cluster.local"
    assert len(env["SENTINELS"].split()) == 3
    headless = by_name(result, "Service", "redis")["spec"]
    assert headless["clusterIP"] == "None" and headless["publishNotReadyAddresses"] is True


# ---------------------------------------------------------------- ElastiCache


def test_elasticache_is_multi_az_encrypted_and_never_evicts(build):
    settings = MetadataSettings(
        engine="elasticache",
        elasticache=ElastiCacheSettings(subnet_ids=["subnet-0a", "subnet-0b"], security_group_ids=["sg-01"]),
    )
    url = {}

    def program() -> None:
        built = engine(settings, protect=True)
        built.url.apply(lambda u: url.setdefault("url", u))

    _, monitor = build(program)
    group = next(r for r in monitor.registrations if r.type == "aws:elasticache/replicationGroup:ReplicationGroup")
    i = group.inputs
    assert (i["numCacheClusters"], i["automaticFailoverEnabled"], i["multiAzEnabled"]) == (3, True, True)
    assert i["transitEncryptionEnabled"] and i["atRestEncryptionEnabled"] and i["authToken"] == "[secret]"
    assert i["snapshotRetentionLimit"] == 7 and (group.protect, group.retain_on_delete) == (True, True)
    params = next(r for r in monitor.registrations if r.type == "aws:elasticache/parameterGroup:ParameterGroup")
    assert params.inputs["parameters"] == [{"name": "maxmemory-policy", "value": "noeviction"}]
    assert url["url"].startswith("rediss://:mock-meta-auth-token@") and url["url"].endswith(":6379/1")
    assert not [r for r in monitor.registrations if r.type.startswith("kubernetes:")]


def test_elasticache_takes_an_engine_version_of_its_family_and_a_customer_key(build):
    key = "arn:aws:kms:eu-west-3:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
    chosen = ElastiCacheSettings(subnet_ids=["subnet-0a"], security_group_ids=["sg-01"], engine_version="8.2",
                                 kms_key_id=key)  # fmt: skip
    settings = MetadataSettings(engine="elasticache", flavor="valkey", elasticache=chosen)
    _, monitor = build(lambda: engine(settings, protect=True))
    group = next(r for r in monitor.registrations if r.type == "aws:elasticache/replicationGroup:ReplicationGroup")
    assert (group.inputs["engineVersion"], group.inputs["kmsKeyId"]) == ("8.2", key)
    pinned = MetadataSettings(engine="elasticache", flavor="valkey", elasticache=ElastiCacheSettings(**ELASTICACHE))
    _, monitor = build(lambda: engine(pinned, protect=True))
    group = next(r for r in monitor.registrations if r.type == "aws:elasticache/replicationGroup:ReplicationGroup")
    assert group.inputs["engineVersion"] == versions.ELASTICACHE_ENGINES["valkey"][1] and "kmsKeyId" not in group.inputs
    with pytest.raises(SettingsError) as refused:
        stack_settings("eks-gpu-prod", {"metadata": {"elasticache": {"engineVersion": "7.2"}}})
    (problem,) = refused.value.problems
    assert problem.key == "metadata.elasticache.engineVersion" and "valkey 8.x" in problem.expected


def test_a_new_elasticache_key_replaces_the_group_and_blocks():
    from components.toolchain import plan_diff

    group = {"type": "aws:elasticache/replicationGroup:ReplicationGroup", "name": "meta", "parent": None,
             "dependsOn": [], "inputs": {"engine": "valkey", "kmsKeyId": "arn:a"}}  # fmt: skip
    keyed = {**group, "inputs": {**group["inputs"], "kmsKeyId": "arn:b"}}
    diff = plan_diff.diff_stack("p", plan_diff.Render({"resources": [group]}, {}),
                                plan_diff.Render({"resources": [keyed]}, {}), [])  # fmt: skip
    (change,) = diff.changes
    assert change.action == "replace" and change.blocking and "`.kmsKeyId` changed" in change.reasons[0]


# ---------------------------------------------------------------- layout rules and the migration guard


@pytest.mark.parametrize(
    ("metadata", "key"),
    [
        ({"engine": "standalone"}, "metadata.engine"),
        ({"sentinel": {"replicas": 1}}, "metadata.sentinel.replicas"),
        ({"sentinel": {"sentinels": 2}}, "metadata.sentinel.sentinels"),
        ({"sentinel": {"spread": "preferred"}}, "metadata.sentinel.spread"),
        ({"engine": "elasticache", "elasticache": ELASTICACHE | {"replicas": 0}}, "metadata.elasticache.replicas"),
    ],
)
def test_a_protected_stack_refuses_a_layout_that_a_node_loss_stops(metadata, key):
    with pytest.raises(SettingsError) as caught:
        load_settings("prod", {"metadata": metadata})
    message = str(caught.value)
    assert f"{key}:" in message and "acceptNodeLossRisk" in message
    assert load_settings("prod", {"metadata": {**metadata, "acceptNodeLossRisk": True}})


def test_an_unprotected_stack_may_run_one_redis():
    assert load_settings("dev", {}).metadata.engine == "standalone"


@pytest.mark.parametrize(
    ("config", "key", "expected"),
    [
        ({"metadata": {"engine": "memcached"}}, "metadata.engine", "expected one of 'standalone', 'sentinel'"),
        (
            {"metadata": {"engine": "sentinel", "sentinel": {"minReplicasToWrite": 3}}},
            "metadata.sentinel.minReplicasToWrite",
            "at most",
        ),
        ({"metadata": {"sentinel": {"downAfterSeconds": 0}}}, "metadata.sentinel.downAfterSeconds", ">= 1"),
        (
            {"metadata": {"sentinel": {"clientReadTimeoutSeconds": 0}}},
            "metadata.sentinel.clientReadTimeoutSeconds",
            ">= 1",
        ),
        (
            {"metadata": {"sentinel": {"clientMaxRetryBackoffSeconds": "soon"}}},
            "metadata.sentinel.clientMaxRetryBackoffSeconds",
            "whole number",
        ),
        ({"metadata": {"sentinel": {"masterName": "Primary"}}}, "metadata.sentinel.masterName", "DNS label"),
        ({"metadata": {"engine": "elasticache"}}, "metadata.engine", "objectStore.backend is s3"),
        ({"metadata": {"engine": "elasticache"}}, "metadata.elasticache.subnetIds", "expected at least one"),
        ({"metadata": {"elasticache": {"subnetIds": ["vpc-1"]}}}, "metadata.elasticache.subnetIds[0]", "matching"),
        ({"metadata": {"elasticache": {"nodeType": "r7g.large"}}}, "metadata.elasticache.nodeType", "matching"),
        ({"metadata": {"elasticache": {"snapshotWindow": "3-4"}}}, "metadata.elasticache.snapshotWindow", "matching"),
        ({"metadata": {"migratedFrom": "etcd"}}, "metadata.migratedFrom", "expected one of"),
    ],
)
def test_bad_metadata_settings_are_rejected_with_key_and_hint(config, key, expected):
    with pytest.raises(SettingsError) as caught:
        load_settings("dev", config)
    message = str(caught.value)
    assert f"{key}:" in message and expected in message and "Hint:" in message


def test_a_protected_stack_refuses_to_change_the_engine_it_deployed():
    prod = MetadataSettings()  # sentinel
    problem = migration_problem("standalone", prod, protected=True)
    assert problem is not None and problem.key == "metadata.engine"
    assert "docs/runbook.md#move-the-metadata-to-another-engine" in problem.hint
    assert migration_problem("standalone", MetadataSettings(migrated_from="standalone"), protected=True) is None
    assert migration_problem("standalone", prod, protected=False) is None
    assert migration_problem(None, prod, protected=True) is None  # a first deployment
    assert migration_problem("sentinel", prod, protected=True) is None


ENGINES = ("standalone", "sentinel", "elasticache")


@pytest.mark.parametrize("previous", ENGINES)
@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("migrated_from", [None, *ENGINES])
def test_only_migrated_from_the_engine_being_left_lets_a_protected_stack_change_engine(previous, engine, migrated_from):
    """Every combination: a change of engine passes only when `migratedFrom` names the engine being left."""
    s = MetadataSettings(engine=engine, migrated_from=migrated_from, accept_node_loss_risk=True)
    problem = migration_problem(previous, s, protected=True)
    assert (problem is None) == (engine == previous or migrated_from == previous), problem


def test_stacks_deployed_before_the_engine_was_a_choice_ran_one_redis():
    assert previous_engine({"metadataService": "redis.juicefs-meta.svc.cluster.local"}) == "standalone"
    assert previous_engine({"metadataEngine": "sentinel", "metadataService": "x"}) == "sentinel"
    assert previous_engine({}) is None


def test_a_refused_change_creates_nothing(build, monkeypatch):
    monitors = []

    class Kept(mock_engine.RecordingMonitor):
        def __init__(self, mocks):
            super().__init__(mocks)
            monitors.append(self)

    monkeypatch.setattr(mock_engine, "RecordingMonitor", Kept)
    settings = MetadataSettings()
    with pytest.raises(SettingsError, match=r"metadata\.engine: expected standalone"):
        build(lambda: MetadataEngine("meta", MetadataEngineArgs(settings, protect=True, previous_engine="standalone")))
    assert monitors[0].registrations == []  # not even the component: everything waits for the guard


def test_the_cli_refuses_to_move_a_protected_stack_off_its_engine(tmp_path, capsys):
    previous = tmp_path / "outputs.json"
    previous.write_text('{"metadataService": "redis.juicefs-meta.svc.cluster.local"}')  # deployed before: one Redis
    out = tmp_path / "out"
    assert main(["render", "--stack", "prod", "--stack-outputs", str(previous), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "metadata.engine: expected standalone" in err and "metadata.migratedFrom: standalone" in err
    assert "Traceback" not in err and not out.exists()


def test_a_protected_stack_updates_again_from_the_outputs_it_exported(tmp_path, capsys):
    """The guard reads the engine from the stack's own last outputs: prod (Sentinel) must export it, or its next
    update would read the old `metadataService` fallback (one Redis) and refuse itself."""
    first = tmp_path / "first"
    assert main(["render", "--stack", "prod", "--out", str(first)]) == 0
    outputs = json.loads((first / "outputs.json").read_text())
    assert outputs["metadataEngine"] == "sentinel"
    again = tmp_path / "again"
    previous = first / "outputs.json"
    assert main(["render", "--stack", "prod", "--stack-outputs", str(previous), "--out", str(again)]) == 0, (
        capsys.readouterr().err
    )


# ---------------------------------------------------------------- Valkey


def containers(result, name: str) -> list[dict]:
    return by_name(result, "StatefulSet", name)["spec"]["template"]["spec"]["containers"]


def test_valkey_standalone_runs_the_valkey_image_and_programs_with_the_same_durable_config(build):
    result, _ = build(lambda: engine(MetadataSettings(engine="standalone", flavor="valkey")))
    (server,) = containers(result, "valkey")  # its own StatefulSet, so its claims are new, never Redis's
    assert by_name(result, "Service", "redis")["spec"]["selector"]["app.kubernetes.io/name"] == "valkey"
    assert server["image"] == versions.VALKEY_IMAGE and server["command"][0] == "valkey-server"
    assert "valkey-cli -p 6379 ping" in server["livenessProbe"]["exec"]["command"][-1]
    assert server["command"][server["command"].index("--maxmemory-policy") + 1] == "noeviction"
    assert "redis" not in versions.VALKEY_IMAGE and ":latest" not in versions.VALKEY_IMAGE


def test_valkey_with_sentinel_starts_valkey_programs_in_every_pod(build):
    settings = MetadataSettings(engine="sentinel", flavor="valkey")
    result, _ = build(lambda: engine(settings))
    for name, port in (("valkey", 6379), ("redis-sentinel", 26379)):
        (pod,) = containers(result, name)
        assert pod["image"] == versions.VALKEY_IMAGE
        assert {"name": "ENGINE", "value": "valkey"} in pod["env"]
        assert f"valkey-cli -p {port} ping" in pod["readinessProbe"]["exec"]["command"][-1]
    env = {e["name"]: e.get("value") for e in containers(result, "valkey")[0]["env"]}
    assert env["INITIAL_PRIMARY"] == "valkey-0.redis.juicefs-meta.svc.cluster.local"  # the StatefulSet's pods
    assert env["NODES"].split()[1] == "valkey-1.redis.juicefs-meta.svc.cluster.local"
    script = by_name(result, "ConfigMap", "redis-start")["data"]["start.sh"]
    assert 'exec "$ENGINE-server"' in script and 'exec "$ENGINE-sentinel"' in script and "redis-cli" not in script


@pytest.mark.parametrize(
    ("flavor", "expected"), [("redis", ("redis", "7.1", "redis7")), ("valkey", ("valkey", "8.1", "valkey8"))]
)
def test_elasticache_runs_the_flavors_engine_and_parameter_family(build, flavor, expected):
    settings = MetadataSettings(
        engine="elasticache",
        flavor=flavor,
        elasticache=ElastiCacheSettings(
            **{"subnet_ids": ELASTICACHE["subnetIds"], "security_group_ids": ELASTICACHE["securityGroupIds"]}
        ),
    )
    _, monitor = build(lambda: engine(settings, protect=True))
    group = next(r for r in monitor.registrations if r.type == "aws:elasticache/replicationGroup:ReplicationGroup")
    params = next(r for r in monitor.registrations if r.type == "aws:elasticache/parameterGroup:ParameterGroup")
    assert (group.inputs["engine"], group.inputs["engineVersion"], params.inputs["family"]) == expected
    assert params.inputs["parameters"] == [{"name": "maxmemory-policy", "value": "noeviction"}]


def test_a_protected_stack_refuses_to_change_the_flavor_it_deployed():
    valkey = MetadataSettings(flavor="valkey")
    problem = migration_problem("sentinel", valkey, protected=True, previous_flavor="redis")
    assert problem is not None and problem.key == "metadata.flavor" and problem.got == "valkey"
    assert "expected redis" in problem.expected and "metadata.migratedFrom: redis" in problem.hint
    moved = MetadataSettings(flavor="valkey", migrated_from="redis")
    assert migration_problem("sentinel", moved, protected=True, previous_flavor="redis") is None
    assert migration_problem("sentinel", valkey, protected=False, previous_flavor="redis") is None
    assert migration_problem("sentinel", valkey, protected=True, previous_flavor="valkey") is None
    # One move at a time: naming the engine left does not let the flavor change too.
    both = MetadataSettings(engine="sentinel", flavor="valkey", migrated_from="standalone")
    problem = migration_problem("standalone", both, protected=True, previous_flavor="redis")
    assert problem is not None and problem.key == "metadata.flavor"


def test_stacks_deployed_before_the_flavor_was_a_choice_ran_redis():
    assert previous_flavor({"metadataEngine": "sentinel"}) == "redis"
    assert previous_flavor({"metadataService": "redis.juicefs-meta.svc.cluster.local"}) == "redis"
    assert previous_flavor({"metadataEngine": "sentinel", "metadataFlavor": "valkey"}) == "valkey"
    assert previous_flavor({}) is None


def test_the_cli_refuses_to_move_a_protected_stacks_metadata_to_valkey(tmp_path, capsys):
    first = tmp_path / "first"
    assert main(["render", "--stack", "prod", "--out", str(first)]) == 0
    assert json.loads((first / "outputs.json").read_text())["metadataFlavor"] == "redis"
    config = tmp_path / "Pulumi.prod.yaml"
    config.write_text(json.dumps({"config": {"ai-storage-platform:metadata": {"flavor": "valkey"}}}))
    out = tmp_path / "out"
    args = ["render", "--stack", "prod", "--config-file", str(config), "--stack-outputs", str(first / "outputs.json")]
    assert main([*args, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "metadata.flavor: expected redis" in err and "metadata.migratedFrom: redis" in err
    assert "Traceback" not in err and not out.exists()


def test_elasticache_is_watched_by_cloudwatch_alarms_per_node(build):
    topic = "arn:aws:sns:eu-west-1:123456789012:storage-oncall"
    settings = MetadataSettings(
        engine="elasticache",
        elasticache=ElastiCacheSettings(
            subnet_ids=["subnet-0a", "subnet-0b"], security_group_ids=["sg-01"], alarm_actions=[topic]
        ),
    )
    _, monitor = build(lambda: engine(settings, protect=True))
    alarms = {r.name: r.inputs for r in monitor.registrations if r.type == "aws:cloudwatch/metricAlarm:MetricAlarm"}
    nodes = {a["dimensions"]["CacheClusterId"] for a in alarms.values()}
    group_id = next(r for r in monitor.registrations if r.type.endswith("ReplicationGroup")).name
    assert len(nodes) == 3 and all(n.endswith(("-001", "-002", "-003")) for n in nodes)  # <group id>-00N
    memory = sorted(a["threshold"] for a in alarms.values() if a["metricName"] == "DatabaseMemoryUsagePercentage")
    assert memory == [85, 85, 85, 95, 95, 95]
    lag = [a for a in alarms.values() if a["metricName"] == "ReplicationLag"]
    assert {a["dimensions"]["CacheClusterId"] for a in lag} == nodes  # every member: a failover swaps the roles
    runbook = "https://github.com/ai-storage-platform/ai-storage-platform/blob/v0.2.0/docs/alerts.md"
    assert all(
        a["alarmDescription"].endswith(f"runbook: {runbook}#elasticache-cloudwatch-alarms") for a in alarms.values()
    )
    (group,) = [r.inputs for r in monitor.registrations if r.type.endswith("ReplicationGroup")]
    assert group["applyImmediately"] is False and group["finalSnapshotIdentifier"] == "meta-final"
    assert "## ElastiCache CloudWatch alarms" in (render.ROOT / "docs" / "alerts.md").read_text()
    assert sum(a["metricName"] == "EngineCPUUtilization" for a in alarms.values()) == 3
    assert all(
        a["alarmActions"] == [topic] == a["okActions"] and a["namespace"] == "AWS/ElastiCache" for a in alarms.values()
    )
    assert group_id


def test_an_elasticache_stack_gets_no_redis_rules_that_could_never_fire(render_stack):
    aws = {
        "objectStore": {"backend": "s3"},
        "metadata": {
            "engine": "elasticache",
            "elasticache": {"subnetIds": ["subnet-0a", "subnet-0b"], "securityGroupIds": ["sg-01"]},
        },
    }
    result, monitor = render_stack("prod", **aws)
    (rule,) = objects(result, "PrometheusRule")
    names = {g["name"] for g in rule["spec"]["groups"]}
    assert "ai-storage-metadata" not in names and "ai-storage-training" in names
    assert any(r.type == "aws:cloudwatch/metricAlarm:MetricAlarm" for r in monitor.registrations)
    in_cluster, _ = render_stack("prod")
    (rule,) = objects(in_cluster, "PrometheusRule")
    assert "ai-storage-metadata" in {g["name"] for g in rule["spec"]["groups"]}


def test_a_critical_memory_alarm_below_the_warning_is_refused():
    with pytest.raises(SettingsError) as caught:
        load_settings("prod", {"metadata": {"elasticache": {"memoryWarningPercent": 90, "memoryCriticalPercent": 80}}})
    assert "metadata.elasticache.memoryCriticalPercent: expected above memoryWarningPercent (90)" in str(caught.value)
