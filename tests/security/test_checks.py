"""Each security check, fed a deliberately broken input, reports it (and passes the fixed input)."""

from __future__ import annotations

import types

import yaml

from components.common import kube, versions
from components.common.sections import Resources
from components.toolchain import render
from tests.security import checks
from tests.security.test_gate import PRIVILEGED_NAMESPACES


def pod(image: str, **container) -> dict:
    """A Deployment running one container."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "bad", "namespace": "default"},
        "spec": {
            "selector": {"matchLabels": {"app": "bad"}},
            "template": {
                "metadata": {"labels": {"app": "bad"}},
                "spec": {"containers": [{"name": "c", "image": image, **container}]},
            },
        },
    }


def namespace(name: str, level: str | None) -> dict:
    labels = {checks.ENFORCE: level} if level else {}
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def registration(type_: str, protect: bool, inputs: dict | None = None) -> render.Registration:
    return render.Registration(type_, "x", "urn:x", "", [], inputs or {}, True, protect, protect)


def test_checkov_reports_a_privileged_container(tmp_path, checkov):
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(pod("nginx", securityContext={"privileged": True})))
    failures = checks.checkov_failures(checks.run_checkov(checkov, tmp_path))
    assert any(f.startswith("CKV_K8S_16 Deployment.default.bad (bad.yaml)") for f in failures), failures


def test_a_checkov_skip_without_a_reason_is_reported():
    bad = pod("nginx:1.27")
    bad["metadata"]["annotations"] = {"checkov.io/skip1": "CKV_K8S_43", "checkov.io/skip2": "CKV_K8S_11=no"}
    assert len(checks.skip_annotation_problems([bad])) == 2
    bad["metadata"]["annotations"] = kube.checkov_skips(Resources())
    assert checks.skip_annotation_problems([bad]) == []


def test_pod_security_reports_missing_labels_and_unlisted_privileged_namespaces():
    objects = [namespace("no-label", None), namespace("rogue", "privileged"), namespace("juicefs-csi", "privileged")]
    problems = checks.pod_security_problems(objects, [], PRIVILEGED_NAMESPACES)
    assert [p.split(":")[0] for p in problems] == ["Namespace/no-label", "Namespace/rogue"]
    assert checks.pod_security_problems([namespace("rogue", "privileged")], [], {"rogue": " "})
    assert checks.pod_security_problems([], [{"name": "r", "namespace": "n", "createNamespace": True}], {})


def test_a_generated_secret_in_any_output_is_reported():
    values = checks.mock_secret_values([registration("random:index/randomPassword:RandomPassword", False)])
    assert values == {"mock-x"}
    problems = checks.plaintext_problems({"plan.json": '{"password": "mock-x"}', "stdout": "ok"}, values)
    assert problems == ["plan.json: contains the secret value 'mock-x'"]


def test_a_plain_text_secret_value_is_reported():
    secret = {"kind": "Secret", "metadata": {"name": "s"}, "stringData": {"a": "[secret]", "b": "hunter2"}}
    assert checks.secret_object_problems([secret]) == ["Secret/s: stringData.b is in plain text"]


def test_a_password_in_a_stack_file_is_reported_unless_secure():
    data = {"config": {"ai-storage-platform:metadata": {"password": "hunter2", "passwordSecretName": "redis"}}}
    assert len(checks.stack_file_problems("Pulumi.bad.yaml", data)) == 1
    data["config"]["ai-storage-platform:metadata"]["password"] = {"secure": "v1:abc"}
    assert checks.stack_file_problems("Pulumi.bad.yaml", data) == []


def test_unpinned_images_tags_and_charts_are_reported():
    for bad in ("nginx", "nginx:latest", "registry:5000/team/app", "quay.io/x/y:stable"):
        assert checks.image_problems("d", pod(bad)), bad
    for good in ("nginx:1.27.1", "registry:5000/app:v2", "nginx@sha256:" + "a" * 64):
        assert checks.image_problems("d", pod(good)) == [], good
    assert checks.image_problems("values", {"csi": {"image": {"repository": "x", "tag": "latest"}}})
    charts = [{"name": "a", "chart": "a", "version": None}, {"name": "b", "chart": "b", "version": "^1.2"}]
    assert len(checks.chart_problems(charts)) == 2


def test_a_floating_pin_in_the_versions_module_is_reported():
    bad = types.ModuleType("bad_versions")
    bad.REDIS_IMAGE = "redis:latest"
    bad.VOLCANO = versions.ChartPin("volcano", "", "https://example", "volcano")
    assert len(checks.versions_problems(bad)) == 2


def test_an_unprotected_stateful_resource_is_reported():
    bucket = registration("aws:s3/bucket:Bucket", protect=False)
    pvc_templates = {"spec": {"volumeClaimTemplates": [{"metadata": {"name": "data"}}]}}
    statefulset = registration("kubernetes:apps/v1:StatefulSet", protect=False, inputs=pvc_templates)
    stateless = registration("kubernetes:apps/v1:Deployment", protect=False)
    assert len(checks.protection_problems([bucket, statefulset, stateless], protect=True)) == 2
    assert len(checks.protection_problems([registration("aws:s3/bucket:Bucket", True)], protect=False)) == 1


def test_a_differing_or_missing_render_file_is_reported(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for folder, text in ((a, "1"), (b, "2")):
        (folder / "manifests").mkdir(parents=True)
        (folder / "plan.json").write_text(text)
    (a / "manifests" / "x.yaml").write_text("x")
    assert checks.difference_problems(a, b) == [f"manifests/x.yaml: only in {a}", "plan.json: differs"]
