"""The package's own exports: ``from ai_storage_platform import Platform, TeamWorkspace, load_settings, ...``
works for every name its one list (the ``TYPE_CHECKING`` block type checkers read) names, importing the package
alone loads none of the components, and 0.2.0's module paths still import until 0.4.0."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import components

INIT = Path(components.__file__)


def checked_names() -> dict[str, str]:
    """The names the ``if TYPE_CHECKING:`` block of components/__init__.py imports -> their module."""
    tree = ast.parse(INIT.read_text())
    (block,) = [n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING"]
    found: dict[str, str] = {}
    for node in block.body:
        assert isinstance(node, ast.ImportFrom) and node.level == 1 and node.module
        found.update((a.name, node.module) for a in node.names)
    return found


def test_the_package_serves_exactly_the_names_type_checkers_see():
    assert set(components.__all__) == set(checked_names())
    assert "Platform" in components.__all__ and "TeamWorkspace" in components.__all__


@pytest.mark.parametrize("name", sorted(checked_names()))
def test_every_export_is_the_object_its_module_defines(name):
    module = importlib.import_module(f"components.{checked_names()[name]}")
    assert getattr(components, name) is getattr(module, name)


def test_star_import_gives_every_export():
    namespace: dict[str, object] = {}
    exec("from components import *", namespace)
    assert set(checked_names()) <= set(namespace)


def test_the_names_users_write_are_exported():
    from components import (  # noqa: F401 (the import is the test)
        Platform,
        PlatformArgs,
        TeamWorkspace,
        TeamWorkspaceArgs,
        load_settings,
        load_team_settings,
        stack_config,
    )


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="has no attribute 'Plattform'"):
        _ = components.Plattform  # type: ignore[attr-defined]


def test_importing_the_package_loads_no_component():
    code = "import sys, components; print(sorted(m for m in sys.modules if m.startswith(('components.', 'pulumi'))))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=INIT.parents[1])
    assert out.stdout.strip() == "['components.common', 'components.common.moved']"  # the old paths' finder


def test_the_sentinel_settings_import_of_the_0_2_0_docs_still_works_and_says_where_it_moved():
    code = (
        "import warnings; warnings.simplefilter('error')\n"
        "try:\n    from components.redis_sentinel import SentinelSettings\n"
        "except DeprecationWarning as w:\n    print(w)\n"
        "warnings.simplefilter('ignore')\n"
        "from components.redis_sentinel import SentinelSettings\n"
        "from components import SentinelSettings as exported\n"
        "assert SentinelSettings is exported\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=INIT.parents[1])
    assert "moved to components.backends.metadata_engines.redis_sentinel; the old path goes in 0.4.0" in out.stdout


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("juicefs", "tiers.juicefs"),
        ("checkpoint_offsite", "protection.checkpoint_offsite"),
        ("jobs", "training.jobs"),
        ("alert_settings", "observability.alert_settings"),
        ("tenants", "teams.tenants"),
        ("profiles", "settings.profiles"),
        ("sections", "common.sections"),
        ("sections.fields", "common.sections.fields"),
    ],
)
def test_a_0_2_0_module_path_is_the_same_module_as_its_new_path(old, new):
    with pytest.warns(DeprecationWarning, match=f"components.{old} moved to components.{new}"):
        module = importlib.import_module(f"components.{old}")
    assert module is importlib.import_module(f"components.{new}")


def test_every_moved_path_leads_to_a_module():
    from components.common.moved import MOVED

    for new in MOVED.values():
        importlib.import_module(f"components.{new}")


def test_the_0_2_0_training_module_names_load_from_the_package_with_a_warning():
    from components.training import trainer

    with pytest.warns(DeprecationWarning, match="components.training.Training moved to components.training.trainer"):
        from components.training import Training
    assert Training is trainer.Training
    with pytest.raises(AttributeError, match="has no attribute 'Trainingg'"):
        _ = components.training.Trainingg  # type: ignore[attr-defined]


def test_the_release_the_docs_links_name_is_the_packages():
    import re

    from components.common import versions
    from components.toolchain.render import ROOT

    (version,) = re.findall(r'^version = "([^"]+)"$', (ROOT / "pyproject.toml").read_text(), re.M)
    assert version == versions.PLATFORM_VERSION
    assert versions.DOCS_URL.endswith(f"/blob/v{version}/docs")
