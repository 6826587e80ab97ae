"""JuiceFS: the CSI driver release, the volume Secret and the cold tier's StorageClass."""

from components import juicefs
from components.juicefs import CacheSettings
from tests.conftest import by_name


def test_chart_creates_csidriver_without_hooks_and_needs_no_cert_manager(render_stack):
    result, _ = render_stack("dev")
    chart = next(c for c in result.charts if c["chart"] == "juicefs-csi-driver")
    assert chart["version"] == "0.32.4"
    assert chart["values"]["csidriver"]["disableHooks"] is True
    assert chart["values"]["webhook"]["certManager"]["enabled"] is False
    assert chart["values"]["mountMode"] == "mountpod"


def test_volume_secret_has_every_field_and_each_is_secret(render_stack):
    result, _ = render_stack("dev")
    secret = by_name(result, "Secret", "juicefs-volume")
    assert secret["stringData"] == {
        k: "[secret]" for k in ("name", "metaurl", "storage", "bucket", "access-key", "secret-key")
    }


def test_cold_class_is_rwx_retained_with_cache_mount_options(render_stack):
    result, _ = render_stack("dev", juicefs={"cache": {"cacheSizeMib": 4096, "prefetch": 5}})
    sc = by_name(result, "StorageClass", "cold")
    assert sc["provisioner"] == "csi.juicefs.com"
    assert sc["reclaimPolicy"] == "Retain"
    assert sc["metadata"]["annotations"]["ai-storage-platform/access-mode"] == "ReadWriteMany"
    assert "cache-size=4096" in sc["mountOptions"] and "prefetch=5" in sc["mountOptions"]
    assert "parameters" in sc and "juicefs/mount-options" not in sc["parameters"]
    assert sc["parameters"]["csi.storage.k8s.io/node-publish-secret-name"] == "juicefs-volume"


def test_mount_options_carry_every_cache_setting():
    options = juicefs.mount_options(CacheSettings(writeback=True, extra_mount_options=["no-bgjob"]))
    names = [o.split("=")[0] for o in options]
    assert names == [
        "cache-dir",
        "cache-size",
        "free-space-ratio",
        "buffer-size",
        "prefetch",
        "max-uploads",
        "max-downloads",
        "open-cache",
        "attr-cache",
        "entry-cache",
        "writeback",
        "no-bgjob",
    ]
