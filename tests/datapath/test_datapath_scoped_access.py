"""Scoped object-store access on the real binaries, against an S3 endpoint that enforces IAM policies.

moto's server enforces IAM once ``INITIAL_NO_AUTH_ACTION_COUNT`` requests have gone unchecked: each of the
platform's scopes becomes an IAM user there with the policy document the platform GENERATES (taken from
offline renders: the MinIO scope Jobs' documents, and the AWS S3 users' documents of the same stack on S3),
and the real programs run with that user's keys exactly as the platform runs them: ``juicefs format`` and
``juicefs mount`` with the JuiceFS volume's keys, the generated metadata backup script with the backup's
keys, the generated offsite copy script (``juicefs sync``) with the platform's training keys and with a vended
team's keys to the URL the platform delivers to that team. Every key works under its prefix and gets
AccessDenied on the others' data (another team's, written with that team's own keys).

What moto does not enforce: ``Condition`` keys (measured with moto 5.2.5: a ListBucket with any ``s3:prefix``
is allowed). So listing another prefix is NOT refused here; the generated ListBucket statement carries the
``s3:prefix`` condition (tests/unit/test_object_store.py), which AWS S3 and MinIO evaluate.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import boto3
import checkpoint
import harness
import pytest
from botocore.exceptions import ClientError
from conftest import generated_scopes

VOLUME_PREFIX, BACKUP_PREFIX, TRAINING_PREFIX = "ai-datasets/", "meta-backups/", "checkpoints/training/"
TEAM, OTHER = "vision", "speech"
"""Two teams the dev stack vends."""
TEAM_PREFIX, OTHER_TEAM = f"checkpoints/{TEAM}/", f"checkpoints/{OTHER}/"
SCOPES = (VOLUME_PREFIX, BACKUP_PREFIX, TRAINING_PREFIX, TEAM_PREFIX, OTHER_TEAM)
UNCHECKED = 1 + 3 * (1 + len(SCOPES))
"""Requests moto lets through before it enforces IAM: the bucket, the admin (user, policy, key) and each
scope's (user, policy, key), in this order."""
ADMIN_POLICY = json.dumps({"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]})


@pytest.fixture(scope="module")
def scopes() -> dict:
    return generated_scopes()


def digests(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


class Keys:
    """An IAM user's keys on the moto endpoint, and an S3 client that uses them."""

    def __init__(self, endpoint: str, key: dict):
        self.access_key, self.secret_key = key["AccessKeyId"], key["SecretAccessKey"]
        self.s3 = boto3.client(
            "s3",
            endpoint_url=endpoint,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name="us-east-1",
        )

    def denied(self, call, **kwargs) -> bool:
        """True when the call is refused with AccessDenied (any other outcome is False)."""
        try:
            call(self.s3, **kwargs)
        except ClientError as e:
            return e.response["Error"]["Code"] == "AccessDenied"
        return False


def get(s3, *, bucket, key):
    s3.get_object(Bucket=bucket, Key=key)["Body"].read()


def put(s3, *, bucket, key):
    s3.put_object(Bucket=bucket, Key=key, Body=b"intruder")


def delete(s3, *, bucket, key):
    s3.delete_object(Bucket=bucket, Key=key)


@pytest.mark.parametrize("backend", ["s3", "minio"])
def test_each_key_reaches_its_own_prefix_and_is_denied_elsewhere(backend, scopes, generated, fuse_ok, tmp_path):
    # Model artifacts' scopes have a test of their own (test_datapath_artifacts.py).
    policies = {prefix: p for prefix, p in scopes[backend].items() if not prefix.startswith("artifacts/")}
    assert set(policies) == set(SCOPES), policies
    bucket = harness.bucket_name(generated["volume_secret"]["bucket"])
    iam_free = {"INITIAL_NO_AUTH_ACTION_COUNT": str(UNCHECKED)}
    with (
        harness.redis_server(generated["redis_conf"], tmp_path / "redis") as redis,
        harness.moto_s3(tmp_path, bucket=bucket, access_key="setup", secret_key="setup", env=iam_free) as s3,
    ):
        iam = boto3.client(
            "iam",
            endpoint_url=s3.endpoint,
            aws_access_key_id="setup",
            aws_secret_access_key="setup",
            region_name="us-east-1",
        )

        def user(name: str, policy: str) -> Keys:
            iam.create_user(UserName=name)
            iam.put_user_policy(UserName=name, PolicyName=name, PolicyDocument=policy)
            return Keys(s3.endpoint, iam.create_access_key(UserName=name)["AccessKey"])

        admin = user("admin", ADMIN_POLICY)
        volume, backup, training, team, other = (user(f"scope-{i}", policies[p]) for i, p in enumerate(SCOPES))
        # IAM is enforced from here on: a key moto never issued is refused, and the admin can seed data.
        stranger = Keys(s3.endpoint, {"AccessKeyId": "AKIASTRANGER0000000", "SecretAccessKey": "x" * 40})
        with pytest.raises(ClientError, match="InvalidAccessKeyId"):
            stranger.s3.list_objects_v2(Bucket=bucket)
        # The other team writes under its own prefix with its own keys.
        other.s3.put_object(Bucket=bucket, Key=f"{OTHER_TEAM}claim/step-00000001/shard", Body=b"theirs")

        # The JuiceFS volume's keys: `juicefs format` and a mount with the generated Secret, then a write.
        secret = harness.rewrite_volume_secret(
            {**generated["volume_secret"], "access-key": volume.access_key, "secret-key": volume.secret_key},
            meta_hostport=redis.hostport,
            s3_endpoint=s3.endpoint,
        )
        harness.format_volume(secret)
        payload = os.urandom(3 * 1024 * 1024)
        with harness.juicefs_mount(
            secret["metaurl"],
            tmp_path / "mnt",
            generated["mount_options"],
            cache_root=tmp_path / "cache",
            env=harness.client_env(secret),
        ) as mounted:
            (mounted.mountpoint / "dataset.bin").write_bytes(payload)
            os.sync()
        with harness.juicefs_mount(
            secret["metaurl"], tmp_path / "mnt2", [], cache_root=tmp_path / "cache2", env=harness.client_env(secret)
        ) as again:
            assert (again.mountpoint / "dataset.bin").read_bytes() == payload
        stored = sorted(o["Key"] for o in admin.s3.list_objects_v2(Bucket=bucket)["Contents"])
        chunks = [k for k in stored if k.startswith(f"{VOLUME_PREFIX}chunks/")]
        assert chunks and all(k.startswith((VOLUME_PREFIX, OTHER_TEAM)) for k in stored), stored

        # The metadata backup: the generated script with the backup's keys uploads the dump under its prefix.
        env = scopes["backup_env"]
        dirs = {name: tmp_path / name for name in ("secrets", "keys", "client-env", "backup")}
        for d in dirs.values():
            d.mkdir()
        (dirs["secrets"] / "metaurl").write_text(secret["metaurl"])
        harness.key_files(dirs["keys"], backup.access_key, backup.secret_key)
        script = scopes["backup_script"].replace("/backup/", f"{dirs['backup']}/")  # only the scratch path
        destination = harness.replace_hostport(env["DESTINATION"], f"{harness.LOOPBACK}:{s3.port}")
        run = harness.run_generated_script(
            script,
            tmp_path,
            DESTINATION=destination,
            VOLUME=env["VOLUME"],
            SECRETS=str(dirs["secrets"]),
            KEYS=str(dirs["keys"]),
            CLIENT_ENV=str(dirs["client-env"]),
        )
        assert run.returncode == 0, run.stdout + run.stderr
        dumps = [o["Key"] for o in admin.s3.list_objects_v2(Bucket=bucket, Prefix=BACKUP_PREFIX)["Contents"]]
        assert len(dumps) == 1, dumps

        # The generated offsite copy writes and reads back under the keys' own prefix: the platform's training
        # claim with its keys, and a vended team's checkpoints (to the URL the platform delivers to the team).
        root = tmp_path / "checkpoints"
        done = checkpoint.write_checkpoint(root, 10, [os.urandom(1024 * 1024) for _ in range(2)])

        def copy_offsite(keys: Keys, to: str) -> subprocess.CompletedProcess:
            secrets = harness.key_files(tmp_path / f"keys-{keys.access_key}", keys.access_key, keys.secret_key)
            env = {"CHECKPOINTS": f"{root}/", "DESTINATION": to, "SECRETS": str(secrets)}
            return harness.run_generated_script(generated["offsite_script"], tmp_path, **env)

        loopback = f"{harness.LOOPBACK}:{s3.port}"
        platform_copy = harness.replace_hostport(generated["offsite_env"]["DESTINATION"], loopback)
        offsite = harness.replace_hostport(scopes["team_urls"][TEAM], loopback) + "checkpoints/"
        assert f"/{bucket}/{TRAINING_PREFIX}" in platform_copy and f"/{bucket}/{TEAM_PREFIX}" in offsite
        for keys, to in ((training, platform_copy), (team, offsite)):
            run = copy_offsite(keys, to)
            assert run.returncode == 0 and "copied step-00000010" in run.stdout, run.stdout + run.stderr
            restored = tmp_path / f"restored-{keys.access_key}"
            restored.mkdir()
            env = harness.subprocess_env(AWS_ACCESS_KEY_ID=keys.access_key, AWS_SECRET_ACCESS_KEY=keys.secret_key)
            harness.run_juicefs(["sync", "--no-https", f"{to}step-00000010/", f"{restored}/"], env=env)
            assert digests(restored) == digests(done)

        # ... and is refused on another team's prefix (the same script, pointed there), on the backups and on
        # the JuiceFS chunks.
        elsewhere = offsite.replace(f"/{TEAM_PREFIX}", f"/{OTHER_TEAM}")
        run = copy_offsite(team, elsewhere)
        assert run.returncode != 0 and "copy of step-00000010 failed" in run.stdout, run.stdout + run.stderr
        theirs = f"{OTHER_TEAM}claim/step-00000001/shard"
        for call, key in (
            (get, theirs),
            (put, theirs),
            (delete, theirs),
            (get, f"{platform_copy.split(f'/{bucket}/', 1)[1]}step-00000010/{checkpoint.MARKER}"),
            (get, dumps[0]),
            (put, f"{BACKUP_PREFIX}forged.json.gz"),
            (delete, dumps[0]),
            (get, chunks[0]),
            (put, chunks[0]),
            (delete, chunks[0]),
        ):
            assert team.denied(call, bucket=bucket, key=key), (call.__name__, key)

        # The backup's keys reach only the backups; the volume's keys only the volume.
        for call, key in ((get, chunks[0]), (delete, chunks[0]), (get, theirs), (put, f"{TEAM_PREFIX}x")):
            assert backup.denied(call, bucket=bucket, key=key), (call.__name__, key)
        for call, key in ((get, dumps[0]), (put, f"{BACKUP_PREFIX}forged"), (delete, dumps[0]), (get, theirs)):
            assert volume.denied(call, bucket=bucket, key=key), (call.__name__, key)
        # Nothing any scope was refused got through: the backup and the other team's data are intact.
        assert admin.s3.get_object(Bucket=bucket, Key=theirs)["Body"].read() == b"theirs"
        listed = admin.s3.list_objects_v2(Bucket=bucket, Prefix=BACKUP_PREFIX)["Contents"]
        assert [o["Key"] for o in listed] == dumps
