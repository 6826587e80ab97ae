"""plan_diff: what `pulumi up` does between two renders, and what it means for data; the real upgrade from 0.1.0."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest

from components.common import versions
from components.settings import SettingsError, load_settings
from components.toolchain import data_notes, diff_rules, diff_sources, plan_diff, render
from components.toolchain.cli import main
from components.toolchain.render import ROOT
from tests.conftest import STACKS as EVERY_STACK
from tests.conftest import stack_file

PREVIOUS_RELEASE = "b68ff3c"  # 0.1.0
RUNBOOK = (ROOT / "docs" / "runbook.md").read_text()
STACKS = ["dev", "staging", "prod"]


# --- the real upgrade: 0.1.0 (rendered on the fly by its own program) -> this checkout -----------------------


@pytest.fixture(scope="module")
def upgrade(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[plan_diff.Render, plan_diff.Render]]:
    out = tmp_path_factory.mktemp("upgrade")
    old = diff_sources.render_ref(ROOT, PREVIOUS_RELEASE, out / "base", STACKS)
    pairs = {}
    for stack in STACKS:
        render.write(render.rendering(stack, render.run(stack)), out / "head" / stack)
        pairs[stack] = (plan_diff.load_render(old[stack]), plan_diff.load_render(out / "head" / stack))
    return pairs


def by_action(diff: plan_diff.StackDiff, *actions: str) -> dict[str, plan_diff.Change]:
    return {c.id: c for c in diff.changes if c.action in actions}


@pytest.mark.parametrize("stack", STACKS)
def test_upgrade_from_0_1_0_names_the_replaces_and_blocks_only_on_moving_pools(upgrade, stack):
    diff = plan_diff.diff_stack(stack, *upgrade[stack], [])
    # The metadata engine's and MinIO's port-only NetworkPolicies give way to network_policies' (other names).
    deleted = by_action(diff, "delete")
    minio = ["NetworkPolicy/object-store/minio"] if stack == "dev" else []
    # The S3 stacks' admin IAM user and its key go: every client has a scope of its own now (the upgrade
    # revokes the key that 0.1.0 copied into team namespaces).
    s3_admin = (
        []
        if stack == "dev"
        else [
            "aws:iam/user:User/ai-storage-object-store-user",
            "aws:iam/accessKey:AccessKey/ai-storage-object-store-access-key",
            "aws:iam/userPolicy:UserPolicy/ai-storage-object-store-user-policy",
        ]
    )
    assert set(deleted) == {"NetworkPolicy/juicefs-meta/redis", *minio, *s3_admin}
    replaced = by_action(diff, "replace", "rejected")
    if stack == "dev":
        # The acceptance Jobs run the design's time-based stories now (a Job's template cannot change in place).
        acceptance = {f"Job/storage-acceptance/acceptance-{tier}" for tier in ("hot", "warm", "cold", "checkpoint")}
        assert acceptance <= set(replaced)
        assert all("the Job runs again" in replaced[name].notes[0] for name in acceptance)
        (job,) = [change for name, change in replaced.items() if name not in acceptance]
        assert job.id == "Job/object-store/minio-bucket-ai-datasets-dev"
        assert job.reasons[0].startswith("`.spec.template` changed (.spec.template.spec.containers[0].env[3].value)")
        assert "the Job runs again" in job.notes[0]
    else:
        (service,) = replaced.values()
        assert service.id == "Service/juicefs-meta/redis"
        assert service.reasons[0].startswith("`.spec.clusterIP` changed: https://github.com/pulumi/pulumi-kubernetes")
        assert "the name resolves to nothing" in service.notes[0]
    # 0.1.0 put every Ceph pool on every OSD; staging and prod now keep the checkpoint pools apart from the
    # training reads' (device classes): Ceph moves those pools' objects, which blocks until acknowledged.
    moving = {c.id for c in diff.blocking}
    if stack == "dev":
        assert moving == set()
    else:
        assert moving == {
            "CephBlockPool/rook-ceph/replicapool",
            "CephFilesystem/rook-ceph/ai-warm",
            "CephFilesystem/rook-ceph/ai-checkpoint",
        }
        assert all(c.moves_data and c.action == "update" for c in diff.blocking)
        acknowledged = plan_diff.diff_stack(stack, *upgrade[stack], sorted(moving))
        assert acknowledged.blocking == [] and plan_diff.exit_code([acknowledged]) == 0
    assert plan_diff.exit_code([diff]) == (0 if stack == "dev" else 1)


DECISION_RECORD = ".metadata.annotations.ai-storage-platform/decision."


def without_decision_records(fields: list[str]) -> list[str]:
    """The changed fields besides the tier's decision record (annotations every tier class gains in 0.3.0)."""
    return [f for f in fields if not f.startswith(DECISION_RECORD)]


