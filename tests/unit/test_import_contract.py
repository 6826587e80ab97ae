"""The import contract in pyproject.toml ([tool.importlinter]), checked with import-linter's ``lint-imports``: no
import circle in components/ or ai_storage_training/, nothing in components/ imports up across its layers
(command line > toolchain > platform > settings > teams > observability > training > tiers > protection > backends >
common), components/ shows its architecture in at most a dozen entries, the two kinds of backend stay apart, and
the training library imports nothing of the platform."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def test_lint_imports_keeps_every_contract():
    result = subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--no-logo"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    assert result.returncode == 0, f"lint-imports found a broken import contract:\n{result.stdout}{result.stderr}"
    assert re.search(rf"Contracts: {len(contracts)} kept, 0 broken", result.stdout), result.stdout


def test_the_contract_covers_the_layers_and_both_packages():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    by_id = {c["id"]: c for c in config["contracts"]}
    assert set(by_id["no-circles"]["ancestors"]) == {"components", "ai_storage_training"}
    layers = by_id["layers"]
    assert layers["exhaustive"] is True  # a new module in components/ must be placed in a layer
    assert layers["layers"] == [
        "__main__",
        "toolchain",
        "platform",
        "settings",
        "teams",
        "observability",
        "training",
        "tiers",
        "protection",
        "backends",
        "common",
    ]
    assert by_id["training-alone"]["forbidden_modules"][0] == "components"
    training = by_id["training-layers"]
    assert training["exhaustive"] is True  # a new module of the training library must be placed in a layer
    assert training["layers"][1:4] == ["doctor", "data", "checkpoint"]
    assert by_id["doctor-and-data-apart"]["source_modules"] == ["ai_storage_training.doctor"]


def test_components_has_at_most_a_dozen_entries_each_a_layer():
    entries = sorted(p.name for p in (ROOT / "components").iterdir() if p.name != "__pycache__")
    assert len(entries) <= 12, entries
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (layers,) = [c["layers"] for c in config["contracts"] if c["id"] == "layers"]
    assert {p.removesuffix(".py") for p in entries} == {*layers, "__init__"}


def test_the_contracts_see_imports_inside_functions():
    """The graph lint-imports checks holds an import made inside a function (AsyncCheckpointer.save_dcp imports the
    DCP writer there): a manager that imported DCP lazily would break checkpoint-core-knows-no-dcp."""
    import grimp

    graph = grimp.build_graph("ai_storage_training", include_external_packages=True, exclude_type_checking_imports=True)
    assert graph.direct_import_exists(
        importer="ai_storage_training.checkpoint.async_save", imported="ai_storage_training.checkpoint.dcp"
    )
    core = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    (contract,) = [c for c in core if c["id"] == "checkpoint-core-knows-no-dcp"]
    assert "ai_storage_training.checkpoint.manager" in contract["source_modules"]
    assert {"ai_storage_training.checkpoint.dcp", "torch"} <= set(contract["forbidden_modules"])
