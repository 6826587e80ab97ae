"""Teams: the platform vends each team's namespace (label, Pod Security, quotas, Queue), its offsite access, its
read-only dataset claims scoped to one directory and its writable space; settings that cannot work are refused."""

from __future__ import annotations

import json

import pytest

from components.backends.object_stores.bucket import ROLE_ANNOTATION
from components.common.sections import SettingsError
from components.platform import expirations
from components.settings import load_settings
from components.teams import artifacts, tenants
from components.teams.tenants import Teams, TeamsArgs, TeamsSettings
from components.tiers.juicefs import JuiceFS, JuiceFSArgs, JuiceFSSettings, JuiceFSSource
from components.tiers.object_store import ObjectStore, ObjectStoreArgs, ObjectStoreSettings
from components.training.fluid_dataset import DatasetSettings
from components.training.volcano import Volcano, VolcanoArgs, VolcanoSettings
from tests.conftest import Build, by_name, objects, scoped_policy, stack_settings

MINIO_BUCKET = "http://minio.object-store.svc.cluster.local:9000/ai-datasets"
VOLUME = JuiceFSSource("ai-datasets", "redis://:pw@meta", "minio", MINIO_BUCKET, "ak", "sk")
OIDC = "arn:aws:iam::123456789012:oidc-provider/oidc.eks.us-east-1.amazonaws.com/id/ABC"
CORPUS = DatasetSettings(name="corpus", namespace="training", path="/datasets/corpus")


def teams(build: Build, prefix: str = "", store: ObjectStoreSettings | None = None, **team: object):
    """One vended team ``nlp`` (over ``team``), with the platform's object store (MinIO unless ``store``), JuiceFS
    volume and a Fluid dataset ``corpus`` to reference."""

    def program() -> None:
        store_ = ObjectStore("store", ObjectStoreArgs(store or ObjectStoreSettings()))
        backup = store_.scoped_access("metadata-backup", "meta-backups/", ("juicefs-csi", "juicefs-metadata-backup"))
        juicefs = JuiceFS("juicefs", JuiceFSArgs(JuiceFSSettings(), VOLUME, backup))
        settings = TeamsSettings.model_validate({"workspaces": [{"name": "nlp", **team}]})
        volcano = Volcano("volcano", VolcanoArgs(VolcanoSettings(enabled=True)))
        Teams("teams", TeamsArgs(settings, prefix, store_, juicefs, volcano.release, None, [CORPUS]))

    return build(program)


def in_namespace(result, namespace: str) -> list[dict]:
    return [o for objs in result.manifests.values() for o in objs if o["metadata"].get("namespace") == namespace]


def test_the_namespace_carries_the_team_label_and_pod_security(build):
    result, _ = teams(build, podSecurity="baseline")
    ns = by_name(result, "Namespace", "nlp")
    assert ns["metadata"]["labels"][tenants.TEAM_LABEL] == "nlp"
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "baseline"
    result, _ = teams(build, namespace="nlp-research")
    assert by_name(result, "Namespace", "nlp-research")["metadata"]["labels"][tenants.TEAM_LABEL] == "nlp"


def test_quota_and_limit_range_are_the_platforms_with_the_tier_prefix(build):
    result, _ = teams(build, "ai-", quota={"tiers": {"cold": {"storage": "3Ti", "claims": 2}}})
    quota = by_name(result, "ResourceQuota", "storage")
    assert quota["metadata"]["namespace"] == "nlp"
    assert quota["spec"]["hard"]["ai-cold.storageclass.storage.k8s.io/requests.storage"] == "3Ti"
    assert quota["spec"]["hard"]["ai-cold.storageclass.storage.k8s.io/persistentvolumeclaims"] == "2"
    assert by_name(result, "LimitRange", "defaults")["metadata"]["namespace"] == "nlp"


def test_the_queue_is_named_after_the_team_and_waits_for_volcano(build):
    result, _ = teams(build, queue={"weight": 3, "capability": {"gpu": 4}})
    queue = by_name(result, "Queue", "nlp")
    assert queue["spec"] == {"weight": 3, "reclaimable": True, "capability": {"nvidia.com/gpu": 4}}
    deps = {r["name"]: r["dependsOn"] for r in result.plan["resources"]}
    assert deps["teams-nlp-queue"] == ["volcano-release"]  # its admission webhook fails closed


