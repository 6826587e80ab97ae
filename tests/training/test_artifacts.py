"""publish(): a model version goes up file by file with its CRC32C, the manifest last, and never twice (moto's
in-process S3; the IAM-enforced keys are tests/datapath/test_datapath_artifacts.py)."""

from __future__ import annotations

import json
import os

import boto3
import crc32c
import pytest
from moto import mock_aws

from ai_storage_training.data import artifacts
from ai_storage_training.data.artifacts import Target, publish
from ai_storage_training.data.manifest import DatasetError
from ai_storage_training.data.pack import PublishedError

TARGET = Target(None, "models", "artifacts/vision/")


@pytest.fixture
def s3(monkeypatch):
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket="models")
        yield client


def model(tmp_path, **files: bytes):
    root = tmp_path / "model"
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    return root


def test_every_file_then_the_manifest_with_sizes_and_crc32c(s3, tmp_path, monkeypatch):
    monkeypatch.setattr(artifacts, "PART_BYTES", 5 * 1024 * 1024)  # S3's smallest part: the big file goes in parts
    big = os.urandom(11 * 1024 * 1024)
    root = model(tmp_path, **{"weights.bin": big, "config.json": b"{}", ".cache/x": b"hidden"})
    sent = []
    s3.meta.events.register("provide-client-params.s3.*", lambda params, model, **_: sent.append((model.name, params)))
    manifest = publish(root, "classifier", "1", target=TARGET, client=s3)
    assert manifest["files"] == [
        {"name": "config.json", "size": 2, "crc32c": f"{crc32c.crc32c(b'{}'):08x}"},
        {"name": "weights.bin", "size": len(big), "crc32c": f"{crc32c.crc32c(big):08x}"},
    ]
    calls = [name for name, _ in sent]
    assert calls[-1] == "PutObject" and sent[-1][1]["Key"] == "artifacts/vision/classifier/1/manifest.json"
    assert calls.count("UploadPart") == 3 and all(
        "ChecksumCRC32C" in p for n, p in sent if n in ("UploadPart", "PutObject")
    )
    body = s3.get_object(Bucket="models", Key="artifacts/vision/classifier/1/weights.bin")["Body"].read()
    assert body == big
    stored = json.loads(
        s3.get_object(Bucket="models", Key="artifacts/vision/classifier/1/manifest.json")["Body"].read()
    )
    assert stored == manifest


def test_a_published_version_is_refused_and_nothing_is_sent(s3, tmp_path):
    root = model(tmp_path, **{"weights.bin": b"1"})
    publish(root, "classifier", "1", target=TARGET, client=s3)
    (root / "weights.bin").write_bytes(b"2")
    with pytest.raises(PublishedError, match="version 1 of classifier is published"):
        publish(root, "classifier", "1", target=TARGET, client=s3)
    assert s3.get_object(Bucket="models", Key="artifacts/vision/classifier/1/weights.bin")["Body"].read() == b"1"


def test_two_publishers_of_one_version_one_wins(s3, tmp_path, monkeypatch):
    """The manifest check passes for both; the conditional PUT of the manifest lets only the first through."""
    root = model(tmp_path, **{"weights.bin": b"1"})
    monkeypatch.setattr(artifacts, "_exists", lambda *_: False)
    publish(root, "classifier", "1", target=TARGET, client=s3)
    with pytest.raises(PublishedError, match="by another publisher"):
        publish(root, "classifier", "1", target=TARGET, client=s3)


@pytest.mark.parametrize(
    ("files", "name", "version", "error", "match"),
    [
        ({"w": b"1"}, "bad name", "1", ValueError, "name: expected letters"),
        ({"w": b"1"}, "m", "../1", ValueError, "version: expected letters"),
        ({".hidden": b"1"}, "m", "1", DatasetError, "no files to publish"),
        ({"manifest.json": b"{}"}, "m", "1", DatasetError, "holds a manifest.json of its own"),
    ],
)
def test_bad_input_is_refused_before_anything_is_sent(s3, tmp_path, files, name, version, error, match):
    with pytest.raises(error, match=match):
        publish(model(tmp_path, **files), name, version, target=TARGET, client=s3)
    assert s3.list_objects_v2(Bucket="models").get("KeyCount") == 0


def test_the_target_comes_from_the_delivered_config_map(monkeypatch):
    monkeypatch.setenv(artifacts.ENDPOINT_VARIABLE, "http://minio.object-store.svc:9000")
    monkeypatch.setenv(artifacts.BUCKET_VARIABLE, "ai-datasets")
    monkeypatch.setenv(artifacts.PREFIX_VARIABLE, "artifacts/vision/")
    assert Target.from_env() == Target("http://minio.object-store.svc:9000", "ai-datasets", "artifacts/vision/")
    monkeypatch.setenv(artifacts.PREFIX_VARIABLE, "artifacts/vision")
    with pytest.raises(ValueError, match="AI_STORAGE_ARTIFACTS_PREFIX"):
        Target.from_env()