@pytest.mark.parametrize("stack", STACKS)
def test_upgrade_adds_each_tier_class_its_decision_record_in_place(upgrade, stack):
    updated = by_action(plan_diff.diff_stack(stack, *upgrade[stack], []), "update")
    for tier in ("cold", "warm"):
        added = set(updated[f"StorageClass/{tier}"].fields) - set(
            without_decision_records(updated[f"StorageClass/{tier}"].fields)
        )
        assert {f.removeprefix(DECISION_RECORD) for f in added} >= {"checkpoint-interval", "acceptable-cold-start"}


@pytest.mark.parametrize("stack", STACKS)
def test_upgrade_changes_the_cold_mount_options_for_new_volumes_only(upgrade, stack):
    diff = plan_diff.diff_stack(stack, *upgrade[stack], [])
    cold = by_action(diff, "update")["StorageClass/cold"]
    assert without_decision_records(cold.fields) == [".mountOptions[0]", ".mountOptions[11]"]
    (note,) = cold.notes
    assert '"verify-cache-checksum=extend" -> "verify-cache-checksum=shrink"' in note
    assert '"cache-dir=/var/jfsCache" -> "cache-dir=/var/lib/ai-storage-cache/juicefs"' in note
    assert "reaches only volumes provisioned from now on" in note


@pytest.mark.parametrize("stack", STACKS)
def test_upgrade_updates_in_place_what_the_api_server_lets_change(upgrade, stack):
    updated = by_action(plan_diff.diff_stack(stack, *upgrade[stack], []), "update")
    # No false replace: a StatefulSet's template and replicas, a Ceph cluster's spec, StorageClass annotations.
    assert ".spec.template.spec.containers" in " ".join(updated["StatefulSet/juicefs-meta/redis"].fields)
    cluster = [".spec.cephConfig", ".spec.labels", ".spec.monitoring"]  # cephConfig: rookCeph.mclockProfile
    if stack != "dev":  # the OSDs on storage nodes of their own, which now lend their NVMe disks to checkpoints
        cluster += [".spec.placement", ".spec.storage.deviceFilter"]
    assert updated["CephCluster/rook-ceph/rook-ceph"].fields == cluster
    assert without_decision_records(updated["StorageClass/warm"].fields) == [
        ".metadata.annotations.ai-storage-platform/devices",
        ".metadata.annotations.ai-storage-platform/snapshot-class",
    ]
    assert set(updated["pulumi:providers:kubernetes/kubernetes"].fields) == {
        ".enableConfigMapMutable",
        ".enableSecretMutable",
    }


@pytest.mark.parametrize("stack", ["staging", "prod"])
def test_upgrade_moves_the_metadata_engine_and_says_both_ways_through(upgrade, stack):
    notes = plan_diff.diff_stack(stack, *upgrade[stack], []).notes
    (engine,) = [n for n in notes if n.startswith("metadata engine")]
    assert engine.startswith("metadata engine standalone -> sentinel")
    assert "docs/runbook.md#move-the-metadata-to-another-engine" in engine
    assert "`metadata.migratedFrom: standalone`" in engine and "`metadata.engine: standalone`" in engine


def test_dev_keeps_its_engine():
    assert data_notes.engine_notes(*[plan_diff.Render({"resources": []}, {"metadataEngine": "standalone"})] * 2) == []


# Which Secrets change data in the upgrade: the provider decides whether that is an update or a replace.
CHANGED_SECRETS = {
    "dev": {"Secret/juicefs-meta/redis-config"},
    "staging": {"Secret/juicefs-meta/redis-config", "Secret/juicefs-csi/juicefs-volume"},
    "prod": {"Secret/juicefs-meta/redis-config", "Secret/juicefs-csi/juicefs-volume"},
}


@pytest.mark.parametrize("stack", STACKS)
def test_secrets_update_in_place_because_the_provider_allows_it(upgrade, stack):
    updated = by_action(plan_diff.diff_stack(stack, *upgrade[stack], []), "update")
    assert {i for i in updated if i.startswith("Secret/")} == CHANGED_SECRETS[stack]
    if stack != "dev":
        note = updated["Secret/juicefs-csi/juicefs-volume"].notes[0]
        assert note.startswith("updated in place; read by ") and "StorageClass/cold" in note


