"""The package's own exports: ``from ai_storage_platform import Platform, TeamWorkspace, load_settings, ...``
works for every name it lists, the list type checkers see is the same one, and importing the package alone
loads none of the components."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import components

INIT = Path(components.__file__)


def checked_names() -> dict[str, set[str]]:
    """The names the ``if TYPE_CHECKING:`` block of components/__init__.py imports, per module."""
    tree = ast.parse(INIT.read_text())
    (block,) = [n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING"]
    found: dict[str, set[str]] = {}
    for node in block.body:
        assert isinstance(node, ast.ImportFrom) and node.level == 1 and node.module
        found.setdefault(node.module, set()).update(a.name for a in node.names)
    return found


def test_type_checkers_see_the_same_exports_as_the_package_serves():
    served = {module: set(names) for module, names in components._EXPORTS.items()}
    assert checked_names() == served


@pytest.mark.parametrize("name", components.__all__)
def test_every_export_is_the_object_its_module_defines(name):
    module = __import__(f"components.{components._MODULE_OF[name]}", fromlist=[name])
    assert getattr(components, name) is getattr(module, name)


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
    assert out.stdout.strip() == "[]"


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
    assert "moved to ai_storage_platform.backends.metadata_engines.redis_sentinel" in out.stdout


def test_the_release_the_docs_links_name_is_the_packages():
    import re

    from components.common import versions
    from components.toolchain.render import ROOT

    (version,) = re.findall(r'^version = "([^"]+)"$', (ROOT / "pyproject.toml").read_text(), re.M)
    assert version == versions.PLATFORM_VERSION
    assert versions.DOCS_URL.endswith(f"/blob/v{version}/docs")
