"""Settings: layering, and bad values rejected with the key path, the expectation, a hint, exit 2, no traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from components.common.sections import SettingsError, leaf_keys, validate
from components.settings import PlatformSettings, load_settings
from components.settings.profiles import load_profile, profiles
from components.toolchain.cli import main
from components.toolchain.render import ROOT
from tests.conftest import STACKS, stack_settings

BAD_VALUES = [
    # (config overrides, key path in the message, expectation text)
    ({"objectStore": {"backend": "gcs"}}, "objectStore.backend", "expected one of 'minio', 's3'"),
    ({"objectStore": {"minio": {"replicas": "3"}}}, "objectStore.minio.replicas", "expected a whole number"),
    ({"objectStore": {"minio": {"replicas": 2}}}, "objectStore.minio.replicas", "distributed MinIO needs 4"),
    ({"objectStore": {"minio": {"replicas": 40}}}, "objectStore.minio.replicas", "expected a number <= 16"),
    ({"objectStore": {"minio": {"storageSize": "10Gb"}}}, "objectStore.minio.storageSize", "Kubernetes quantity"),
    ({"objectStore": {"bucket": "Bad_Bucket"}}, "objectStore.bucket", "expected text matching"),
    ({"objectStore": {"s3": {"transitionDays": 0}}}, "objectStore.s3.transitionDays", "expected a number >= 1"),
    ({"objectStore": {"s3": {"oidcProviderArn": "eks"}}}, "objectStore.s3.oidcProviderArn", "expected text matching"),
    (
        {
            "objectStore": {"backend": "s3", "s3": {"oidcProviderArn": "arn:aws:iam::123456789012:oidc-provider/x"}},
            "fluid": {"enabled": True, "datasets": [{"name": "imagenet"}]},
        },
        "fluid.datasets",
        "expected no Fluid datasets with objectStore.s3.oidcProviderArn",
    ),
    (
        {"objectStore": {"s3": {"serviceAccounts": ["juicefs-csi"]}}},
        "objectStore.s3.serviceAccounts[0]",
        "expected `namespace:name` of a ServiceAccount",
    ),
    ({"metadata": {"namespace": "Juice_Meta"}}, "metadata.namespace", "expected a DNS label"),
    ({"metadata": {"appendfsync": "no"}}, "metadata.appendfsync", "expected one of 'everysec', 'always'"),
    ({"metadata": {"resources": {"memoryLimit": "lots"}}}, "metadata.resources.memoryLimit", "Kubernetes quantity"),
    ({"juicefs": {"enabled": "yes"}}, "juicefs.enabled", "expected true or false"),
    ({"juicefs": {"cache": {"cacheSizeMib": -1}}}, "juicefs.cache.cacheSizeMib", "expected a number >= 0"),
    ({"juicefs": {"cache": {"freeSpaceRatio": 1.5}}}, "juicefs.cache.freeSpaceRatio", "expected a number < 1"),
    ({"juicefs": {"cache": {"cachSize": 3}}}, "juicefs.cache.cachSize", "did you mean 'cacheSizeMib'"),
    ({"juicefs": {"cache": {"cacheDir": "relative/dir"}}}, "juicefs.cache.cacheDir", "expected text matching"),
    ({"tiers": {"cold": "nfs"}}, "tiers.cold", "expected one of"),
    ({"tiers": {"namePrefix": "ai"}}, "tiers.namePrefix", "expected text matching"),
    ({"cluster": {"kubernetesVersion": "1.20"}}, "cluster.kubernetesVersion", "expected text matching"),
    ({"cluster": {"protectStatefulResources": 1}}, "cluster.protectStatefulResources", "expected true or false"),
    ({"objectStor": {"backend": "s3"}}, "objectStor", "did you mean 'objectStore'"),
    ({"profile": "qa"}, "profile", "expected one of"),
]


@pytest.mark.parametrize(("overrides", "key", "expected"), BAD_VALUES, ids=[k for _, k, _ in BAD_VALUES])
def test_bad_value_is_rejected_with_key_and_expectation(overrides, key, expected):
    with pytest.raises(SettingsError) as caught:
        load_settings("dev", overrides)
    message = str(caught.value)
    assert f"{key}:" in message
    assert expected in message
    assert "Hint:" in message


def test_disabled_backend_for_a_tier_is_a_config_error():
    with pytest.raises(SettingsError) as caught:
        load_settings("dev", {"juicefs": {"enabled": False}})
    assert "tiers.cold:" in str(caught.value) and "enable the juicefs component" in str(caught.value)


def test_layers_apply_in_order_defaults_profile_stack():
    settings = load_settings("dev", {"metadata": {"storageSize": "3Gi"}})
    assert settings.metadata.storage_size == "3Gi"  # stack file
    assert settings.object_store.bucket == "ai-datasets-dev"  # profile
    assert settings.metadata.appendfsync == "everysec"  # code default


def test_an_organisation_keeps_a_profile_of_its_own_that_extends_a_shipped_one(tmp_path, monkeypatch):
    """Without forking: a profile file in the project (a path from the project directory), starting from prod and
    changing only what differs; the stack's own keys still win."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "profiles").mkdir()
    own = {"extends": "prod", "objectStore": {"bucket": "acme-datasets"}, "juicefs": {"cache": {"bufferSizeMib": 4096}}}
    (tmp_path / "profiles" / "acme-gpu.yaml").write_text(yaml.safe_dump(own))
    settings = load_settings("acme", {"profile": "profiles/acme-gpu.yaml", "metadata": {"storageSize": "80Gi"}})
    assert settings.object_store.bucket == "acme-datasets" and settings.juicefs.cache.buffer_size_mib == 4096  # own
    assert settings.cluster.protect_stateful_resources is True and settings.object_store.backend == "s3"  # prod's
    assert settings.metadata.storage_size == "80Gi"  # the stack's
    (tmp_path / "profiles" / "typo.yaml").write_text(yaml.safe_dump({"extends": "prd"}))
    with pytest.raises(SettingsError) as caught:
        load_settings("acme", {"profile": "profiles/typo.yaml"})
    assert "profile: expected `extends` to name a shipped profile (dev, prod, staging); got 'prd'" in str(caught.value)
    with pytest.raises(SettingsError) as caught:
        load_settings("acme", {"profile": "profiles/missing.yaml"})
    assert "or the path of a profile file of your own (*.yaml)" in str(caught.value)