@pytest.mark.parametrize("stack", STACKS)
def test_without_secret_mutability_the_same_upgrade_replaces_those_secrets(upgrade, stack):
    base, head = upgrade[stack]
    plan = copy.deepcopy(head.plan)
    (provider,) = [r for r in plan["resources"] if r["type"] == diff_rules.PROVIDER]
    del provider["inputs"]["enableSecretMutable"]
    diff = plan_diff.diff_stack(stack, base, plan_diff.Render(plan, head.outputs), [])
    replaced = {i for i in by_action(diff, "replace") if i.startswith("Secret/")}
    assert replaced == CHANGED_SECRETS[stack]
    notes = by_action(diff, "replace")["Secret/juicefs-meta/redis-config"].notes
    assert (
        notes[0].startswith("deleted, then created under the same name")
        and "StatefulSet/juicefs-meta/redis" in notes[0]
    )


def test_the_program_lets_secrets_and_config_maps_update_in_place(upgrade):
    _, head = upgrade["dev"]
    (provider,) = [r for r in head.resources if r["type"] == diff_rules.PROVIDER]
    assert provider["inputs"]["enableSecretMutable"] == provider["inputs"]["enableConfigMapMutable"] == "true"


# --- rules on hand-made renders --------------------------------------------------------------------------------


def k8s(api: str, kind: str, name: str, namespace: str | None = None, **fields: Any) -> dict[str, Any]:
    meta = {"name": name, **({"namespace": namespace} if namespace else {})}
    group, _, version = api.rpartition("/")
    token = f"kubernetes:{group or 'core'}/{version}:{kind}"
    return {"type": token, "name": f"r-{kind}-{name}".lower(), "parent": None, "dependsOn": [],
            "inputs": {"apiVersion": api, "kind": kind, "metadata": meta, **fields},
            "protect": False, "retainOnDelete": False}  # fmt: skip


def rendered(*resources: dict[str, Any], secret_mutable: bool = True) -> plan_diff.Render:
    provider = {"type": diff_rules.PROVIDER, "name": "kubernetes", "parent": None, "dependsOn": [],
                "inputs": {"enableSecretMutable": str(secret_mutable).lower()}}  # fmt: skip
    return plan_diff.Render({"stack": "dev", "resources": [provider, *resources]}, {})


CLAIM = k8s("v1", "PersistentVolumeClaim", "data", "team-a",
            spec={"storageClassName": "warm", "resources": {"requests": {"storage": "10Gi"}}})  # fmt: skip
COLD = k8s("storage.k8s.io/v1", "StorageClass", "cold", provisioner="csi.juicefs.com", reclaimPolicy="Retain",
           parameters={"pathPattern": "x"}, mountOptions=["cache-size=100"])  # fmt: skip


def changed(resource: dict[str, Any], *path_value: tuple[tuple[str, ...], Any]) -> dict[str, Any]:
    new = copy.deepcopy(resource)
    for path, value in path_value:
        target = new["inputs"]
        for key in path[:-1]:
            target = target.setdefault(key, {})
        target[path[-1]] = value
    return new


def one(old: dict[str, Any] | None, new: dict[str, Any] | None, acks: list[str] | None = None) -> plan_diff.Change:
    diff = plan_diff.diff_stack("dev", rendered(*[old] if old else []), rendered(*[new] if new else []), acks or [])
    (change,) = diff.changes
    return change


def test_storage_class_replaces_on_parameters_and_the_api_server_refuses_a_reclaim_policy_change():
    params = one(COLD, changed(COLD, (("parameters", "pathPattern"), "y")))
    assert params.action == "replace" and params.reasons[0].startswith("`.parameters` changed")
    assert "reaches only volumes provisioned from now on" in params.notes[0]
    policy = one(COLD, changed(COLD, (("reclaimPolicy",), "Delete")))
    assert policy.action == "rejected" and "the API server refuses" in policy.reasons[0]
    binding = one(COLD, changed(COLD, (("volumeBindingMode",), "Immediate")))
    assert binding.action == "rejected"
    options = one(COLD, changed(COLD, (("mountOptions",), ["cache-size=200"])))
    assert options.action == "update" and "reaches only volumes provisioned" in options.notes[0]


def test_a_vended_volumes_mount_options_change_in_place_and_need_node_action():
    """A team's cache share or bandwidth limit (``team_io``) changes its static PersistentVolume's mountOptions: the
    API server lets them change (they are not the immutable volume source), and the diff says a node takes them
    only when it mounts the volume again."""
    pv = k8s("v1", "PersistentVolume", "team.speech.space", spec={
        "csi": {"driver": "csi.juicefs.com", "volumeHandle": "team.speech.space"},
        "mountOptions": ["cache-size=10240", "subdir=/teams/speech"]})  # fmt: skip
    limited = changed(pv, (("spec", "mountOptions"), ["cache-size=1024", "subdir=/teams/speech"]))
    update = one(pv, limited)
    assert update.action == "update" and not update.blocking
    (note,) = [n for n in update.notes if "needs node action" in n]
    assert '`.spec.mountOptions[0]` "cache-size=10240" -> "cache-size=1024"' in note
    assert "pods running now keep the old options" in note
    source = one(pv, changed(pv, (("spec", "csi", "volumeHandle"), "other")))
    assert not any("needs node action" in n for n in source.notes)  # not a mount option