def test_offsite_access_names_the_teams_prefix_only(build):
    result, _ = teams(build)
    account = by_name(result, "ServiceAccount", tenants.OFFSITE_ACCOUNT)
    assert account["metadata"]["namespace"] == "nlp"
    target = by_name(result, "ConfigMap", tenants.OFFSITE_TARGET)
    assert target["data"] == {
        "url": "minio://minio.object-store.svc.cluster.local:9000/ai-datasets/checkpoints/nlp/",
        "sync-flags": "--no-https",
        "endpoint": "http://minio.object-store.svc.cluster.local:9000",
        "bucket": "ai-datasets",
        "prefix": "checkpoints/nlp/",
    }
    result, _ = teams(build, offsite=False, artifacts=False)
    assert not objects(result, "ServiceAccount") and not objects(result, "ConfigMap")


def test_offsite_keys_are_the_teams_scoped_keys_delivered_as_a_secret(build):
    result, monitor = teams(build)
    secret = by_name(result, "Secret", tenants.OFFSITE_CREDENTIALS)
    assert secret["metadata"]["namespace"] == "nlp"
    assert secret["stringData"] == {"access-key": "[secret]", "secret-key": "[secret]"}
    # The keys of the scope the object store made for the team's prefix: a MinIO user whose policy names only it.
    deps = {r.name: r.dependencies for r in monitor.registrations}
    assert any(d.endswith("store-team-nlp-user") for d in deps["teams-nlp-offsite-credentials"])
    job = by_name(result, "Job", "minio-scope-team-nlp")
    (mc,) = job["spec"]["template"]["spec"]["containers"]
    policy = json.loads(next(e["value"] for e in mc["env"] if e["name"] == "POLICY_DOCUMENT"))
    assert policy == scoped_policy("ai-datasets", "checkpoints/nlp/")


def test_under_irsa_the_account_carries_the_teams_role_and_no_keys_are_delivered(build):
    s3 = ObjectStoreSettings(backend="s3", s3={"oidcProviderArn": OIDC})
    result, monitor = teams(build, store=s3)
    assert not [o for o in in_namespace(result, "nlp") if o["kind"] == "Secret"]
    account = by_name(result, "ServiceAccount", tenants.OFFSITE_ACCOUNT)
    (role,) = [r for r in monitor.registrations if r.type == "aws:iam/role:Role" and "team-nlp" in r.name]
    assert account["metadata"]["annotations"] == {ROLE_ANNOTATION: f"arn:aws:iam::000000000000:{role.name}"}
    # Only the team's offsite account may assume it.
    (statement,) = json.loads(role.inputs["assumeRolePolicy"])["Statement"]
    subjects = [v for k, v in statement["Condition"]["StringEquals"].items() if k.endswith(":sub")]
    assert subjects == [["system:serviceaccount:nlp:offsite"]]


def test_datasets_are_read_only_volumes_of_one_directory_mounted_with_the_platforms_secret(build):
    result, _ = teams(build, datasets=["librispeech"])
    pv = by_name(result, "PersistentVolume", "team.nlp.librispeech")
    spec = pv["spec"]
    assert spec["accessModes"] == ["ReadOnlyMany"] and spec["csi"]["readOnly"] is True
    assert "subdir=/datasets/librispeech" in spec["mountOptions"]
    # The volume Secret (metadata URL, bucket keys) stays in the driver's namespace.
    assert spec["csi"]["nodePublishSecretRef"] == {"name": "juicefs-volume", "namespace": "juicefs-csi"}
    assert spec["csi"]["driver"] == "csi.juicefs.com" and spec["csi"]["volumeHandle"] == "team.nlp.librispeech"
    assert spec["claimRef"] == {"namespace": "nlp", "name": "librispeech"}
    assert spec["persistentVolumeReclaimPolicy"] == "Retain"
    claim = by_name(result, "PersistentVolumeClaim", "librispeech")
    assert claim["metadata"]["namespace"] == "nlp"
    # The cold class, so the team's quota counts it; volumeName keeps the provisioner away.
    assert claim["spec"]["storageClassName"] == spec["storageClassName"] == "cold"
    assert claim["spec"]["volumeName"] == "team.nlp.librispeech"
    assert claim["spec"]["accessModes"] == ["ReadOnlyMany"]


