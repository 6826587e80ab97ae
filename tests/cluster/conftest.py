"""A real kube-apiserver v1.33 for the session: the pinned CRDs and Volcano's ValidatingAdmissionPolicies in it,
and every platform stack's namespaces and objects created, so team stacks and operator-built pods meet what they
would meet on a cluster."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster import api_server
from tests.cluster.api_server import ApiServer


def _require() -> None:
    why = api_server.missing()
    if why is None:
        return
    if os.environ.get("AI_STORAGE_REQUIRE_GATES") == "1":
        pytest.fail(f"no real API server: {why}")
    pytest.skip(f"no real API server: {why}")


def _started(path: Path, *flags: str) -> ApiServer:
    server = ApiServer(path, *flags).start()
    for crd in api_server.upstream_crds():
        outcome = server.apply(crd, dry_run=False)
        assert outcome.accepted, (outcome.label, outcome.message)
    for policy in api_server.volcano_validating_policies():
        outcome = server.apply(policy, dry_run=False)
        assert outcome.accepted, (outcome.label, outcome.message)
    return server


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    """kube-apiserver as Kubernetes 1.33 ships it (the ImageVolume gate off), with the pinned CRDs and policies."""
    _require()
    server = _started(tmp_path_factory.mktemp("kube"))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def image_volume_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    """The same with the ImageVolume feature gate on (what `workspace.imageVolumes: true` says of a cluster)."""
    _require()
    server = ApiServer(tmp_path_factory.mktemp("kube-iv"), "--feature-gates=ImageVolume=true").start()
    yield server
    server.stop()