def test_a_claim_replaced_is_blocking_until_acknowledged():
    new = changed(CLAIM, (("spec", "storageClassName"), "cold"))
    blocked = one(CLAIM, new)
    assert blocked.action == "replace" and blocked.holds_data and blocked.blocking
    assert "binds a new, empty volume" in blocked.notes[0]
    assert not one(CLAIM, new, ["PersistentVolumeClaim/team-a/data"]).blocking


def test_a_claim_may_grow_but_never_shrink():
    grow = one(CLAIM, changed(CLAIM, (("spec", "resources", "requests", "storage"), "20Gi")))
    assert grow.action == "update" and not grow.blocking
    shrink = one(CLAIM, changed(CLAIM, (("spec", "resources", "requests", "storage"), "5Gi")))
    assert shrink.action == "rejected"


def test_statefulset_replaces_on_claim_templates_but_updates_replicas_and_template():
    sts = k8s("apps/v1", "StatefulSet", "redis", "meta", spec={
        "replicas": 1, "serviceName": "redis", "template": {"spec": {"containers": [{"image": "redis:8"}]}},
        "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"]}}],
    })  # fmt: skip
    update = one(sts, changed(sts, (("spec", "replicas"), 3), (("spec", "template", "spec", "containers"), [])))
    assert update.action == "update"
    template = changed(sts, (("spec", "volumeClaimTemplates"), []))
    replace = one(sts, template)
    assert replace.action == "replace" and replace.blocking and "keeps its claims" in replace.notes[0]


def test_protected_or_data_holding_deletes_block():
    protected = changed(k8s("v1", "ConfigMap", "settings", "meta"))
    protected["protect"] = True
    assert one(protected, None).blocking
    namespace = k8s("v1", "Namespace", "team-a")
    diff = plan_diff.diff_stack("dev", rendered(namespace, CLAIM), rendered(), [])
    assert {c.id for c in diff.blocking} == {"Namespace/team-a", "PersistentVolumeClaim/team-a/data"}
    assert not one(k8s("v1", "Namespace", "empty"), None).blocking


def test_a_protected_resource_updated_in_place_is_named_but_does_not_block():
    protected = changed(CLAIM)
    protected["protect"] = True
    grown = one(protected, changed(protected, (("spec", "resources", "requests", "storage"), "20Gi")))
    assert grown.action == "update" and grown.protected and not grown.blocking
    assert grown.notes == ["protected: `protect` stops replaces and deletes only; this changes it in place"]


def test_an_immutable_secret_replaces_even_when_secrets_are_mutable():
    secret = k8s("v1", "Secret", "keys", "meta", immutable=True, stringData={"a": "[secret]"})
    assert one(secret, changed(secret, (("stringData", "b"), "[secret]"))).action == "replace"


def test_rename_is_a_replace_and_random_inputs_force_a_new_value():
    assert one(COLD, changed(COLD, (("metadata", "name"), "cold-2"))).action == "replace"
    password = {"type": "random:index/randomPassword:RandomPassword", "name": "pw", "parent": None,
                "dependsOn": [], "inputs": {"length": 32}}  # fmt: skip
    assert one(password, changed(password, (("length",), 40))).action == "replace"


def test_chart_bump_links_its_upgrade_notes():
    chart = {"chart": "fluid", "version": "1.0.7", "name": "fluid", "namespace": "fluid-system"}
    release = {"type": diff_rules.RELEASE, "name": "fluid", "parent": None, "dependsOn": [], "inputs": chart}
    diff = plan_diff.diff_stack("dev", rendered(release), rendered(changed(release, (("version",), "1.0.8"))), [])
    assert diff.changes[0].action == "update"
    (note,) = diff.notes
    assert note.startswith("chart fluid 1.0.7 -> 1.0.8") and data_notes.CHART_NOTES["fluid"] in note
    assert data_notes.RUNBOOK_CHART in note


def release(chart: str, version: str) -> dict[str, Any]:
    inputs = {"chart": chart, "version": version, "name": chart, "namespace": "rook-ceph"}
    return {
        "type": diff_rules.RELEASE,
        "name": f"ai-storage-{chart}",
        "parent": None,
        "dependsOn": [],
        "inputs": inputs,
    }


