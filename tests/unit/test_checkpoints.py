"""Checkpoint protection: the snapshot job against a stand-in API server, its RBAC, and the offsite CronJob (its
script: test_checkpoint_offsite.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from components.common.sections import SettingsError
from components.protection.checkpoints import (
    SNAPSHOT_LABEL,
    CheckpointProtection,
    LandingSettings,
    OffsiteSettings,
    OffsiteTarget,
    SnapshotSettings,
    protect_checkpoints,
    snapshot_rules,
)
from components.toolchain import render
from tests.conformance.upstream import validate_object
from tests.conftest import STACKS, by_name, objects
from tests.unit import stand_in_api

EXAMPLE = render.ROOT / "examples" / "team-training"
NAMESPACE, CLAIM, KEEP = "vision", "checkpoints", 3
SNAPSHOTS = ("snapshot.storage.k8s.io", "volumesnapshots")


def snapshot(name: str, labels: dict[str, str]) -> dict:
    meta = {"name": name, "namespace": NAMESPACE, "labels": labels}
    return {"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshot", "metadata": meta}


def rendered_snapshot_job(build, protection: CheckpointProtection | None = None):
    """The rendered CronJob's program and environment, and the rendered Role and RoleBinding."""
    protection = protection or CheckpointProtection(snapshots=SnapshotSettings(keep=KEEP))
    result, _ = build(lambda: protected(protection))
    pod = by_name(result, "CronJob", f"{CLAIM}-snapshots")["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"][:2] == ["python3", "-c"]
    env = {e["name"]: e["value"] for e in container["env"]}
    return (
        container["command"][2],
        env,
        pod["serviceAccountName"],
        objects(result, "Role"),
        objects(result, "RoleBinding"),
    )


def run_job(program: str, env: dict[str, str], account: str, base_url: str, tmp_path) -> subprocess.CompletedProcess:
    """Run the job's program as its pod would: the service account's token and namespace mounted as files."""
    mounted = tmp_path / "serviceaccount"
    mounted.mkdir(exist_ok=True)
    (mounted / "namespace").write_text(f"{NAMESPACE}\n")
    (mounted / "token").write_text(f"token-of-{account}\n")
    environ = {**os.environ, **env, "KUBERNETES_API": base_url, "SERVICE_ACCOUNT_DIR": str(mounted)}
    return subprocess.run([sys.executable, "-c", program], env=environ, capture_output=True, text=True, timeout=60)


def cluster_with_snapshots(roles, bindings) -> stand_in_api.Cluster:
    """Four labelled snapshots of the claim, a hand-made unlabelled one of it, two of another claim, and the
    same claim's label in another namespace: retention may only ever touch the first four."""
    tokens = {f"token-of-{CLAIM}-snapshots": (NAMESPACE, f"{CLAIM}-snapshots")}
    cluster = stand_in_api.Cluster(roles, bindings, tokens)
    ours = {SNAPSHOT_LABEL: CLAIM}
    existing = [snapshot(f"{CLAIM}-2026010{i}000000", ours) for i in range(1, 5)]
    existing += [snapshot(f"{CLAIM}-20251224000000", {}), snapshot(f"{CLAIM}-20251225000000", {"team": "vision"})]
    existing += [snapshot(f"archive-2026010{i}000000", {SNAPSHOT_LABEL: "archive"}) for i in (1, 2)]
    for obj in existing:
        cluster.objects[(NAMESPACE, SNAPSHOTS[1], obj["metadata"]["name"])] = obj
    elsewhere = {**snapshot(f"{CLAIM}-20250101000000", ours), "metadata": {"name": f"{CLAIM}-20250101000000",
                 "namespace": "audio", "labels": ours}}  # fmt: skip
    cluster.objects[("audio", SNAPSHOTS[1], elsewhere["metadata"]["name"])] = elsewhere
    return cluster


