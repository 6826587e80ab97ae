"""The generated redis.conf on the real redis-server: durable, never evicting, password required."""

from __future__ import annotations

import harness
import pytest
import redis


@pytest.fixture(scope="module")
def server(generated, tmp_path_factory):
    with harness.redis_server(generated["redis_conf"], tmp_path_factory.mktemp("redis")) as r:
        yield r


def test_aof_persistence_is_on(server):
    c = server.client()
    assert c.config_get("appendonly") == {"appendonly": "yes"}
    assert c.config_get("appendfsync") == {"appendfsync": "everysec"}
    c.set("probe", "1")
    assert (server.data_dir / "appendonlydir").is_dir()


def test_memory_policy_never_evicts(server):
    assert server.client().config_get("maxmemory-policy") == {"maxmemory-policy": "noeviction"}


def test_unauthenticated_commands_are_refused(server):
    anonymous = server.client(authenticated=False)
    with pytest.raises(redis.exceptions.AuthenticationError, match="(?i)auth"):
        anonymous.get("probe")
    with pytest.raises(redis.exceptions.AuthenticationError):
        server.client(password="not-the-password").ping()


def test_listens_on_loopback_only(server):
    assert server.client().config_get("bind") == {"bind": "127.0.0.1"}
    assert server.password and server.client().config_get("requirepass")["requirepass"] == server.password