def ceph_cluster(image: str) -> dict[str, Any]:
    return k8s("ceph.rook.io/v1", "CephCluster", "rook-ceph", "rook-ceph", spec={"cephVersion": {"image": image}})


def test_the_rook_operator_bumped_without_its_csi_drivers_blocks_as_the_runbook_says():
    before = [release("rook-ceph", "v1.20.6"), release("ceph-csi-drivers", "1.0.4")]
    alone = plan_diff.diff_stack("dev", rendered(*before), rendered(release("rook-ceph", "v1.21.0"), before[1]), [])
    (blocked,) = alone.blocking
    assert blocked.id == f"{diff_rules.RELEASE}/ai-storage-rook-ceph"
    assert "rook-ceph, ceph-csi-drivers move together" in blocked.notes[-1] and "#upgrade-a-chart" in blocked.notes[-1]
    together = rendered(release("rook-ceph", "v1.21.0"), release("ceph-csi-drivers", "1.1.0"))
    assert plan_diff.diff_stack("dev", rendered(*before), together, []).blocking == []
    assert versions.UPGRADE_TOGETHER == (("rook-ceph", "ceph-csi-drivers"),)
    assert "upgrade the `rook-ceph` operator and the `ceph-csi-drivers` release together" in RUNBOOK


def test_the_ceph_image_moves_one_major_at_a_time_and_never_with_the_operator():
    old = ceph_cluster("quay.io/ceph/ceph:v19.2.3")
    skip = one(old, changed(old, (("spec", "cephVersion", "image"), "quay.io/ceph/ceph:v21.2.0")))
    assert skip.blocking and "skips a major; one at a time" in skip.notes[-1]
    step = one(old, changed(old, (("spec", "cephVersion", "image"), "quay.io/ceph/ceph:v20.2.4")))
    assert not step.blocking
    new = changed(old, (("spec", "cephVersion", "image"), "quay.io/ceph/ceph:v20.2.4"))
    operators = [release("rook-ceph", "v1.20.6"), release("ceph-csi-drivers", "1.0.4")]
    bumped = [release("rook-ceph", "v1.21.0"), release("ceph-csi-drivers", "1.1.0")]
    both = plan_diff.diff_stack("dev", rendered(old, *operators), rendered(new, *bumped), [])
    assert [c.id for c in both.blocking] == ["CephCluster/rook-ceph/rook-ceph"]
    assert "an update of its own, after the rook-ceph operator's" in both.blocking[0].notes[-1]
    assert "one Ceph release at a time" in RUNBOOK and versions.CEPH_MAJORS_PER_UPDATE == 1


def test_an_acknowledgement_of_nothing_blocking_is_refused_naming_it():
    """Left in place, an old acknowledgement would pass a later replace of the same resource unseen."""
    diff = plan_diff.diff_stack("dev", rendered(COLD), rendered(COLD), ["StatefulSet/meta/redis"])
    assert diff.stale == ["StatefulSet/meta/redis"] and not diff.blocking
    assert plan_diff.exit_code([diff]) == 1
    text = plan_diff.markdown([diff], "main", "HEAD")
    assert "**Refused** (exit 1)" in text and "- `StatefulSet/meta/redis`" in text
    assert json.loads(plan_diff.as_json([diff]))["stacks"][0]["staleAcknowledgements"] == ["StatefulSet/meta/redis"]
    claim_gone = plan_diff.diff_stack("dev", rendered(CLAIM), rendered(), ["PersistentVolumeClaim/team-a/data"])
    assert claim_gone.stale == [] and plan_diff.exit_code([claim_gone]) == 0


# --- the command: formats, and the exit rule both ways -----------------------------------------------------


def write(folder: Path, r: plan_diff.Render) -> Path:
    folder.mkdir(parents=True)
    (folder / "plan.json").write_text(json.dumps(r.plan))
    return folder


def claim_replaced(tmp_path: Path) -> tuple[str, str]:
    base = write(tmp_path / "base" / "dev", rendered(CLAIM))
    head = write(tmp_path / "head" / "dev", rendered(changed(CLAIM, (("spec", "storageClassName"), "cold"))))
    return str(base.parent), str(head.parent)


def project_with(tmp_path: Path, acks: list[str]) -> str:
    stack_file(tmp_path, "dev", {"cluster": {"acknowledgeReplacements": acks}})
    return str(tmp_path)