def test_the_writable_space_is_the_teams_own_directory(build):
    result, _ = teams(build, space="50Gi")
    pv = by_name(result, "PersistentVolume", "team.nlp.space")
    assert pv["spec"]["accessModes"] == ["ReadWriteMany"] and pv["spec"]["csi"]["readOnly"] is False
    assert "subdir=/teams/nlp" in pv["spec"]["mountOptions"]
    claim = by_name(result, "PersistentVolumeClaim", tenants.SPACE_CLAIM)
    assert claim["spec"]["resources"]["requests"]["storage"] == "50Gi"
    result, _ = teams(build)
    assert not objects(result, "PersistentVolume") and not objects(result, "PersistentVolumeClaim")


def test_a_fluid_dataset_is_a_reference_and_no_credentials_reach_the_namespace(build):
    result, _ = teams(build, fluidDatasets=["corpus"])
    dataset = by_name(result, "Dataset", "corpus")
    assert dataset["metadata"]["namespace"] == "nlp"
    assert dataset["spec"] == {
        "accessModes": ["ReadOnlyMany"],
        "mounts": [{"name": "corpus", "mountPoint": "dataset://training/corpus"}],
    }
    runtime = by_name(result, "ThinRuntime", "corpus")
    assert runtime["metadata"]["namespace"] == "nlp" and runtime["spec"] == {}
    kinds = {o["kind"] for o in in_namespace(result, "nlp")}
    assert kinds.isdisjoint({"JuiceFSRuntime", "AlluxioRuntime"})
    assert sorted(s["metadata"]["name"] for s in in_namespace(result, "nlp") if s["kind"] == "Secret") == [
        artifacts.CREDENTIALS,
        tenants.OFFSITE_CREDENTIALS,
    ]


def test_without_teams_the_platform_vends_nothing(render_stack):
    result, _ = render_stack("dev", teams={"workspaces": []})
    assert "teams" not in result.manifests
    result, _ = render_stack("dev")
    assert {
        o["metadata"]["name"]
        for o in objects(result, "Namespace")
        if tenants.TEAM_LABEL in o["metadata"].get("labels", {})
    } == {"vision", "speech"}


@pytest.mark.parametrize(
    ("teams_", "key", "expected"),
    [
        ([{"name": "a"}, {"name": "a"}], "teams.workspaces[1].name", "expected a team name used once"),
        ([{"name": "team-a"}], "teams.workspaces[0].name", "expected a name no other Queue has"),
        ([{"name": "default"}], "teams.workspaces[0].name", "expected a name no other Queue has"),
        ([{"name": "a", "namespace": "juicefs-csi"}], "teams.workspaces[0].namespace", "not used by juicefs"),
        ([{"name": "a"}, {"name": "b", "namespace": "a"}], "teams.workspaces[1].namespace", "not used by"),
        ([{"name": "a", "fluidDatasets": ["nope"]}], "teams.workspaces[0].fluidDatasets[0]", "imagenet-mini"),
        ([{"name": "a", "datasets": ["x", "x"]}], "teams.workspaces[0].datasets", "expected each dataset once"),
        ([{"name": "a", "datasets": ["space"], "space": "1Gi"}], "teams.workspaces[0].datasets", "once"),
        ([{"name": "A"}], "teams.workspaces[0].name", "expected a DNS label"),
        ([{"name": "a", "namespace": "A"}], "teams.workspaces[0].namespace", "expected a DNS label"),
        ([{"name": "a", "podSecurity": "open"}], "teams.workspaces[0].podSecurity", "expected one of"),
        ([{"name": "a", "queue": {"weight": 0}}], "teams.workspaces[0].queue.weight", ">= 1"),
        ([{"name": "a", "queue": {"name": "q"}}], "teams.workspaces[0].queue.name", "no such key"),
        ([{"name": "a", "datasets": ["Data"]}], "teams.workspaces[0].datasets[0]", "expected a DNS label"),
        ([{"name": "a", "fluidDatasets": "x"}], "teams.workspaces[0].fluidDatasets", "expected a list"),
        ([{"name": "a", "space": "big"}], "teams.workspaces[0].space", "Kubernetes quantity"),
        ([{"name": "a", "offsite": "yes"}], "teams.workspaces[0].offsite", "expected true or false"),
        ([{"namespace": "a"}], "teams.workspaces[0].name", "a value is required"),
        ("vision", "teams.workspaces", "expected a list"),
    ],
)
def test_bad_team_settings_name_the_key(teams_, key, expected):
    with pytest.raises(SettingsError) as caught:
        load_settings("dev", {"teams": {"workspaces": teams_}})
    message = str(caught.value)
    assert f"  - {key}" in message and expected in message and "Hint:" in message, message


