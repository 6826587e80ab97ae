"""Checkpoint protection: the snapshot job against a stand-in API server, its RBAC, and the offsite CronJob."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from components.checkpoints import (
    MARKER,
    CheckpointProtection,
    OffsiteSettings,
    OffsiteTarget,
    SnapshotSettings,
    offsite_script,
    protect_checkpoints,
    snapshot_program,
    snapshot_rules,
)
from tests.conformance.upstream import validate_object
from tests.conftest import by_name, objects


class FakeSnapshotApi(BaseHTTPRequestHandler):
    """The three calls the job makes: create, list by label, delete, over VolumeSnapshots in one namespace."""

    store: dict[str, dict] = {}
    calls: list[tuple[str, str]] = []

    def _reply(self, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.calls.append(("POST", self.path))
        assert self.headers["Authorization"] == "Bearer token-of-the-service-account"
        self.store[body["metadata"]["name"]] = body
        self._reply(body)

    def do_GET(self) -> None:
        self.calls.append(("GET", self.path))
        self._reply({"items": list(self.store.values())})

    def do_DELETE(self) -> None:
        self.calls.append(("DELETE", self.path))
        self._reply(self.store.pop(self.path.rsplit("/", 1)[1]))

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def api(tmp_path):
    FakeSnapshotApi.store = {
        f"checkpoints-2026010{i}000000": {"metadata": {"name": f"checkpoints-2026010{i}000000"}} for i in range(1, 5)
    }
    FakeSnapshotApi.calls = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeSnapshotApi)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    account = tmp_path / "sa"
    account.mkdir()
    (account / "namespace").write_text("vision\n")
    (account / "token").write_text("token-of-the-service-account\n")
    env = {
        **os.environ,
        "KUBERNETES_API": f"http://127.0.0.1:{server.server_port}",
        "SERVICE_ACCOUNT_DIR": str(account),
        "CLAIM": "checkpoints",
        "KEEP": "3",
    }
    yield env
    server.shutdown()


def test_the_snapshot_job_snapshots_the_claim_and_keeps_the_newest(api):
    run = subprocess.run(
        [sys.executable, "-c", snapshot_program()], env=api, capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr
    created = [p for m, p in FakeSnapshotApi.calls if m == "POST"]
    assert created == ["/apis/snapshot.storage.k8s.io/v1/namespaces/vision/volumesnapshots"]
    names = sorted(FakeSnapshotApi.store)
    assert len(names) == 3  # the new one and the two newest before it
    assert names[:2] == ["checkpoints-20260103000000", "checkpoints-20260104000000"]
    new = FakeSnapshotApi.store[names[-1]]
    assert new["spec"] == {"source": {"persistentVolumeClaimName": "checkpoints"}}
    assert validate_object(new, "1.33") == []  # against the upstream VolumeSnapshot CRD
    deleted = [p.rsplit("/", 1)[1] for m, p in FakeSnapshotApi.calls if m == "DELETE"]
    assert deleted == ["checkpoints-20260101000000", "checkpoints-20260102000000"]


def test_the_snapshot_job_may_only_handle_volume_snapshots():
    (rule,) = snapshot_rules()
    assert rule == {
        "apiGroups": ["snapshot.storage.k8s.io"],
        "resources": ["volumesnapshots"],
        "verbs": ["create", "list", "delete"],
    }


def protected(protection: CheckpointProtection, target: OffsiteTarget | None = None) -> None:
    import pulumi_kubernetes as k8s

    ns = k8s.core.v1.Namespace("ns", metadata={"name": "vision"})
    protect_checkpoints("vision-checkpoints", "checkpoints", "vision", protection, target, ns, [ns])


TARGET = OffsiteTarget("minio", "http://minio.object-store.svc.cluster.local:9000/ai-datasets", "ak", "sk")


def test_snapshots_and_offsite_copies_are_scheduled_with_their_own_account_and_keys(build):
    result, _ = build(lambda: protected(CheckpointProtection(), TARGET))
    snapshots, offsite = (
        by_name(result, "CronJob", "checkpoints-snapshots"),
        by_name(result, "CronJob", "checkpoints-offsite"),
    )
    pod = snapshots["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "checkpoints-snapshots" and pod["automountServiceAccountToken"] is True
    binding = by_name(result, "RoleBinding", "checkpoints-snapshots")
    assert binding["roleRef"]["name"] == "checkpoints-snapshots"
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "checkpoints-snapshots", "namespace": "vision"}]
    copy = offsite["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    env = {e["name"]: e["value"] for e in copy["containers"][0]["env"]}
    assert (
        env["DESTINATION"]
        == "minio://minio.object-store.svc.cluster.local:9000/ai-datasets/checkpoints/vision/checkpoints/"
    )
    assert {"name": "checkpoints", "persistentVolumeClaim": {"claimName": "checkpoints", "readOnly": True}} in copy[
        "volumes"
    ]
    assert by_name(result, "Secret", "checkpoints-offsite-credentials")["stringData"] == {
        "access-key": "[secret]",
        "secret-key": "[secret]",
    }
    for obj in [o for objs in result.manifests.values() for o in objs]:
        assert validate_object(obj, "1.33") == [], obj["kind"]


def test_nothing_is_scheduled_when_both_are_off(build):
    off = CheckpointProtection(snapshots=SnapshotSettings(enabled=False), offsite=OffsiteSettings(enabled=False))
    result, _ = build(lambda: protected(off, TARGET))
    assert not objects(result, "CronJob") and not objects(result, "Role")


def test_the_offsite_copy_skips_checkpoints_without_their_marker_and_sends_the_marker_last():
    script = offsite_script(["--no-https"]).splitlines()
    check = next(i for i, line in enumerate(script) if f'[ ! -f "${{dir}}{MARKER}" ]' in line)
    first = next(i for i, line in enumerate(script) if f"--exclude {MARKER}" in line)
    last = next(i for i, line in enumerate(script) if f"--include {MARKER}" in line)
    assert check < first < last
    assert "juicefs sync --no-https" in script[first]
