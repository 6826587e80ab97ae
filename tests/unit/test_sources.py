"""Mirrors of every upstream source (air-gapped clusters): chart repositories and the kustomize directories of
what upstream publishes only as a git tree, each pinned as upstream's, each refused when it could move."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from components.common import versions
from components.settings import SettingsError, load_settings
from components.toolchain.render import ROOT

MIRROR = "https://charts.mirror.example/ai-storage"
OCI_MIRROR = "oci://registry.mirror.example/charts"
GIT_MIRROR = "https://git.mirror.example/kubeflow/trainer//manifests/overlays/standalone?ref=v1.9.4"


def kustomize_inputs(monitor) -> dict[str, str]:
    return {
        r.name: r.inputs["directory"] for r in monitor.registrations if r.type == "kubernetes:kustomize/v2:Directory"
    }


def test_by_default_everything_comes_from_upstream_at_its_pinned_version(render_stack):
    result, monitor = render_stack("prod")
    for chart in result.charts:
        pin = versions.CHARTS[chart["chart"]]
        assert (chart["repo"], chart["version"]) == (pin.repo, pin.version)
    assert set(kustomize_inputs(monitor).values()) == set(versions.KUSTOMIZE.values())


def test_a_stack_points_charts_and_git_trees_at_its_mirrors_and_keeps_the_pinned_versions(render_stack, tmp_path):
    crds = tmp_path / "external-snapshotter" / "client" / "config" / "crd"
    crds.mkdir(parents=True)
    sources = {
        "charts": {"rook-ceph": MIRROR, "kubeflow-trainer": OCI_MIRROR},
        "kustomize": {"snapshotCrds": str(crds), "trainingOperatorV1": GIT_MIRROR},
    }
    result, monitor = render_stack("prod", sources=sources)
    charts = {c["chart"]: c for c in result.charts}
    assert charts["rook-ceph"]["repo"] == MIRROR and charts["rook-ceph"]["version"] == versions.ROOK_CEPH.version
    assert charts["kubeflow-trainer"]["repo"] == OCI_MIRROR  # an OCI chart: oci://<mirror>/kubeflow-trainer
    assert charts["kubeflow-trainer"]["version"] == versions.KUBEFLOW_TRAINER.version
    assert charts["fluid"]["repo"] == versions.FLUID.repo  # not named: upstream
    directories = set(kustomize_inputs(monitor).values())
    assert directories == {str(crds), GIT_MIRROR, versions.KUSTOMIZE["snapshotController"]}
    result, monitor = render_stack("prod")  # the next stack in the same process starts from upstream again
    assert {c["repo"] for c in result.charts if c["chart"] == "rook-ceph"} == {versions.ROOK_CEPH.repo}
    assert set(kustomize_inputs(monitor).values()) == set(versions.KUSTOMIZE.values())


@pytest.mark.parametrize(
    ("sources", "key", "expected"),
    [
        (
            {
                "kustomize": {
                    "snapshotController": "https://github.com/kubernetes-csi/external-snapshotter/tree/master/x"
                }
            },
            "sources.kustomize.snapshotController",
            "expected a URL at a tag or commit",
        ),
        (
            {"kustomize": {"trainingOperatorV1": "https://git.mirror.example/kubeflow/trainer//manifests"}},
            "sources.kustomize.trainingOperatorV1",
            "expected a URL at a tag or commit",
        ),
        (
            {"kustomize": {"snapshotCrds": "/no/such/mirror/checkout"}},
            "sources.kustomize.snapshotCrds",
            "expected a URL at a tag or commit, or an existing directory",
        ),
        ({"charts": {"rook": MIRROR}}, "sources.charts.rook", "expected one of the pinned charts"),
        ({"charts": {"fluid": "charts.mirror.example"}}, "sources.charts.fluid", "expected a Helm repository"),
    ],
)
def test_a_source_that_could_move_or_does_not_exist_is_refused(sources, key, expected):
    with pytest.raises(SettingsError) as caught:
        load_settings("prod", {"sources": sources})
    assert f"{key}: {expected}" in str(caught.value)


def test_the_air_gapped_page_lists_every_pinned_chart_git_tree_and_image():
    page = (ROOT / "docs" / "air-gapped.md").read_text()
    for pin in versions.CHARTS.values():
        assert f"| `{pin.chart}` | `{pin.version}` | {pin.repo} |" in page, pin.chart
    for key, where in versions.KUSTOMIZE.items():
        assert f"| `sources.kustomize.{key}` | {where} |" in page, key
    images = {value for name, value in vars(versions).items() if name.endswith("_IMAGE")}
    for image in images:
        assert f"`{image}`" in page, image
    tags = re.findall(r"_IMAGE_TAG = \"([^\"]+)\"", Path(versions.__file__).read_text())
    assert all(f"`{tag}`" in page for tag in tags)


@pytest.mark.parametrize(
    ("url", "split"),
    [  # kustomize's documented remote targets (docs: remoteBuild.md, and repospec.go's comments)
        (
            "https://github.com/kubernetes-sigs/kustomize//examples/multibases?ref=v3.3.1",
            ("https://github.com/", "kubernetes-sigs/kustomize", "examples/multibases", "v3.3.1"),
        ),
        (
            "https://github.com/kubernetes-sigs/kustomize/examples/multibases?ref=v3.3.1",
            ("https://github.com/", "kubernetes-sigs/kustomize", "examples/multibases", "v3.3.1"),
        ),
        (
            "git@github.com:someOrg/someRepo.git/somedir?ref=someHash",
            ("git@github.com:", "someOrg/someRepo.git", "somedir", "someHash"),
        ),
        (
            "https://username@dev.azure.com/org/project/_git/repo/path/to/kustomization/root?version=v1",
            ("https://username@dev.azure.com/", "org/project/_git/repo", "path/to/kustomization/root", "v1"),
        ),
        (
            "https://github.com/kubeflow/trainer/tree/v1.9.4/manifests/overlays/standalone",
            ("https://github.com/", "kubeflow/trainer", "tree/v1.9.4/manifests/overlays/standalone", ""),
        ),
    ],
)
def test_remote_kustomize_targets_split_as_kustomize_splits_them(url, split):
    """The last: GitHub's web form is no kustomize form; it would build the directory `tree/v1.9.4/...` of the
    default branch, so it is refused (below)."""
    from components.settings.sources import repo_spec

    assert repo_spec(url) == split


def test_every_default_source_is_kustomizes_form_at_its_pinned_tag():
    from components.settings.sources import KustomizeSources, repo_spec

    assert KustomizeSources().problems() == []
    for url in versions.KUSTOMIZE.values():
        _, _, root, ref = repo_spec(url)
        assert ref.startswith("v") and not root.startswith("tree/") and root


def test_the_web_form_is_refused_naming_the_url_to_write():
    from components.settings.sources import KustomizeSources

    web = "https://github.com/kubeflow/trainer/tree/v1.9.4/manifests/overlays/standalone"
    (problem,) = KustomizeSources.model_validate({"trainingOperatorV1": web}).problems()
    assert problem.key == "trainingOperatorV1" and "kustomize's form" in problem.expected
    assert problem.hint.endswith("write https://github.com/kubeflow/trainer//manifests/overlays/standalone?ref=v1.9.4")