def leaf_paths(data: dict, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every leaf key path of a settings mapping."""
    paths = []
    for key, value in data.items():
        path = (*prefix, key)
        paths += leaf_paths(value, path) if isinstance(value, dict) and value else [path]
    return paths


def without(data: dict, path: tuple[str, ...]) -> dict:
    """A copy of ``data`` without the leaf at ``path`` (and without mappings left empty)."""
    head, *rest = path
    out = dict(data)
    if rest:
        out[head] = without(out[head], tuple(rest))
        if not out[head]:
            del out[head]
    else:
        del out[head]
    return out


@pytest.mark.parametrize("profile", profiles())
def test_profiles_list_only_what_differs_from_the_code_defaults(profile):
    data = load_profile(profile)
    whole = validate(PlatformSettings, {**data, "profile": profile})
    for path in leaf_paths(data):
        try:
            trimmed = validate(PlatformSettings, {**without(data, path), "profile": profile})
        except SettingsError:
            continue  # the key is needed (e.g. minSize 1 with replicaSize 1)
        assert trimmed != whole, f"stacks/{profile}.yaml: {'.'.join(path)} restates what the stack gets without it"


def test_settings_are_frozen():
    settings = load_settings("dev", {})
    with pytest.raises(Exception, match="frozen"):
        settings.juicefs.enabled = False  # type: ignore[misc]


def test_cli_exits_2_with_every_problem_and_creates_nothing(tmp_path, capsys):
    stack = {
        "config": {"ai-storage-platform:objectStore": {"backend": "gcs"}, "ai-storage-platform:tiers": {"warm": 3}}
    }
    path = tmp_path / "Pulumi.dev.yaml"
    path.write_text(yaml.safe_dump(stack))
    out = tmp_path / "out"
    assert main(["render", "--stack", "dev", "--config-file", str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "objectStore.backend: expected one of 'minio', 's3', 'ceph-rgw'; got 'gcs'" in err
    assert "tiers.warm:" in err
    assert not out.exists()


def test_cli_error_has_no_traceback(tmp_path):
    path = tmp_path / "Pulumi.dev.yaml"
    path.write_text(yaml.safe_dump({"config": {"ai-storage-platform:metadata": {"storageSize": "ten"}}}))
    proc = subprocess.run(
        [sys.executable, "-m", "components", "render", "--stack", "dev", "--config-file", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "metadata.storageSize" in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout


def test_unknown_stack_is_rejected(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["render", "--stack", "nope"])
    assert (
        exited.value.code == 2 and f"argument --stack: expected one of {', '.join(STACKS)}" in capsys.readouterr().err
    )


PROFILES = ("dev", "staging", "prod")
"""The README's table compares the profiles' stacks (other stacks start from one of them)."""


def stack_values(stack: str) -> dict[str, object]:
    """Every leaf setting of a stack as its files give it, by camelCase key path."""
    return {key: value for key, _, value in leaf_keys(PlatformSettings, defaults=stack_settings(stack))}


def cell(value: object) -> str:
    """A setting as the README table shows it."""
    if isinstance(value, list):
        return ", ".join(f"`{v.name}`" for v in value) or "none"  # type: ignore[attr-defined]
    if isinstance(value, dict):
        return ", ".join(f"`{k}`" for k in value) or "none"
    return f"`{str(value).lower() if isinstance(value, bool) else value}`"


def readme_environment_rows() -> dict[str, list[str]]:
    text = (ROOT / "README.md").read_text().split("### What differs per environment and why", 1)[1]
    rows = {}
    for line in text.split("\n## ", 1)[0].splitlines():
        if not line.startswith("| `"):
            continue
        key, *cells, why = [c.strip() for c in line.strip("|").split(" | ")]
        assert len(cells) == len(PROFILES) and why, line
        rows[key.strip("`")] = cells
    return rows


def test_readme_environment_table_matches_the_stack_files():
    rows = readme_environment_rows()
    values = {stack: stack_values(stack) for stack in PROFILES}
    for key, cells in rows.items():
        if key.endswith(".*"):
            # A group of keys: the cells point at the profiles that set them.
            assert cells == [f"[{s}](stacks/{s}.yaml)" for s in PROFILES], key
            assert any(k.startswith(key[:-1]) for k in values["dev"]), key
        else:
            assert cells == [cell(values[s][key]) for s in PROFILES], key
    differing = {k for k in values["dev"] if len({repr(values[s][k]) for s in PROFILES}) > 1}
    groups = tuple(k[:-1] for k in rows if k.endswith(".*"))
    missing = sorted(k for k in differing if k not in rows and not k.startswith(groups))
    assert not missing, f"keys that differ between stacks but are not in the README table: {missing}"
    same = sorted(k for k in rows if not k.endswith(".*") and k not in differing)
    assert not same, f"README rows whose value is the same in every stack: {same}"
