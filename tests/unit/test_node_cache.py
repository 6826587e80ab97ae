"""The node cache volume: every stack gives the JuiceFS and Fluid caches a logical volume of its own on each NVMe
node (a DaemonSet running the host's lvm, mkfs and mount), the caches live under it and fit it, and a stack that
would leave a cache on the root disk is refused naming the keys and the arithmetic."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from components.common import versions
from components.common.sections import SettingsError
from components.settings import load_settings
from components.tiers.node_cache import CACHE_PATH, LV_NAME
from tests.conftest import STACKS, by_name, objects, stack_settings

SIZES = {"dev": 16, "staging": 800, "prod": 1700, "eks-gpu-prod": 1700, "eks-gpu-prod-aws": 1700}


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
    from components.tiers.node_cache import prepare_script

    script = prepare_script("nvme-vg", settings.local_nvme.cache_volume)
    assert "if ! lvm lvs nvme-vg/ai-storage-cache" in script and "if ! blkid" in script
    assert "mountpoint -q /var/lib/ai-storage-cache ||" in script
    if shutil.which("sh"):
        assert subprocess.run(["sh", "-n", "-c", script], capture_output=True).returncode == 0


HOST_TOOLS = {
    # lvm as the script calls it: lvs (exists?), lvs -o lv_size (bytes), lvcreate and lvextend (-L <n>g)
    "lvm": """
case "$1" in
  lvs) [ -f "$STATE/size" ] || exit 5; case "$*" in *lv_size*) echo "  $(cat "$STATE/size")";; esac;;
  lvcreate|lvextend) n=$(echo "$*" | sed 's/.*-L \\([0-9]*\\)g.*/\\1/'); echo $((n * 1073741824)) > "$STATE/size";;
esac""",
    "blkid": '[ -f "$STATE/fs" ]',
    "mkfs.xfs": 'touch "$STATE/fs"',
    "mountpoint": '[ -f "$STATE/mounted" ]',
    "mount": 'touch "$STATE/mounted"',
    "xfs_growfs": ":",
}


def run_on_host(tmp_path, size_gib: int) -> subprocess.CompletedProcess[str]:
    """The preparation script, run by sh with stand-ins for the host's lvm, blkid, mkfs, mount and xfs_growfs
    that keep the volume's state in files and log each call."""
    from components.tiers.node_cache import CacheVolumeSettings, prepare_script

    bin_dir, state = tmp_path / "bin", tmp_path / "state"
    for name, body in HOST_TOOLS.items():
        tool = bin_dir / name
        tool.parent.mkdir(exist_ok=True)
        tool.write_text(f'#!/bin/sh\necho "{name} $*" >> "$STATE/calls"\n{body}\n')
        tool.chmod(0o755)
    state.mkdir(exist_ok=True)
    (state / "calls").write_text("")
    script = prepare_script("nvme-vg", CacheVolumeSettings(size_gib=size_gib, path=str(tmp_path / "cache")))
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "STATE": str(state)}
    return subprocess.run(["sh", "-c", script], capture_output=True, text=True, env=env, check=False)


def calls(tmp_path) -> list[str]:
    return [line.split()[0] + " " + line.split()[1] for line in (tmp_path / "state" / "calls").read_text().splitlines()]


@pytest.mark.skipif(shutil.which("sh") is None, reason="needs a POSIX sh")
def test_the_cache_volume_is_made_once_grows_online_and_is_never_shrunk(tmp_path):
    first = run_on_host(tmp_path, 100)
    assert first.returncode == 0, first.stderr
    assert calls(tmp_path) == ["lvm lvs", "lvm lvcreate", "lvm lvs", "blkid /dev/nvme-vg/ai-storage-cache",
                               "mkfs.xfs -q", "mountpoint -q", "mount /dev/nvme-vg/ai-storage-cache",
                               "xfs_growfs " + str(tmp_path / "cache")]  # fmt: skip
    assert (tmp_path / "cache" / "juicefs").is_dir() and (tmp_path / "cache" / "fluid").is_dir()
    again = run_on_host(tmp_path, 100)  # the pod restarts: nothing is made twice
    assert again.returncode == 0 and "lvm lvcreate" not in calls(tmp_path) and "mkfs.xfs -q" not in calls(tmp_path)
    assert "lvm lvextend" not in calls(tmp_path)
    grown = run_on_host(tmp_path, 150)  # sizeGib grew: extended, and the filesystem grown, on the mounted volume
    assert grown.returncode == 0 and calls(tmp_path).count("lvm lvextend") == 1
    assert (tmp_path / "state" / "size").read_text().strip() == str(150 * 2**30)
    shrunk = run_on_host(tmp_path, 120)  # never shrunk: the node keeps 150 GiB and says why
    assert shrunk.returncode == 0 and "lvm lvextend" not in calls(tmp_path)
    assert (tmp_path / "state" / "size").read_text().strip() == str(150 * 2**30)
    assert "above sizeGib 120: a volume is never shrunk" in shrunk.stderr


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
