"""MetadataEngine: Redis configured so JuiceFS never loses metadata."""

import pulumi

from components import versions
from components.metadata_engine import MetadataEngine, MetadataEngineArgs, MetadataSettings, redis_conf
from components.section import Resources
from tests.conftest import by_name


def engine(settings: MetadataSettings = MetadataSettings(), protect: bool = False) -> MetadataEngine:
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
    settings = MetadataSettings(storage_size="5Gi", resources=Resources(memory_limit="1Gi"))
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


def test_only_the_redis_port_is_open(build):
    result, _ = build(engine)
    policy = by_name(result, "NetworkPolicy", "redis")
    assert policy["spec"]["ingress"] == [{"ports": [{"protocol": "TCP", "port": 6379}]}]


def test_the_data_volume_is_protected_only_when_asked(build):
    for protect in (False, True):
        _, monitor = build(lambda protect=protect: engine(protect=protect))
        redis = next(r for r in monitor.registrations if r.type == "kubernetes:apps/v1:StatefulSet")
        assert (redis.protect, redis.retain_on_delete) == (protect, protect)
