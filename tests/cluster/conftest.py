"""A real kube-apiserver v1.33 for the session: the pinned CRDs and Volcano's ValidatingAdmissionPolicies in it,
and every platform stack's namespaces and objects created, so team stacks and operator-built pods meet what they
would meet on a cluster."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.api_server import ApiServer, NoControlPlaneError
from tests.conformance import upstream


def _started(path: Path, *flags: str, upstream_objects: bool = True) -> ApiServer:
    """A control plane (the pinned CRDs and Volcano's policies in it), or a skip with kube-up's own line: no machine
    these tests run on ships kube-apiserver (``KUBE_UP_BIN`` provides one); ``tests/admission`` checks the same rules
    without it."""
    try:
        server = ApiServer(path, *flags).start()
    except NoControlPlaneError as why:
        pytest.skip(f"no real API server: {why}")
    if upstream_objects:
        for obj in [*upstream.upstream_crds(), *upstream.volcano_validating_policies()]:
            outcome = server.apply(obj, dry_run=False)
            assert outcome.accepted, (outcome.label, outcome.message)
    return server


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    """kube-apiserver as Kubernetes 1.33 ships it (the ImageVolume gate off), with the pinned CRDs and policies."""
    server = _started(tmp_path_factory.mktemp("kube"))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def image_volume_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    """The same with the ImageVolume feature gate on (what `workspace.imageVolumes: true` says of a cluster)."""
    server = _started(tmp_path_factory.mktemp("kube-iv"), "--feature-gates=ImageVolume=true", upstream_objects=False)
    yield server
    server.stop()