def test_datasets_and_space_need_juicefs_and_fluid_datasets_need_fluid():
    off = {"juicefs": {"enabled": False}, "tiers": {"cold": "none", "checkpoint": "none"}}
    off |= {"training": {"enabled": False}, "fluid": {"enabled": False}}
    config = {**off, "teams": {"workspaces": [{"name": "a", "space": "1Gi", "fluidDatasets": ["imagenet-mini"]}]}}
    with pytest.raises(SettingsError) as caught:
        load_settings("dev", config)
    keys = {p.key for p in caught.value.problems}
    assert keys == {"teams.workspaces[0].datasets", "teams.workspaces[0].fluidDatasets[0]"}


def test_vended_volumes_and_claims_follow_the_stacks_protection(render_stack):
    protected = {"cluster": {"protectStatefulResources": True}, "metadata": {"acceptNodeLossRisk": True}}
    protected["rookCeph"] = {"checkpoint": {"shareWarmDevices": True}}  # dev's one disk holds every pool
    _, monitor = render_stack("dev", **protected)
    kinds = ("kubernetes:core/v1:PersistentVolume", "kubernetes:core/v1:PersistentVolumeClaim")
    vended = [r for r in monitor.registrations if r.type in kinds and r.name.startswith("ai-storage-teams-")]
    assert len(vended) == 8  # speech: librispeech and space; vision: vision-eval and space (a volume and a claim each)
    assert all(r.protect and r.retain_on_delete for r in vended)


def test_datasets_and_space_need_a_cold_tier_class_the_claim_policy_admits():
    config = {"tiers": {"cold": "none"}, "teams": {"workspaces": [{"name": "a", "datasets": ["corpus"]}]}}
    with pytest.raises(SettingsError) as caught:
        load_settings("dev", config)
    (problem,) = [p for p in caught.value.problems if p.key.startswith("teams.")]
    assert problem.key == "teams.workspaces[0].datasets" and "tiers.cold" in problem.expected


def test_team_offsite_copies_expire_even_when_the_platforms_own_copy_is_off():
    off = {"checkpoints": {"offsite": {"enabled": False}, "offsiteRetentionDays": 7}}
    assert expirations(load_settings("dev", off))["checkpoints/"] == 7  # dev vends teams with offsite access
    no_teams = {**off, "teams": {"workspaces": [{"name": "a", "offsite": False}]}}
    assert "checkpoints/" not in expirations(load_settings("dev", no_teams))


# ---------------------------------------------------------------- model artifacts


def scope_jobs(result) -> dict[str, dict]:
    """The MinIO scope Jobs' policy documents and annotations, by scope name."""
    found = {}
    for job in objects(result, "Job"):
        env = {e["name"]: e.get("value") for e in job["spec"]["template"]["spec"]["containers"][0].get("env", [])}
        if "POLICY_DOCUMENT" in env:
            found[env["POLICY"].removeprefix("scope-")] = {
                **job["metadata"]["annotations"],
                "policy": env["POLICY_DOCUMENT"],
            }
    return found


