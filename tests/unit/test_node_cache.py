"""The node cache volume: every stack gives the JuiceFS and Fluid caches a logical volume of its own on each NVMe
node (a DaemonSet running the host's lvm, mkfs and mount), the caches live under it and fit it, and a stack that
would leave a cache on the root disk is refused naming the keys and the arithmetic."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from components.common import versions
from components.node_cache import CACHE_PATH, LV_NAME
from components.sections import SettingsError
from components.settings import load_settings
from tests.conftest import STACKS, by_name, objects, stack_settings

SIZES = {"dev": 16, "staging": 800, "prod": 1700, "eks-gpu-prod": 1700}


@pytest.mark.parametrize("stack", STACKS)
def test_every_stack_prepares_the_cache_volume_and_puts_the_caches_on_it(stack, render_stack):
    result, _ = render_stack(stack)
    daemonset = by_name(result, "DaemonSet", "node-cache")
    assert daemonset["metadata"]["namespace"] == "topolvm-system"
    pod = daemonset["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"ai-storage-platform/local-nvme": "true"}  # where the volume group is
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    (prepare,) = pod["initContainers"]
    assert prepare["image"] == versions.TOPOLVM_IMAGE and prepare["securityContext"] == {"privileged": True}
    assert prepare["command"][:3] == ["nsenter", "--target", "1"] and pod["hostPID"] is True
    script = prepare["command"][-1]
    assert f"lvm lvcreate -y -n {LV_NAME} -L {SIZES[stack]}g nvme-vg" in script
    assert f"mount /dev/nvme-vg/{LV_NAME} {CACHE_PATH}" in script
    # Its pods need no traffic, and get none (a NetworkPolicy of their own; checkov's CKV2_K8S_6).
    policy = by_name(result, "NetworkPolicy", "node-cache")
    assert policy["metadata"]["namespace"] == "topolvm-system"
    assert policy["spec"] == {
        "podSelector": {"matchLabels": daemonset["spec"]["template"]["metadata"]["labels"]},
        "policyTypes": ["Ingress", "Egress"],
    }
    # The JuiceFS client caches there (its mount options), Fluid's SSD levels too.
    settings = stack_settings(stack)
    assert settings.juicefs.cache.cache_dir == f"{CACHE_PATH}/juicefs"
    for dataset in objects(result, "JuiceFSRuntime") + objects(result, "AlluxioRuntime"):
        for level in dataset["spec"]["tieredstore"]["levels"]:
            assert level["mediumtype"] != "SSD" or level["path"].startswith(f"{CACHE_PATH}/"), level


def test_the_preparation_script_is_idempotent_shell():
    """The host runs it at every start of the pod: each step checks before it acts (sh -n parses it)."""
    settings = load_settings("prod", {})
    from components.node_cache import prepare_script

    script = prepare_script("nvme-vg", settings.local_nvme.cache_volume)
    assert "if ! lvm lvs nvme-vg/ai-storage-cache" in script and "if ! blkid" in script
    assert "mountpoint -q /var/lib/ai-storage-cache ||" in script
    if shutil.which("sh"):
        assert subprocess.run(["sh", "-n", "-c", script], capture_output=True).returncode == 0


@pytest.mark.parametrize(
    ("config", "key", "words"),
    [
        (
            {"juicefs": {"cache": {"cacheSizeMib": 102400}}},
            "localNvme.cacheVolume.sizeGib",
            # Dev's two teams' shares (2048 MiB each) count beside the cold tier's cache (test_team_io).
            "expected at least the JuiceFS cache 102400 MiB and the teams' shares 4096 MiB with 0.1 kept free needs "
            "116 GiB, Fluid's SSD levels 0 GiB: 116 GiB",
        ),
        ({"juicefs": {"cache": {"cacheDir": "/var/jfsCache"}}}, "juicefs.cache.cacheDir", f"under {CACHE_PATH}"),
        (
            {"fluid": {"datasets": [{"name": "d", "path": "/d", "cache": [{"medium": "SSD", "path": "/mnt/ssd"}]}]}},
            "fluid.datasets[0].cache[0].path",
            f"expected a directory under {CACHE_PATH}",
        ),
        (
            {
                "fluid": {
                    "datasets": [
                        {
                            "name": "d",
                            "path": "/d",
                            "cache": [{"medium": "SSD", "path": f"{CACHE_PATH}/fluid", "quota": "20Gi"}],
                        }
                    ]
                }
            },
            "localNvme.cacheVolume.sizeGib",
            "Fluid's SSD levels 20 GiB: 36 GiB",  # (10240 + 4096) MiB / 0.9 = 15.6 GiB, + 20
        ),
        ({"localNvme": {"cacheVolume": {"enabled": False}}}, "juicefs.cache.cacheDir", "on a data disk"),
        ({"localNvme": {"cacheVolume": {"deviceClass": "ssd"}}}, "localNvme.cacheVolume.deviceClass", "nvme"),
    ],
)
def test_a_cache_off_the_volume_or_bigger_than_it_is_refused(config, key, words):
    with pytest.raises(SettingsError) as caught:
        load_settings("dev", config)
    message = str(caught.value)
    assert f"{key}:" in message and words in message, message


def test_with_the_volume_off_a_data_disk_named_by_the_stack_is_accepted():
    settings = load_settings(
        "dev", {"localNvme": {"cacheVolume": {"enabled": False}}, "juicefs": {"cache": {"cacheDir": "/mnt/nvme1/jfs"}}}
    )
    assert settings.juicefs.cache.cache_dir == "/mnt/nvme1/jfs"
