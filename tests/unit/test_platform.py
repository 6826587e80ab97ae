"""Platform: every workload that touches the bucket gets credentials for its own prefix only; with IAM roles for
service accounts, each runs under a ServiceAccount that carries its own role."""

from __future__ import annotations

import json

import yaml

from components.backends.object_stores.bucket import ROLE_ANNOTATION
from components.tiers.juicefs import CHART_ACCOUNTS, MOUNT_ACCOUNT_PARAMETER
from components.toolchain.render import ROOT
from tests.conftest import by_name, external_dataset_claims, objects, scoped_policy

OIDC = "arn:aws:iam::123456789012:oidc-provider/oidc.eks.us-east-1.amazonaws.com/id/ABC"
ISSUER = "oidc.eks.us-east-1.amazonaws.com/id/ABC"
# Fluid's runtimes take no ServiceAccount: a stack with IAM roles has no Fluid datasets (a settings rule), so
# the dev teams read none either.
DEV_TEAMS = yaml.safe_load((ROOT / "stacks" / "dev.yaml").read_text())["teams"]["workspaces"]
S3_OIDC = {
    "objectStore": {"backend": "s3", "bucket": "ai-data-x", "s3": {"oidcProviderArn": OIDC}},
    "fluid": {"datasets": []},
    "teams": {"workspaces": [{k: v for k, v in t.items() if k != "fluidDatasets"} for t in DEV_TEAMS]},
    **external_dataset_claims(),  # no Fluid dataset for the runtime's claim
}
TEAM_PREFIXES = {f"checkpoints/{t['name']}/" for t in DEV_TEAMS}


def _roles(monitor) -> dict[str, dict]:
    """IAM role ARN (as the mocks compute it) -> {trusted subjects, permission policy}."""
    roles = {}
    for r in monitor.registrations:
        if r.type == "aws:iam/role:Role":
            trust = json.loads(r.inputs["assumeRolePolicy"])["Statement"][0]["Condition"]["StringEquals"]
            roles[f"arn:aws:iam::000000000000:{r.name}"] = {"subjects": trust[f"{ISSUER}:sub"], "name": r.name}
    for r in monitor.registrations:
        if r.type == "aws:iam/rolePolicy:RolePolicy":
            role = f"arn:aws:iam::000000000000:{r.inputs['role'].removesuffix('_id')}"
            roles[role]["policy"] = r.inputs["policy"]
    return roles


def _account_role(result, namespace: str, name: str) -> str:
    """The role a ServiceAccount carries (fails when it has none)."""
    sa = [
        o
        for o in objects(result, "ServiceAccount")
        if o["metadata"]["name"] == name and o["metadata"]["namespace"] == namespace
    ]
    assert sa, f"no ServiceAccount {namespace}/{name}"
    role = sa[0]["metadata"].get("annotations", {}).get(ROLE_ANNOTATION)
    assert role, f"ServiceAccount {namespace}/{name} carries no role"
    return role


def _bucket_workloads(result) -> list[tuple[str, dict]]:
    """Every CronJob/Job whose container runs a JuiceFS client against the bucket, with its pod spec."""
    found = []
    for kind in ("CronJob", "Job"):
        for o in objects(result, kind):
            spec = o["spec"]["jobTemplate"]["spec"] if kind == "CronJob" else o["spec"]
            pod = spec["template"]["spec"]
            if any("juicefs sync" in json.dumps(c.get("command", [])) for c in pod["containers"]):
                found.append((o["metadata"]["namespace"], pod))
    return found


def test_with_oidc_every_bucket_workload_runs_as_an_account_with_its_own_role(render_stack):
    result, monitor = render_stack("dev", **S3_OIDC)
    roles = _roles(monitor)
    expected = {
        "meta-backups/": "juicefs-csi",
        "checkpoints/training/": "training",
    }
    workloads = _bucket_workloads(result)
    assert len(workloads) >= len(expected), workloads
    seen = set()
    for namespace, pod in workloads:
        account = pod.get("serviceAccountName")
        assert account and account != "default", f"a bucket workload in {namespace} runs as the default account"
        role = roles[_account_role(result, namespace, account)]
        assert role["subjects"] == [f"system:serviceaccount:{namespace}:{account}"]
        prefix = next(p for p, ns in expected.items() if ns == namespace)
        assert json.loads(role["policy"]) == scoped_policy("ai-data-x", prefix)
        seen.add(prefix)
    assert seen == set(expected)

    # JuiceFS mounts: every JuiceFS StorageClass names the mount pods' account, which carries the volume's role.
    classes = [c for c in objects(result, "StorageClass") if c["provisioner"] == "csi.juicefs.com"]
    assert classes
    for sc in classes:
        account = sc["parameters"][MOUNT_ACCOUNT_PARAMETER]
        volume = roles[_account_role(result, "juicefs-csi", account)]
        assert f"system:serviceaccount:juicefs-csi:{account}" in volume["subjects"]
        assert json.loads(volume["policy"]) == scoped_policy("ai-data-x", "ai-datasets/")
    # So do the static volumes vended to teams (their mount pods take the account from the volume's attributes).
    volumes = [v for v in objects(result, "PersistentVolume") if v["spec"]["csi"]["driver"] == "csi.juicefs.com"]
    assert volumes
    for pv in volumes:
        account = pv["spec"]["csi"]["volumeAttributes"][MOUNT_ACCOUNT_PARAMETER]
        assert "juicefs-csi:" + account in {s.split("serviceaccount:", 1)[1] for s in volume["subjects"]}
    # ... and so do the CSI controller and node (the controller mounts the volume to make a claim's directory).
    chart = next(c for c in result.charts if c["chart"] == "juicefs-csi-driver")
    for part, account in CHART_ACCOUNTS.items():
        role = chart["values"]["serviceAccount"][part]["annotations"][ROLE_ANNOTATION]
        assert f"system:serviceaccount:juicefs-csi:{account}" in roles[role]["subjects"]


def test_with_oidc_no_bucket_workload_gets_keys(render_stack):
    result, monitor = render_stack("dev", **S3_OIDC)
    assert not [r for r in monitor.registrations if r.type in ("aws:iam/user:User", "aws:iam/accessKey:AccessKey")]
    assert by_name(result, "Secret", "checkpoints-offsite-credentials")["stringData"] == {}


def test_with_keys_each_workload_gets_keys_of_its_own_prefix(render_stack):
    result, monitor = render_stack("dev", objectStore={"backend": "s3", "bucket": "ai-data-x"})
    policies = {
        r.inputs["user"].removesuffix("_id"): r.inputs["policy"]
        for r in monitor.registrations
        if r.type == "aws:iam/userPolicy:UserPolicy"
    }
    prefixes = {json.loads(p)["Statement"][0]["Resource"].split("ai-data-x/", 1)[1] for p in policies.values()}
    teams = {f"{p}*" for p in TEAM_PREFIXES}
    artifacts = {f"artifacts/{t['name']}/*" for t in DEV_TEAMS}
    assert prefixes == {"ai-datasets/*", "meta-backups/*", "checkpoints/training/*", *teams, *artifacts}
    cron = by_name(result, "CronJob", "juicefs-metadata-backup")
    pod = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    # The backup reads only the metadata URL from the volume Secret; its keys come from its own Secret.
    assert volumes["volume"]["secret"]["items"] == [{"key": "metaurl", "path": "metaurl"}]
    assert volumes["keys"]["secret"]["secretName"] == "juicefs-metadata-backup-keys"
    assert "serviceAccountName" not in pod
