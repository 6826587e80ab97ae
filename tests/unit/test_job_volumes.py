"""A job's volumes beyond /data and /checkpoints: each pod's scratch claim, the team's writable space and the other
claims the platform vended, in every job kind; bad ones refused naming the key; the stack's claims and its pods'
per-pod claims within what the namespace's quota leaves (the platform's output ``teamQuotaLeft``)."""

from __future__ import annotations

import pytest

from components.common.sections import SettingsError
from components.teams.quotas import quantity
from components.teams.team import load_team_settings
from components.training.job_kinds import API, job_spec
from components.training.jobs import PodContext
from tests.conformance.upstream import validate_custom_resource
from tests.conftest import by_name
from tests.unit.test_jobs import IMAGE, mounts, pods

WHERE = PodContext("vision", 10001, "data", "ckpt", tier_prefix="ai-")
VENDED = {"workspace": {"vendedClaims": ["imagenet-mini", "vision-eval", "space"]}}
SCRATCH = {"name": "scratch", "mountPath": "/scratch", "scratch": {"size": "100Gi"}}
SPACE = {"name": "space", "mountPath": "/space", "claim": "space", "readOnly": False}
EVAL = {"name": "eval", "mountPath": "/eval", "claim": "vision-eval"}


def rendered(kind: str, volumes: list[dict]) -> dict:
    job = load_team_settings(
        {
            **VENDED,
            "workspace": {**VENDED["workspace"], "jobKinds": [kind]},
            "job": {"kind": kind, "image": IMAGE, "numNodes": 2, "volumes": volumes},
        }
    ).job
    api, name = API[kind]
    return {"apiVersion": api, "kind": name, "metadata": {"name": "train"}, "spec": job_spec(job, WHERE)}


@pytest.mark.parametrize("kind", ["trainjob", "pytorchjob", "tfjob", "volcano"])
def test_scratch_space_and_a_vended_claim_reach_every_pod_of_every_kind(kind):
    job = rendered(kind, [SCRATCH, SPACE, EVAL])
    for pod in pods(job).values():
        seen = mounts(pod)
        assert seen["/scratch"]["readOnly"] is False and seen["/space"]["readOnly"] is False
        assert seen["/eval"]["readOnly"] is True
        volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
        template = volumes["scratch"]["ephemeral"]["volumeClaimTemplate"]
        assert template["spec"] == {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "ai-hot",
            "resources": {"requests": {"storage": "100Gi"}},
        }
        assert volumes["space"]["persistentVolumeClaim"] == {"claimName": "space", "readOnly": False}
        assert volumes["eval"]["persistentVolumeClaim"] == {"claimName": "vision-eval", "readOnly": True}
    assert validate_custom_resource(job) == []


def test_a_job_of_images_only_needs_no_vended_claims():
    weights = {"name": "weights", "mountPath": "/weights", "image": "ghcr.io/example/w:1.0", "readOnly": True}
    config = {"workspace": {"kubernetesVersion": "1.35"}, "job": {"volumes": [weights, SCRATCH]}}
    assert [v.name for v in load_team_settings(config).job.volumes] == ["weights", "scratch"]


@pytest.mark.parametrize(
    ("volumes", "key", "expected"),
    [
        ([{**SCRATCH, "claim": "space"}], "job.volumes[0].image", "expected one of image, scratch and claim"),
        ([{"name": "x", "mountPath": "/x"}], "job.volumes[0].image", "expected one of image, scratch and claim"),
        ([{**SCRATCH, "readOnly": False}], "job.volumes[0].readOnly", "expected true (or unset) without claim"),
        ([{**SCRATCH, "scratch": {"size": "100Gi", "tier": "checkpoint"}}], "job.volumes[0].scratch.tier", "'hot'"),
        ([{**SCRATCH, "scratch": {"size": "lots"}}], "job.volumes[0].scratch.size", "quantity"),
        ([{**EVAL, "claim": "checkpoints"}], "job.volumes[0].claim", "expected a claim the platform vended"),
        ([{**EVAL, "claim": "other-team-data"}], "job.volumes[0].claim", "(imagenet-mini, vision-eval, space)"),
        ([{**EVAL, "readOnly": False}], "job.volumes[0].readOnly", "expected true for a vended dataset"),
        ([{**SCRATCH, "name": "data"}], "job.volumes[0].name", "expected a name no other volume of the pod has"),
        ([SCRATCH, {**EVAL, "name": "scratch"}], "job.volumes[1].name", "expected a name no other"),
        ([{**SCRATCH, "mountPath": "/data/scratch"}], "job.volumes[0].mountPath", "apart from /data"),
        ([{**SCRATCH, "mountPath": "/"}], "job.volumes[0].mountPath", "apart from /checkpoints, /data"),
        ([SCRATCH, {**EVAL, "mountPath": "/scratch/"}], "job.volumes[1].mountPath", "apart from /scratch"),
        ([{**SCRATCH, "mountPath": "/var/run/ai-storage-metrics"}], "job.volumes[0].mountPath", "/var/run/ai-"),
    ],
)
def test_bad_job_volumes_are_refused_naming_the_key(volumes, key, expected):
    with pytest.raises(SettingsError) as caught:
        load_team_settings({**VENDED, "job": {"volumes": volumes}})
    lines = [line for line in str(caught.value).splitlines() if line.startswith(f"  - {key}:")]
    assert len(lines) == 1 and expected in lines[0] and "Hint:" in lines[0], str(caught.value)