def test_cli_exits_1_on_an_unacknowledged_data_replace_and_0_once_acknowledged(tmp_path, capsys):
    base, head = claim_replaced(tmp_path)
    assert main(["diff", base, head, "--project-dir", project_with(tmp_path, [])]) == 1
    out = capsys.readouterr().out
    assert "**Blocking** (exit 1)" in out and "- `PersistentVolumeClaim/team-a/data`" in out
    acked = project_with(tmp_path, ["PersistentVolumeClaim/team-a/data"])
    assert main(["diff", base, head, "--project-dir", acked, "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    (change,) = data["stacks"][0]["changes"]
    assert (change["action"], change["acknowledged"], change["blocking"], data["exitCode"]) == (
        "replace",
        True,
        False,
        0,
    )


def test_cli_rejects_a_bad_acknowledgement_with_the_key_and_exit_2(tmp_path, capsys):
    base, head = claim_replaced(tmp_path)
    assert main(["diff", base, head, "--project-dir", project_with(tmp_path, ["redis"])]) == 2
    err = capsys.readouterr().err
    assert "cluster.acknowledgeReplacements[0]: expected a resource as the diff names it" in err
    assert "Traceback" not in err


def test_acknowledgement_setting_rejects_a_bad_value():
    with pytest.raises(SettingsError, match=r"cluster\.acknowledgeReplacements\[0\]: expected a resource"):
        load_settings("dev", {"cluster": {"acknowledgeReplacements": ["StatefulSet juicefs-meta redis"]}})
    ok = ["StatefulSet/juicefs-meta/redis", "StorageClass/cold", "aws:s3/bucket:Bucket/ai-storage-object-store-bucket"]
    assert load_settings("dev", {"cluster": {"acknowledgeReplacements": ok}}).cluster.acknowledge_replacements == ok


def test_a_git_ref_of_this_program_renders_into_a_folder_that_does_not_exist_yet(tmp_path):
    # render --out refuses a folder whose parent is missing: the diff makes the side's folder first.
    rendered = diff_sources.render_ref(ROOT, "HEAD", tmp_path / "base", ["dev"])
    assert (rendered["dev"] / "plan.json").is_file()


def test_cli_renders_a_git_ref_and_reports_a_ref_that_does_not_exist(tmp_path, capsys):
    with pytest.raises(SystemExit) as exited:
        main(["diff", "no-such-ref", str(tmp_path)])
    assert exited.value.code == 2 and "argument base:" in capsys.readouterr().err


def test_a_stack_neither_side_has_is_named_with_where_the_diff_looked(tmp_path, capsys):
    (tmp_path / "side" / "dev").mkdir(parents=True)
    (tmp_path / "side" / "dev" / "plan.json").write_text('{"stack": "dev", "resources": []}')
    side = str(tmp_path / "side")
    assert main(["diff", side, side, "--stack", "nosuchstack"]) == 2
    err = capsys.readouterr().err
    assert f"no stack nosuchstack in render folder {side}; stacks there: dev" in err
    assert "rendered on both sides" not in err
    there = f"no stack nosuchstack in git ref HEAD; stacks there: {', '.join(EVERY_STACK)}"
    with pytest.raises(diff_sources.RenderError, match=re.escape(there)):
        diff_sources.render_ref(ROOT, "HEAD", tmp_path / "base", ["nosuchstack"])


def test_review_doc_lists_every_replace_rule_the_diff_applies():
    review = (ROOT / "docs" / "review.md").read_text()
    assert diff_rules.FORCE_NEW_SOURCE in review and diff_rules.STORAGE_VALIDATION in review
    for kind, fields in [("StorageClass", (".parameters", ".provisioner")), ("Service", (".spec.clusterIP",))]:
        assert all(f"`{f}`" in review for f in fields), kind
    assert "`reclaimPolicy`" in review and "refuses" in review


def test_release_version_matches_the_changelog_and_its_upgrade_notes_name_each_change():
    import tomllib

    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    changelog = (ROOT / "CHANGELOG.md").read_text()
    releases = [
        line.split()[1] for line in changelog.splitlines() if line.startswith("## [") and "Unreleased" not in line
    ]
    assert releases[:2] == [f"[{version}]", "[0.1.0]"] and version == "0.2.0"
    library = tomllib.loads((ROOT / "ai_storage_training" / "pyproject.toml").read_text())["project"]["version"]
    assert library == version, "the training library is released with the platform: one version"
    start = changelog.index("### Upgrading from 0.1.0")
    upgrade = changelog[start : changelog.index("### Added", start)]
    for named in (
        "metadata.migratedFrom: standalone",
        "metadata.engine: standalone",
        "docs/runbook.md#move-the-metadata-to-another-engine",
        "Service juicefs-meta/redis",
        "Job object-store/minio-bucket-ai-datasets-dev",
        "juicefs-csi/juicefs-volume",
        "enableSecretMutable",
        "StorageClass cold",
    ):
        assert named in upgrade, named


POOL = k8s(
    "ceph.rook.io/v1",
    "CephBlockPool",
    "replicapool",
    "rook-ceph",
    spec={"deviceClass": "ssd", "replicated": {"size": 3}},
)
FS = k8s(
    "ceph.rook.io/v1",
    "CephFilesystem",
    "ai-warm",
    "rook-ceph",
    spec={"metadataPool": {"deviceClass": "ssd"}, "dataPools": [{"name": "data", "deviceClass": "ssd"}]},
)


def aws(typ: str, name: str, **inputs: Any) -> dict[str, Any]:
    return {"type": typ, "name": name, "parent": None, "dependsOn": [], "inputs": inputs}


def test_a_ceph_pool_moved_to_another_device_class_blocks_until_acknowledged():
    moved = one(POOL, changed(POOL, (("spec", "deviceClass"), "nvme")))
    assert moved.action == "update" and moved.moves_data and moved.blocking
    assert '`.spec.deviceClass` "ssd" -> "nvme": the pool\'s CRUSH rule changes and Ceph moves' in moved.notes[-1]
    assert "placement groups stay inactive" in moved.notes[-1]
    assert not one(
        POOL, changed(POOL, (("spec", "deviceClass"), "nvme")), ["CephBlockPool/rook-ceph/replicapool"]
    ).blocking
    data = one(FS, changed(FS, (("spec", "dataPools"), [{"name": "data", "deviceClass": "nvme"}])))
    assert data.moves_data and data.blocking
    replicas = one(POOL, changed(POOL, (("spec", "replicated"), {"size": 2})))
    assert not replicas.moves_data


def test_a_ceph_pool_spread_over_another_failure_domain_blocks_like_a_device_class_change():
    pool = changed(POOL, (("spec", "failureDomain"), "zone"))
    moved = one(pool, changed(pool, (("spec", "failureDomain"), "host")))
    assert moved.moves_data and moved.blocking
    assert '`.spec.failureDomain` "zone" -> "host"' in moved.notes[-1] and "fewer failure domains" in moved.notes[-1]
    fs = changed(FS, (("spec", "dataPools"), [{"name": "data", "deviceClass": "ssd", "failureDomain": "host"}]))
    spread = [{"name": "data", "deviceClass": "ssd", "failureDomain": "zone"}]
    assert one(fs, changed(fs, (("spec", "dataPools"), spread))).blocking
    acknowledged = ["CephBlockPool/rook-ceph/replicapool"]
    assert not one(pool, changed(pool, (("spec", "failureDomain"), "host")), acknowledged).blocking


def test_turning_on_writeback_blocks_it_can_lose_acknowledged_writes():
    on = one(COLD, changed(COLD, (("mountOptions",), [*COLD["inputs"].get("mountOptions", []), "writeback"])))
    assert on.moves_data and on.blocking and "loses writes the job was told were done" in on.notes[-1]
    off = changed(COLD, (("mountOptions",), [*COLD["inputs"].get("mountOptions", []), "writeback"]))
    assert not one(off, COLD).blocking  # turning it off is safe


def test_renaming_the_juicefs_volume_blocks_every_read_would_stop(render_stack, tmp_path):
    from components.toolchain import render as render_module

    before, _ = render_stack("eks-gpu-prod")
    after, _ = render_stack("eks-gpu-prod", juicefs={"volumeName": "ai-datasets-v2"})
    old, new = tmp_path / "old", tmp_path / "new"
    render_module.write(before, old)
    render_module.write(after, new)
    diff = plan_diff.diff_stack("eks-gpu-prod", plan_diff.load_render(old), plan_diff.load_render(new), [])
    (renamed,) = [c for c in diff.blocking if c.id == "JuiceFSVolume/ai-datasets-v2"]
    assert (
        "every cold-tier read and write stops" in renamed.notes[0]
        and "Keep `volumeName: ai-datasets`" in renamed.notes[0]
    )
    acknowledged = plan_diff.diff_stack(
        "eks-gpu-prod", plan_diff.load_render(old), plan_diff.load_render(new), ["JuiceFSVolume/ai-datasets-v2"]
    )
    assert [c.id for c in acknowledged.blocking if c.id.startswith("JuiceFSVolume/")] == []


def test_lifting_protection_blocks_and_the_note_says_it_is_no_longer_protected():
    kept = changed(CLAIM)
    kept["protect"] = kept["retainOnDelete"] = True
    lifted = copy.deepcopy(kept)
    lifted["protect"] = lifted["retainOnDelete"] = False
    change = one(kept, lifted)
    assert change.action == "update" and change.blocking and change.fields == ["(protect)", "(retainOnDelete)"]
    assert change.notes[0].startswith("`protect` and `retainOnDelete` lifted: no longer protected")
    assert not any(n.startswith("protected:") for n in change.notes)
    assert not one(kept, lifted, [change.id]).blocking
    assert not one(lifted, kept).blocking  # protecting is safe


def test_an_elasticache_engine_change_is_a_replace_except_redis_to_valkey():
    group = aws("aws:elasticache/replicationGroup:ReplicationGroup", "meta", engine="valkey", engineVersion="8.1")
    back = one(group, changed(group, (("engine",), "redis"), (("engineVersion",), "7.1")))
    assert back.action == "replace" and back.holds_data and back.blocking
    assert any(r.startswith("`.engine` valkey -> redis: only redis -> valkey changes in place") for r in back.reasons)
    assert any(r.startswith("`.engineVersion` 8.1 -> 7.1: a downgrade") for r in back.reasons)
    forward = dict(group, inputs={"engine": "redis", "engineVersion": "7.1"})
    upgrade = one(forward, changed(forward, (("engine",), "valkey"), (("engineVersion",), "8.1")))
    assert upgrade.action == "update"
    assert any(
        n.startswith("ElastiCache applies this in the replication group's next maintenance window")
        for n in upgrade.notes
    )
    now = dict(forward, inputs={**forward["inputs"], "applyImmediately": True})
    at_once = one(now, changed(now, (("nodeType",), "cache.r7g.xlarge")))
    assert not any("maintenance window" in n for n in at_once.notes)
    params = aws("aws:elasticache/parameterGroup:ParameterGroup", "params", family="valkey8")
    assert one(params, changed(params, (("family",), "redis7"))).action == "replace"


def test_retiring_a_team_of_a_protected_stack_blocks_and_the_notes_say_what_goes(render_stack, tmp_path):
    """A protected stack protects a team's vended Namespace too: removing the team blocks (deleting a Namespace
    deletes every claim in it), and the notes tell what goes with the Namespace and what stays on the backend."""
    from components.toolchain import render as render_module

    teams = {"workspaces": [{"name": "vision", "space": "100Gi"}]}
    before, _ = render_stack("prod", teams=teams)
    after, _ = render_stack("prod", teams={"workspaces": []})
    old, new = tmp_path / "old", tmp_path / "new"
    render_module.write(before, old)
    render_module.write(after, new)
    diff = plan_diff.diff_stack("prod", plan_diff.load_render(old), plan_diff.load_render(new), [])
    changes = {c.id: c for c in diff.changes}
    namespace = changes["Namespace/vision"]
    assert namespace.action == "delete" and namespace.protected and namespace.blocking
    assert "deleting a Namespace deletes every object in it, claims included" in namespace.notes
    volume = changes["PersistentVolume/team.vision.space"]
    assert any("reclaimPolicy Retain the data it names (a JuiceFS directory" in n for n in volume.notes)
    assert not any("deletes the data" in n for n in volume.notes)


def test_an_object_deleted_with_its_namespace_goes_with_it_whatever_retain_on_delete_says():
    namespace = k8s("v1", "Namespace", "team-a")
    claim = changed(CLAIM)
    claim["protect"] = claim["retainOnDelete"] = True
    diff = plan_diff.diff_stack("dev", rendered(namespace, claim), rendered(), [])
    (gone,) = [c for c in diff.changes if c.id == "PersistentVolumeClaim/team-a/data"]
    assert not any("stays in the cluster, unmanaged" in n for n in gone.notes)
    assert "its Namespace team-a is deleted in the same update: Kubernetes deletes it" in gone.notes[-1]
    kept = changed(namespace)
    kept["protect"] = kept["retainOnDelete"] = True
    diff = plan_diff.diff_stack("dev", rendered(kept, claim), rendered(), [])
    (stays,) = [c for c in diff.changes if c.id == "PersistentVolumeClaim/team-a/data"]
    assert any("stays in the cluster, unmanaged" in n for n in stays.notes)


def test_the_comment_shows_each_changed_value_old_and_new():
    quota = k8s(
        "v1",
        "ResourceQuota",
        "storage",
        "team-a",
        spec={"hard": {"ai-warm.storageclass.storage.k8s.io/requests.storage": "2Ti"}},
    )
    shrunk = changed(quota, (("spec", "hard", "ai-warm.storageclass.storage.k8s.io/requests.storage"), "1Ti"))
    diff = plan_diff.diff_stack("dev", rendered(quota), rendered(shrunk), [])
    comment = plan_diff.markdown([diff], "main", "HEAD")
    assert '`.spec.hard.ai-warm.storageclass.storage.k8s.io/requests.storage` "2Ti" -> "1Ti"' in comment
