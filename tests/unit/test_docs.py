"""The docs stay true to the code: a reference page per component naming its args and outputs, with a Python
example that compiles and imports the library by its installed name; every relative link resolves."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import re

import pulumi
import pytest

from components.toolchain.render import ROOT
from tests.conftest import STACKS, stack_settings

DOCS = ROOT / "docs"
PACKAGES = ("", "tiers", "protection", "training", "observability", "teams")
"""Where the components live (the package itself holds ``platform``)."""


def _components() -> dict[str, tuple[str, type]]:
    """Each component's page (the module part of its type token, ``ai-storage:<page>:<class>``) -> its module
    and class."""
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / "components" / package).glob("*.py")):
            module = ".".join(part for part in ("components", package, path.stem) if part)
            if path.stem.startswith("_"):
                continue
            source = path.read_text()
            for _, cls in inspect.getmembers(importlib.import_module(module), inspect.isclass):
                if issubclass(cls, pulumi.ComponentResource) and cls.__module__ == module:
                    (page,) = re.findall(rf'"ai-storage:(\w+):{cls.__name__}"', source)
                    found[page] = (module, cls)
    return found


COMPONENTS = _components()


def test_every_component_module_is_found():
    assert {"platform", "object_store", "team", "volcano", "training"} <= set(COMPONENTS)


@pytest.mark.parametrize("module", sorted(COMPONENTS))
def test_component_page_names_args_outputs_settings_and_has_an_example(module):
    path, cls = COMPONENTS[module]
    page = (DOCS / "components" / f"{module}.md").read_text()
    assert f"ai-storage:{module}:{cls.__name__}" in page
    args = getattr(importlib.import_module(path), f"{cls.__name__}Args")
    for field in dataclasses.fields(args):
        assert f"`{field.name}`" in page, f"{module}.md does not describe {cls.__name__}Args.{field.name}"
    for output in inspect.get_annotations(cls):
        assert f"`{output}`" in page, f"{module}.md does not describe output {output}"
    assert "](../config.md" in page
    examples = re.findall(r"```python\n(.*?)```", page, re.S)
    assert examples, f"{module}.md has no Python example"
    for code in examples:
        tree = ast.parse(code)
        imported = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
        assert not [m for m in imported if m and m.split(".")[0] == "components"], "import ai_storage_platform"


@pytest.mark.parametrize("doc", ["README.md", *(str(p.relative_to(ROOT)) for p in sorted(DOCS.rglob("*.md")))])
def test_relative_links_resolve(doc):
    path = ROOT / doc
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", path.read_text()):
        if "://" not in target:
            assert (path.parent / target).exists(), f"{doc}: broken link {target}"


def test_runbook_and_review_cover_their_topics():
    runbook = (DOCS / "runbook.md").read_text()
    topics = ("versions.py", "crdUpgrade", "ceph-csi-drivers", "meta-backups/", "juicefs load", "juicefs config")
    for topic in (*topics, "juicefs fsck", "keepers", "volcano.queues", "fluid.datasets"):
        assert topic in runbook, topic
    review = (DOCS / "review.md").read_text()
    for topic in ("plan.json", "manifests/", "charts.yaml", "dependsOn"):
        assert topic in review, topic


def test_every_component_page_is_for_a_component_module():
    assert not [p.stem for p in (DOCS / "components").glob("*.md") if p.stem not in COMPONENTS]


def test_readme_links_every_component_page():
    readme = (ROOT / "README.md").read_text()
    for module in COMPONENTS:
        assert f"(docs/components/{module}.md)" in readme, module


@pytest.mark.parametrize("doc", ["README.md", *(str(p.relative_to(ROOT)) for p in sorted(DOCS.rglob("*.md")))])
def test_module_paths_the_docs_name_exist(doc):
    named = re.findall(r"`(components/[\w./-]+?)(?::\w+)?`", (ROOT / doc).read_text())
    assert not [p for p in named if not (ROOT / p).exists()], f"{doc} names paths that moved or never existed"


def everything(result) -> list[dict]:
    return [obj for objs in result.manifests.values() for obj in objs]


EXEC = re.compile(r"kubectl(?: -n ([a-z0-9-]+))? exec(?: -it)? (deploy|deployment|statefulset|daemonset)/([a-z0-9-]+)")
KINDS = {"deploy": "Deployment", "deployment": "Deployment", "statefulset": "StatefulSet", "daemonset": "DaemonSet"}


@pytest.mark.parametrize("stack", STACKS)
def test_every_workload_the_docs_exec_into_is_one_the_stack_renders(stack):
    """A command at 3 am must find what it names: `kubectl -n rook-ceph exec deploy/rook-ceph-tools -- ceph status`
    needs the toolbox Deployment (components/tiers/ceph_toolbox.py) in every stack with Ceph."""
    from components.toolchain import render

    result = render.rendering(stack, render.run(stack))
    rendered = {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) for o in everything(result)}
    named = {
        (KINDS[kind], namespace or "default", name)
        for path in [*(ROOT / "docs").glob("*.md"), ROOT / "README.md"]
        for namespace, kind, name in EXEC.findall(path.read_text())
    }
    assert named
    ceph = stack_settings(stack).rook_ceph.enabled
    for kind, namespace, name in named:
        if namespace == "rook-ceph" and not ceph:
            continue
        assert (kind, namespace, name) in rendered, (kind, namespace, name)


def test_the_toolbox_is_a_setting_and_runs_restricted(render_stack):
    from tests.admission.pod_security import violations

    result, _ = render_stack("staging")
    (tools,) = [o for o in everything(result) if o["metadata"]["name"] == "rook-ceph-tools"]
    spec = tools["spec"]["template"]["spec"]
    assert violations(spec, level="restricted") == []
    assert spec["containers"][0]["image"].startswith("quay.io/ceph/ceph:v")
    result, _ = render_stack("staging", rookCeph={"toolbox": {"enabled": False}})
    assert all(o["metadata"]["name"] != "rook-ceph-tools" for o in everything(result))