def test_a_team_gets_keys_that_write_only_its_artifacts_prefix(build):
    result, _ = teams(build)
    scope = scope_jobs(result)["artifacts-nlp"]
    assert (
        scope["ai-storage-platform/prefix"] == "artifacts/nlp/" and scope["ai-storage-platform/access"] == "read-write"
    )
    assert json.loads(scope["policy"]) == scoped_policy("ai-datasets", "artifacts/nlp/")
    assert by_name(result, "Secret", artifacts.CREDENTIALS)["metadata"]["namespace"] == "nlp"
    target = by_name(result, "ConfigMap", artifacts.TARGET)["data"]
    assert (target["prefix"], target["bucket"]) == ("artifacts/nlp/", "ai-datasets")
    result, _ = teams(build, artifacts=False)
    assert "artifacts-nlp" not in scope_jobs(result)
    assert artifacts.TARGET not in {c["metadata"]["name"] for c in objects(result, "ConfigMap")}


def test_each_artifact_reader_gets_keys_that_only_list_and_read_the_teams_models(build):
    result, _ = teams(build, artifactReaders=["serving", "batch-inference"])
    jobs = scope_jobs(result)
    for index, reader in enumerate(["serving", "batch-inference"]):
        scope = jobs[f"artifacts-nlp-read-{index}"]
        assert scope["ai-storage-platform/access"] == "read-only"
        assert scope["ai-storage-platform/service-account"] == f"{reader}/artifacts-nlp"
        (objects_statement, *_) = json.loads(scope["policy"])["Statement"]
        assert objects_statement["Action"] == ["s3:GetObject"]
        assert objects_statement["Resource"] == "arn:aws:s3:::ai-datasets/artifacts/nlp/*"
        secret = [s for s in objects(result, "Secret") if s["metadata"]["name"] == "artifacts-nlp-credentials"]
        assert reader in {s["metadata"]["namespace"] for s in secret}


@pytest.mark.parametrize(
    ("team", "got"),
    [
        ({"artifactReaders": ["serving", "serving"]}, "serving"),
        ({"artifacts": False, "artifactReaders": ["serving"]}, "serving"),
    ],
)
def test_a_bad_reader_list_is_refused_naming_artifact_readers(team, got):
    with pytest.raises(SettingsError) as caught:
        load_settings("dev", {"teams": {"workspaces": [{"name": "nlp", **team}]}})
    (line,) = [line for line in str(caught.value).splitlines() if "artifactReaders" in line]
    assert "teams.workspaces[0].artifactReaders: expected" in line and got in line and "Hint:" in line


def test_each_team_space_gets_a_juicefs_quota_of_its_claims_size(render_stack):
    """The space claim's size alone limits nothing on JuiceFS: a Job sets a directory quota per team (its run on the
    real client: tests/datapath/test_datapath_team_space.py)."""
    result, _ = render_stack("dev")
    job = by_name(result, "Job", "team-space-quotas")
    assert job["metadata"]["namespace"] == stack_settings("dev").juicefs.namespace
    script = job["spec"]["template"]["spec"]["containers"][0]["command"][2]
    assert 'juicefs quota set "$METAURL" --path /teams/vision --create --capacity 5' in script
    assert 'juicefs quota set "$METAURL" --path /teams/speech --create --capacity 4' in script
    volumes = {v["name"]: v for v in job["spec"]["template"]["spec"]["volumes"]}
    assert volumes["volume"]["secret"]["items"] == [{"key": "metaurl", "path": "metaurl"}]  # never the bucket keys
    bigger, _ = render_stack("dev", teams={"workspaces": [{"name": "vision", "space": "7.5Gi"}]})
    assert (
        "--path /teams/vision --create --capacity 8"  # 7.5Gi rounded up
        in by_name(bigger, "Job", "team-space-quotas")["spec"]["template"]["spec"]["containers"][0]["command"][2]
    )
    none, _ = render_stack("prod")  # no team has a space
    assert not [j for j in objects(none, "Job") if j["metadata"]["name"] == "team-space-quotas"]