def test_a_claim_volume_needs_the_platforms_vended_claims():
    with pytest.raises(SettingsError, match=r"claim the platform vended \(workspace\.vendedClaims is empty\)"):
        load_team_settings({"job": {"volumes": [SPACE]}})


QUOTA = {"hot": {"storage": "500Gi", "claims": 8}, "checkpoint": {"storage": "1Ti", "claims": 8}}


def test_the_stacks_claims_and_each_pods_scratch_fit_what_the_quota_leaves():
    workspace = {**VENDED["workspace"], "storageQuota": QUOTA}
    job = {"numNodes": 4, "volumes": [SCRATCH]}
    assert load_team_settings({"workspace": workspace, "job": job}).job.pods() == 4  # 4 x 100Gi of 500Gi
    with pytest.raises(SettingsError) as caught:  # 6 pods' scratch: 600Gi of the 500Gi the hot tier has left
        load_team_settings({"workspace": workspace, "job": {**job, "numNodes": 6}})
    assert (
        "job.volumes[0].scratch: expected at most 500Gi on the hot tier (quota.tiers.hot.storage); got "
        "'100Gi + 100Gi + 100Gi + 100Gi + 100Gi + 100Gi'"
    ) in str(caught.value)
    landing = {"landing": {"enabled": True, "size": "50Gi"}}
    with pytest.raises(SettingsError) as caught:  # the landing volumes count first: 4 x 50Gi + 4 x 100Gi
        load_team_settings({"workspace": workspace, "job": job, "checkpoint": landing})
    assert "checkpoint.landing.size: expected at most 500Gi on the hot tier" in str(caught.value)
    with pytest.raises(SettingsError, match=r"checkpoint\.size: expected at most 1Ti on the checkpoint tier"):
        load_team_settings({"workspace": workspace, "checkpoint": {"size": "2Ti"}})
    few = {**workspace, "storageQuota": {"hot": {"claims": 3}}}
    with pytest.raises(SettingsError, match=r"job\.volumes\[0\]\.scratch: expected at most 3 claim\(s\) on the hot"):
        load_team_settings({"workspace": few, "job": job})
    assert load_team_settings({"workspace": VENDED["workspace"], "job": {**job, "numNodes": 60}})  # unset: unchecked


def test_a_bad_storage_quota_is_refused_naming_the_key():
    with pytest.raises(SettingsError, match=r"workspace\.storageQuota\.scratch"):
        load_team_settings({"workspace": {"storageQuota": {"scratch": {"storage": "1Ti"}}}})
    with pytest.raises(SettingsError, match=r"workspace\.storageQuota\.hot\.claims: expected .*0"):
        load_team_settings({"workspace": {"storageQuota": {"hot": {"claims": -1}}}})


def test_the_team_example_copies_the_platforms_outputs(render_team):
    """The example's vendedClaims and storageQuota are the dev platform's outputs teamClaims.vision and
    teamQuotaLeft.vision (8Gi of cold quota less the 5Gi space and the 1Gi dataset claim: 2Gi)."""
    from components.toolchain import render

    platform = render.rendering("dev", render.run("dev")).outputs
    settings = load_team_settings(_example_config())
    assert platform["teamClaims"]["vision"] == settings.workspace.vended_claims
    copied = {tier: (quantity(q.storage or "0"), q.claims) for tier, q in settings.workspace.storage_quota.items()}
    given = {tier: (quantity(q["storage"]), q["claims"]) for tier, q in platform["teamQuotaLeft"]["vision"].items()}
    assert given == copied
    assert platform["teamQuotaLeft"]["vision"]["cold"] == {"storage": "2Gi", "claims": 6}
    result, _ = render_team()
    (pod,) = pods(by_name(result, "TrainJob", "resnet50")).values()
    assert {"/scratch", "/space", "/eval"} <= set(mounts(pod))


def _example_config() -> dict:
    from components.settings import decode
    from components.toolchain import render
    from tests.conftest import TEAM_EXAMPLE

    config, _ = render.stack_file_config(TEAM_EXAMPLE / "Pulumi.dev.yaml")
    return {k.split(":", 1)[1]: decode(v) for k, v in config.items() if k.startswith("team-training:")}
