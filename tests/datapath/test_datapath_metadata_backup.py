"""Metadata backup/restore rehearsal on the real binaries: dump, load into a fresh Redis, fsck, mount, read."""

from __future__ import annotations

import hashlib
import json
import os

import harness


def _digests(root):
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_dump_load_into_a_fresh_redis_fsck_mount_and_read_back_identical(stack, mounted, generated, tmp_path):
    src = mounted.mountpoint / "backup-rehearsal"
    (src / "nested" / "deeper").mkdir(parents=True)
    for i in range(8):
        (src / ("nested/deeper" if i % 2 else "nested") / f"part-{i}.bin").write_bytes(os.urandom(1024 * 1024 + i))
    (src / "small.txt").write_text("metadata-only sized file\n")
    expected = _digests(src)
    os.sync()

    dump = tmp_path / "meta-dump.json"
    harness.run_juicefs(["dump", stack.secret["metaurl"], str(dump)])
    text = dump.read_text()
    assert json.loads(text)["Setting"]["Name"] == stack.secret["name"]
    assert stack.secret["secret-key"] not in text  # a backup never carries the object-store secret

    # a second Redis, started from the same generated conf, is the fresh metadata engine
    with harness.redis_server(generated["redis_conf"], tmp_path / "redis-restore") as fresh:
        assert fresh.client(db=1).dbsize() == 0
        restored_url = harness.replace_hostport(stack.secret["metaurl"], fresh.hostport)
        harness.run_juicefs(["load", restored_url, str(dump)])

        # the dump dropped the secret key: fsck refuses until the operator puts it back from the Secret
        refused = harness.run_juicefs(["fsck", restored_url], check=False)
        assert refused.returncode != 0 and "secret was removed" in refused.stderr
        harness.run_juicefs(["config", restored_url, "-y", "--secret-key", stack.secret["secret-key"]])

        fsck = harness.run_juicefs(["fsck", restored_url])
        assert "broken" not in (fsck.stdout + fsck.stderr).lower()

        with harness.juicefs_mount(
            restored_url, tmp_path / "restored", generated["mount_options"], cache_root=tmp_path / "restored-cache"
        ) as restored:
            harness.drop_page_cache()
            assert _digests(restored.mountpoint / "backup-rehearsal") == expected
