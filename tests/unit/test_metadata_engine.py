"""MetadataEngine: Redis configured so JuiceFS never loses metadata."""

from components.metadata_engine import MetadataSettings, redis_conf
from tests.conftest import by_name


def test_redis_conf_is_durable_and_never_evicts():
    conf = redis_conf(MetadataSettings(), "pw").splitlines()
    for line in ("appendonly yes", "appendfsync everysec", "maxmemory-policy noeviction", "requirepass pw"):
        assert line in conf
    assert "maxmemory 1717986918" in conf  # 80% of the 2Gi limit


def test_redis_statefulset_uses_official_pinned_image_probes_and_pvc(render_stack):
    result, _ = render_stack("dev", metadata={"storageSize": "5Gi"})
    sts = by_name(result, "StatefulSet", "redis")
    container = sts["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "docker.io/library/redis:8.2.1"
    assert container["livenessProbe"] and container["readinessProbe"]
    assert container["resources"]["limits"]["memory"] == "1Gi"
    assert sts["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"] == "5Gi"
    assert by_name(result, "Secret", "redis-config")["stringData"] == {"password": "[secret]", "redis.conf": "[secret]"}


def test_metadata_url_is_exported_as_secret_only(render_stack):
    result, _ = render_stack("dev")
    assert result.outputs["metadataService"] == "redis.juicefs-meta.svc.cluster.local"
    plan_text = str(result.plan)
    assert "mock-ai-storage-metadata-password" not in plan_text
