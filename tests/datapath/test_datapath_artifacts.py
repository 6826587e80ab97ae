"""Model artifacts on an S3 endpoint that enforces IAM (moto's server, as in test_datapath_scoped_access.py): the
policy documents the platform GENERATES for a team's artifact key and for a reader's key (offline renders of the
dev stack with ``artifactReaders``, the MinIO scope Jobs' and the AWS S3 users' documents) become IAM users there,
and the training library's ``publish`` runs with the team's keys. The team's key writes ``artifacts/<team>/``
and is denied everywhere else; a published version cannot be overwritten; the reader's key reads the version
and can neither write nor delete it. moto does not evaluate ``Condition`` keys, so listing is not asserted."""

from __future__ import annotations

import hashlib
import json
import os

import boto3
import harness
import pytest
import yaml
from botocore.exceptions import ClientError
from conftest import generated_scopes

from ai_storage_training.data.artifacts import Target, publish
from ai_storage_training.data.pack import PublishedError
from components.toolchain.render import ROOT

TEAM, OTHER, READER = "vision", "speech", "serving"
TEAM_PREFIX, OTHER_PREFIX = f"artifacts/{TEAM}/", f"artifacts/{OTHER}/"
SCOPES = (TEAM_PREFIX, OTHER_PREFIX, f"{TEAM_PREFIX} read-only", f"checkpoints/{TEAM}/")
UNCHECKED = 1 + 3 * (1 + len(SCOPES))
"""Requests moto lets through before it enforces IAM: the bucket, the admin's and each scope's user, policy
and key."""
ADMIN_POLICY = json.dumps({"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]})


@pytest.fixture(scope="module")
def scopes() -> dict:
    workspaces = yaml.safe_load((ROOT / "stacks" / "dev.yaml").read_text())["teams"]["workspaces"]
    readers = [{**w, "artifactReaders": [READER]} if w["name"] == TEAM else w for w in workspaces]
    return generated_scopes(teams={"workspaces": readers})


def code(call, **kwargs) -> str:
    """The error code of an S3 call, or "ok"."""
    try:
        call(**kwargs)
    except ClientError as e:
        return e.response["Error"]["Code"]
    return "ok"


@pytest.mark.parametrize("backend", ["s3", "minio"])
def test_a_team_publishes_its_models_and_a_reader_only_reads_them(backend, scopes, tmp_path):
    policies = scopes[backend]
    assert set(SCOPES) <= set(policies), policies
    bucket = json.loads(policies[TEAM_PREFIX])["Statement"][0]["Resource"].split(":::", 1)[1].split("/", 1)[0]
    iam_free = {"INITIAL_NO_AUTH_ACTION_COUNT": str(UNCHECKED)}
    with harness.moto_s3(tmp_path, bucket=bucket, access_key="setup", secret_key="setup", env=iam_free) as s3:
        iam = boto3.client(
            "iam", endpoint_url=s3.endpoint, aws_access_key_id="setup", aws_secret_access_key="setup",
            region_name="us-east-1",
        )  # fmt: skip

        def user(name: str, policy: str):
            iam.create_user(UserName=name)
            iam.put_user_policy(UserName=name, PolicyName=name, PolicyDocument=policy)
            key = iam.create_access_key(UserName=name)["AccessKey"]
            return boto3.client(
                "s3", endpoint_url=s3.endpoint, aws_access_key_id=key["AccessKeyId"],
                aws_secret_access_key=key["SecretAccessKey"], region_name="us-east-1",
            )  # fmt: skip

        admin = user("admin", ADMIN_POLICY)
        team, other, reader, team_checkpoints = (user(f"scope-{i}", policies[p]) for i, p in enumerate(SCOPES))
        admin.put_object(Bucket=bucket, Key=f"{OTHER_PREFIX}asr/1/manifest.json", Body=b"{}")

        model = tmp_path / "model"
        (model / "tokenizer").mkdir(parents=True)
        files = {
            "model.safetensors": os.urandom(3 * 1024 * 1024),
            "config.json": b'{"layers": 8}',
            "tokenizer/vocab.txt": b"a\nb\n",
        }
        for name, data in files.items():
            (model / name).write_bytes(data)
        target = Target(s3.endpoint, bucket, TEAM_PREFIX)
        manifest = publish(model, "classifier", "1", target=target, client=team)
        assert [f["name"] for f in manifest["files"]] == sorted(files)

        # Published: never overwritten, by the library or behind its back.
        with pytest.raises(PublishedError, match="is published"):
            publish(model, "classifier", "1", target=target, client=team)
        key = f"{TEAM_PREFIX}classifier/1/manifest.json"
        assert code(team.put_object, Bucket=bucket, Key=key, Body=b"{}", IfNoneMatch="*") == "PreconditionFailed"

        # The team's key reaches only its own prefix.
        assert code(team.put_object, Bucket=bucket, Key=f"{OTHER_PREFIX}x", Body=b"x") == "AccessDenied"
        assert code(team.get_object, Bucket=bucket, Key=f"{OTHER_PREFIX}asr/1/manifest.json") == "AccessDenied"
        assert code(team.put_object, Bucket=bucket, Key="checkpoints/vision/x", Body=b"x") == "AccessDenied"
        assert code(team_checkpoints.put_object, Bucket=bucket, Key=f"{TEAM_PREFIX}x", Body=b"x") == "AccessDenied"
        assert code(other.get_object, Bucket=bucket, Key=key) == "AccessDenied"

        # The reader reads every file as published and matches the manifest; it cannot write or delete.
        published = json.loads(reader.get_object(Bucket=bucket, Key=key)["Body"].read())
        for entry in published["files"]:
            body = reader.get_object(Bucket=bucket, Key=f"{TEAM_PREFIX}classifier/1/{entry['name']}")["Body"].read()
            assert hashlib.sha256(body).digest() == hashlib.sha256(files[entry["name"]]).digest()
            assert len(body) == entry["size"]
        assert code(reader.put_object, Bucket=bucket, Key=f"{TEAM_PREFIX}classifier/2/x", Body=b"x") == "AccessDenied"
        assert code(reader.delete_object, Bucket=bucket, Key=key) == "AccessDenied"
        assert code(reader.get_object, Bucket=bucket, Key=f"{OTHER_PREFIX}asr/1/manifest.json") == "AccessDenied"
        with pytest.raises(ClientError, match="AccessDenied"):
            publish(model, "classifier", "2", target=target, client=reader)