def test_the_snapshot_job_snapshots_the_claim_and_keeps_only_its_newest_labelled_snapshots(build, tmp_path):
    program, env, account, roles, bindings = rendered_snapshot_job(build)
    assert env == {"CLAIM": CLAIM, "KEEP": str(KEEP)}
    cluster = cluster_with_snapshots(roles, bindings)
    before = set(cluster.objects)
    with stand_in_api.serve(cluster) as url:
        run = run_job(program, env, account, url, tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr + str(cluster.requests)
    assert all(code < 400 for _, _, code in cluster.requests), cluster.requests
    collection = f"/apis/snapshot.storage.k8s.io/v1/namespaces/{NAMESPACE}/volumesnapshots"
    assert [(verb, path) for verb, path, _ in cluster.requests if verb != "delete"] == [
        ("create", collection),
        ("list", f"{collection}?labelSelector={SNAPSHOT_LABEL}%3D{CLAIM}"),
    ]
    (new,) = [o for key, o in cluster.objects.items() if key not in before]
    assert new["metadata"]["labels"] == {SNAPSHOT_LABEL: CLAIM}  # the next run finds it by this label
    assert new["spec"] == {"source": {"persistentVolumeClaimName": CLAIM}}
    assert validate_object(new, "1.33") == []  # against the upstream VolumeSnapshot CRD
    # The newest KEEP of the claim's labelled snapshots stay (the new one and the two before it); the
    # unlabelled ones, the other claim's and the other namespace's are untouched.
    assert sorted(name for ns, _, name in cluster.objects if ns == NAMESPACE) == sorted(
        [
            "archive-20260101000000",
            "archive-20260102000000",
            f"{CLAIM}-20251224000000",
            f"{CLAIM}-20251225000000",
            f"{CLAIM}-20260103000000",
            f"{CLAIM}-20260104000000",
            new["metadata"]["name"],
        ]
    )
    assert ("audio", SNAPSHOTS[1], f"{CLAIM}-20250101000000") in cluster.objects
    deleted = [path.rsplit("/", 1)[1] for verb, path, _ in cluster.requests if verb == "delete"]
    assert deleted == [f"{CLAIM}-20260101000000", f"{CLAIM}-20260102000000"]


def test_the_snapshot_job_fails_when_its_role_does_not_allow_a_call(build, tmp_path):
    program, env, account, roles, bindings = rendered_snapshot_job(build)
    for verb in ("create", "list", "delete"):
        (role,) = roles
        narrowed = {
            **role,
            "rules": [{**role["rules"][0], "verbs": [v for v in role["rules"][0]["verbs"] if v != verb]}],
        }
        cluster = cluster_with_snapshots([narrowed], bindings)
        with stand_in_api.serve(cluster) as url:
            run = run_job(program, env, account, url, tmp_path)
        assert run.returncode != 0 and "403" in run.stderr, verb
        assert [v for v, _, code in cluster.requests if code == 403] == [verb]


def test_the_stand_in_api_server_authorizes_every_request_against_the_rendered_rbac(build, tmp_path):
    _, _, account, roles, bindings = rendered_snapshot_job(build)
    cluster = cluster_with_snapshots(roles, bindings)
    token = f"token-of-{account}"

    def call(method: str, path: str, token: str = token) -> int:
        request = urllib.request.Request(f"{url}{path}", method=method, headers={"Authorization": f"Bearer {token}"})
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status
        except urllib.error.HTTPError as e:
            assert json.load(e)["kind"] == "Status"
            return e.code

    snapshots = f"/apis/snapshot.storage.k8s.io/v1/namespaces/{NAMESPACE}/volumesnapshots"
    with stand_in_api.serve(cluster) as url:
        assert call("GET", snapshots) == 200
        assert call("GET", snapshots, token="someone-else") == 401
        assert call("GET", f"{snapshots}/{CLAIM}-20260101000000") == 403  # get is not granted, only list
        assert call("GET", snapshots.replace(NAMESPACE, "audio")) == 403  # the Role is namespaced
        assert call("GET", f"/api/v1/namespaces/{NAMESPACE}/secrets") == 403
        assert call("DELETE", snapshots) == 403  # deletecollection is not granted
        assert call("GET", f"{snapshots}?labelSelector=a%20in%20(b") == 400


@pytest.mark.parametrize(
    ("selector", "labels", "matches"),
    [
        ("", {}, True),
        ("a=b", {"a": "b"}, True),
        ("a==b", {"a": "b", "c": "d"}, True),
        ("a=b", {"a": "c"}, False),
        ("a=b", {}, False),
        ("a!=b", {}, True),  # != and notin match objects without the key
        ("a!=b", {"a": "b"}, False),
        ("example.com/a in (b, c)", {"example.com/a": "c"}, True),
        ("a in (b,c)", {"a": "d"}, False),
        ("a notin (b,c)", {}, True),
        ("a notin (b,c)", {"a": "b"}, False),
        ("a", {"a": ""}, True),
        ("!a", {"a": ""}, False),
        ("!a", {"b": "c"}, True),
        ("a=b,c in (d,e),!f", {"a": "b", "c": "e"}, True),
        ("a=b,c in (d,e),!f", {"a": "b", "c": "e", "f": "g"}, False),
        (f"{SNAPSHOT_LABEL}={CLAIM}", {SNAPSHOT_LABEL: CLAIM}, True),
        (f"{SNAPSHOT_LABEL}={CLAIM}", {SNAPSHOT_LABEL: "archive"}, False),
    ],
)
def test_the_stand_in_api_server_matches_label_selectors_as_kubernetes_does(selector, labels, matches):
    assert stand_in_api.selector_matches(selector, labels) is matches


@pytest.mark.parametrize("selector", ["a in (b", "a=b=c", "=b", "a in b", "a>1", "-a=b"])
def test_the_stand_in_api_server_refuses_a_malformed_selector(selector):
    with pytest.raises(stand_in_api.SelectorError):
        stand_in_api.selector_matches(selector, {})


def test_the_snapshot_job_may_only_handle_volume_snapshots():
    (rule,) = snapshot_rules()
    assert rule == {
        "apiGroups": ["snapshot.storage.k8s.io"],
        "resources": ["volumesnapshots"],
        "verbs": ["create", "list", "delete"],
    }


def protected(protection: CheckpointProtection, target: OffsiteTarget | None = None) -> None:
    import pulumi_kubernetes as k8s

    ns = k8s.core.v1.Namespace("ns", metadata={"name": "vision"})
    protect_checkpoints("vision-checkpoints", "checkpoints", "vision", protection, target, ns, [ns])


TARGET = OffsiteTarget("minio", "http://minio.object-store.svc.cluster.local:9000/ai-datasets", "ak", "sk")


def test_snapshots_and_offsite_copies_are_scheduled_with_their_own_account_and_keys(build):
    result, _ = build(lambda: protected(CheckpointProtection(), TARGET))
    snapshots, offsite = (
        by_name(result, "CronJob", "checkpoints-snapshots"),
        by_name(result, "CronJob", "checkpoints-offsite"),
    )
    pod = snapshots["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "checkpoints-snapshots" and pod["automountServiceAccountToken"] is True
    binding = by_name(result, "RoleBinding", "checkpoints-snapshots")
    assert binding["roleRef"]["name"] == "checkpoints-snapshots"
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "checkpoints-snapshots", "namespace": "vision"}]
    copy = offsite["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    env = {e["name"]: e["value"] for e in copy["containers"][0]["env"]}
    assert (
        env["DESTINATION"]
        == "minio://minio.object-store.svc.cluster.local:9000/ai-datasets/checkpoints/vision/checkpoints/"
    )
    assert {"name": "checkpoints", "persistentVolumeClaim": {"claimName": "checkpoints", "readOnly": True}} in copy[
        "volumes"
    ]
    assert by_name(result, "Secret", "checkpoints-offsite-credentials")["stringData"] == {
        "access-key": "[secret]",
        "secret-key": "[secret]",
    }
    for obj in [o for objs in result.manifests.values() for o in objs]:
        assert validate_object(obj, "1.33") == [], obj["kind"]


def test_nothing_is_scheduled_when_both_are_off(build):
    off = CheckpointProtection(snapshots=SnapshotSettings(enabled=False), offsite=OffsiteSettings(enabled=False))
    result, _ = build(lambda: protected(off, TARGET))
    assert not objects(result, "CronJob") and not objects(result, "Role")


def pod_specs(value: object) -> Iterator[dict]:
    """Every pod spec (a mapping with ``containers``) nested anywhere in a rendered object."""
    if isinstance(value, dict):
        if isinstance(value.get("containers"), list):
            yield value
        for item in value.values():
            yield from pod_specs(item)
    elif isinstance(value, list):
        for item in value:
            yield from pod_specs(item)


def checkpoint_tier_pods(result: render.Rendering) -> list[tuple[str, dict]]:
    """The pod specs of a render that mount a claim of the checkpoint tier (its StorageClass, any prefix), with
    the kind of the object that holds each."""
    claims = {
        c["metadata"]["name"]
        for c in objects(result, "PersistentVolumeClaim")
        if c["spec"]["storageClassName"].endswith("checkpoint")
    }
    rendered = [o for objs in result.manifests.values() for o in objs]
    return [
        (obj["kind"], pod)
        for obj in rendered
        for pod in pod_specs(obj)
        if any(v.get("persistentVolumeClaim", {}).get("claimName") in claims for v in pod.get("volumes", []))
    ]


def test_every_pod_that_mounts_the_checkpoint_tier_keeps_the_ownership_of_its_files(as_installed):
    """fsGroupChangePolicy OnRootMismatch: without it the kubelet re-chowns the whole checkpoint history at each
    pod start (CephFS). Every stack and both stacks of the team example: the training runtimes, the team's job,
    the offsite copies and the restore test."""
    renders = [render.rendering(stack, render.run(stack)) for stack in STACKS]
    renders += [render.rendering(s, render.run(s, None, EXAMPLE)) for s in ("dev", "dev-volcano")]
    kinds: set[str] = set()
    for result in renders:
        pods = checkpoint_tier_pods(result)
        assert pods, f"no pod of {result.plan['stack']} mounts the checkpoint tier"
        for kind, pod in pods:
            assert pod.get("securityContext", {}).get("fsGroupChangePolicy") == "OnRootMismatch", (kind, pod)
        kinds |= {kind for kind, _ in pods}
    assert {"ClusterTrainingRuntime", "TrainJob", "Job", "CronJob"} <= kinds


def test_a_runtime_with_a_landing_volume_gives_each_pod_one_of_the_hot_class():
    from components.training.trainer import RuntimeSettings, runtime_spec

    landing = LandingSettings(enabled=True, size="50Gi")
    runtime = RuntimeSettings(name="rt", queue="q", dataset_claim="data", checkpoint_landing=landing)
    spec = runtime_spec(runtime, "checkpoints", None, "ai-")
    cr = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime", "metadata": {"name": "rt"}}
    assert validate_object({**cr, "spec": spec}, "1.33") == []
    (node,) = spec["template"]["spec"]["replicatedJobs"]
    pod = node["template"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    volume = {v["name"]: v for v in pod["volumes"]}["checkpoint-landing"]
    claim = volume["ephemeral"]["volumeClaimTemplate"]["spec"]
    assert claim["storageClassName"] == "ai-hot" and claim["resources"]["requests"]["storage"] == "50Gi"
    assert {"name": "checkpoint-landing", "mountPath": "/checkpoint-landing"} in container["volumeMounts"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["AI_STORAGE_CHECKPOINT_LOCAL_DIR"] == "/checkpoint-landing"
    assert env["AI_STORAGE_CHECKPOINT_DIR"] == "/checkpoints"
    off = runtime_spec(runtime.model_copy(update={"checkpoint_landing": LandingSettings()}), "checkpoints")
    (node,) = off["template"]["spec"]["replicatedJobs"]
    volumes = [v["name"] for v in node["template"]["spec"]["template"]["spec"]["volumes"]]
    assert volumes == ["data", "checkpoints", "metrics-dir"]  # no landing volume


def test_a_runtime_landing_volume_without_a_hot_tier_is_refused_naming_the_key():
    from components.settings import load_settings

    runtime = {"name": "rt", "queue": "team-a", "datasetClaim": "d", "checkpointLanding": {"enabled": True}}
    with pytest.raises(SettingsError) as caught:
        load_settings("dev", {"tiers": {"hot": "none"}, "training": {"runtimes": [runtime]}})
    message = str(caught.value)
    assert "training.runtimes[0].checkpointLanding.enabled: expected a hot tier" in message and "Hint:" in message
