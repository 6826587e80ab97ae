"""The Sentinel layout of the metadata engine on loopback, started from what the platform generates.

Each data node and each Sentinel runs the generated start script (``start.sh data|sentinel``), exactly as
its pod's command, with the generated redis.conf / sentinel.conf. Only addresses change: every data node
gets its own loopback address (127.0.0.11, .12, ...) and every Sentinel too (127.0.0.21, ...), each on the
generated port when it is free there; ``bind``, ``port`` and ``dir`` are rewritten in the config files, the
pods' DNS names in the start script's environment, and the Sentinel hosts of the metadata URL. The JuiceFS
Sentinel URL names one port for all Sentinels, which distinct addresses keep.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.parse
from collections.abc import Iterator, Mapping
from pathlib import Path

from harness import HarnessError, _stop, _tail, find_binary, rewrite_redis_conf, subprocess_env

DATA_HOSTS = ("127.0.0.11", "127.0.0.12", "127.0.0.13")
SENTINEL_HOSTS = ("127.0.0.21", "127.0.0.22", "127.0.0.23")


def port_free_on(hosts: tuple[str, ...], preferred: int) -> int:
    """``preferred`` if it is free on every host, else a port free on all of them."""
    candidates = [preferred, *range(30000, 30500)]
    for port in candidates:
        sockets = []
        try:
            for host in hosts:
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                sockets.append(s)
                s.bind((host, port))
            return port
        except OSError:
            continue
        finally:
            for s in sockets:
                s.close()
    raise HarnessError(f"no port free on all of {hosts}")


def rewrite_sentinel_conf(conf: str, *, host: str, port: int, redis_port: int) -> str:
    """A generated sentinel.conf on loopback: ``bind``/``port`` changed, the monitored primary's port too."""
    out = []
    for line in conf.splitlines():
        if line.startswith("bind "):
            line = f"bind {host}"
        elif line.startswith("port "):
            line = f"port {port}"
        elif line.startswith("sentinel monitor "):
            parts = line.split()
            parts[4] = str(redis_port)
            line = " ".join(parts)
        out.append(line)
    return "\n".join(out) + "\n"


def rewrite_sentinel_url(url: str, hosts: tuple[str, ...], port: int) -> str:
    """The JuiceFS Sentinel URL (``redis://:PW@MASTER,S1,S2,S3:PORT/DB``) with the Sentinels at ``hosts``."""
    parsed = urllib.parse.urlsplit(url)
    userinfo, _, hostpart = parsed.netloc.rpartition("@")
    master = hostpart.split(",", 1)[0]
    netloc = f"{userinfo}@{master},{','.join(hosts)}:{port}"
    return urllib.parse.urlunsplit(parsed._replace(netloc=netloc))


@dataclasses.dataclass
class Node:
    role: str
    host: str
    port: int
    workdir: Path
    env: dict[str, str]
    process: subprocess.Popen | None = None

    @property
    def log(self) -> Path:
        return self.workdir / f"{self.role}.log"


@dataclasses.dataclass
class SentinelCluster:
    data: list[Node]
    sentinels: list[Node]
    password: str
    master_name: str
    script: Path
    data_args: list[str]
    """The data pods' flags after ``start.sh data`` (from the generated StatefulSet)."""

    def client(self, node: Node):
        import redis

        return redis.Redis(host=node.host, port=node.port, password=self.password, socket_timeout=3)

    def primary(self) -> str | None:
        """The primary's host as the Sentinels report it (the first that answers)."""
        for s in self.sentinels:
            with contextlib.suppress(Exception):
                found = self.client(s).execute_command("SENTINEL", "get-master-addr-by-name", self.master_name)
                if found:
                    return found[0].decode()
        return None

    def node(self, host: str) -> Node:
        return next(n for n in self.data if n.host == host)

    def start(self, node: Node) -> None:
        """Run the generated start script for ``node`` (its pod's command)."""
        args = ["sh", str(self.script), node.role, *(self.data_args if node.role == "data" else ())]
        with open(node.log, "ab") as log:
            node.process = subprocess.Popen(
                args, env=node.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )

    def kill(self, node: Node) -> None:
        """SIGKILL the node's process (the start script execs redis-server, so it is that process)."""
        assert node.process is not None
        os.killpg(node.process.pid, signal.SIGKILL)
        node.process.wait(timeout=10)

    def freeze(self, node: Node, frozen: bool = True) -> None:
        """SIGSTOP (or SIGCONT) the node's process: a frozen node keeps its sockets open and answers nothing, as
        a hung or partitioned one does, so a client notices only through its own read timeout."""
        assert node.process is not None
        os.killpg(node.process.pid, signal.SIGSTOP if frozen else signal.SIGCONT)

    def wait(self, condition, what: str, timeout: float = 60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                value = condition()
                if value:
                    return value
            time.sleep(0.1)
        logs = "\n".join(f"--- {n.role} {n.host}\n{_tail(n.log, 8)}" for n in [*self.data, *self.sentinels])
        raise HarnessError(f"{what} within {timeout}s failed\n{logs}")

    def replication(self, node: Node) -> dict:
        return self.client(node).info("replication")


def _node_env(base: Mapping[str, str], host: str, config_dir: Path, data_dir: Path, ports: tuple[int, int]) -> dict:
    env = subprocess_env(**{k: v for k, v in base.items() if k not in ("SELF_HOST", "CONFIG_DIR", "DATA_DIR")})
    env.update(
        SELF_HOST=host,
        NODES=" ".join(DATA_HOSTS),
        SENTINELS=" ".join(SENTINEL_HOSTS),
        INITIAL_PRIMARY=DATA_HOSTS[0],
        REDIS_PORT=str(ports[0]),
        SENTINEL_PORT=str(ports[1]),
        CONFIG_DIR=str(config_dir),
        DATA_DIR=str(data_dir),
        PATH=f"{Path(find_binary(base['ENGINE'] + '-server')).parent}:{env['PATH']}",
    )
    return env


@contextlib.contextmanager
def sentinel_cluster(generated: Mapping, workdir: Path, seed: Path | None = None) -> Iterator[SentinelCluster]:
    """Three data nodes and three Sentinels from the generated config, the initial primary first; yields once
    the Sentinels agree on it and see both replicas. ``seed``: a data directory the initial primary starts
    from (the claim a StatefulSet's first pod keeps)."""
    env = generated["start_env"]
    redis_port = port_free_on(DATA_HOSTS, int(env["REDIS_PORT"]))
    sentinel_port = port_free_on(SENTINEL_HOSTS, int(env["SENTINEL_PORT"]))
    workdir.mkdir(parents=True, exist_ok=True)
    script = workdir / "start.sh"
    script.write_text(generated["start_script"])
    data, sentinels = [], []
    for role, hosts, nodes in (("data", DATA_HOSTS, data), ("sentinel", SENTINEL_HOSTS, sentinels)):
        for host in hosts:
            home = workdir / f"{role}-{host}"
            config, state = home / "config", home / "data"
            config.mkdir(parents=True)
            if seed is not None and host == DATA_HOSTS[0]:
                shutil.copytree(seed, state)
            else:
                state.mkdir()
            port = redis_port if role == "data" else sentinel_port
            redis_conf = rewrite_redis_conf(generated["redis_conf"], port=redis_port, data_dir=state)
            (config / "redis.conf").write_text(re.sub(r"(?m)^bind .*$", f"bind {host}", redis_conf))
            (config / "sentinel.conf").write_text(
                rewrite_sentinel_conf(generated["sentinel_conf"], host=host, port=sentinel_port, redis_port=redis_port)
            )
            (config / "password").write_text(generated["password"])
            node_env = _node_env(env, host, config, state, (redis_port, sentinel_port))
            nodes.append(Node(role, host, port, home, node_env))
    cluster = SentinelCluster(
        data, sentinels, generated["password"], env["MASTER_NAME"], script, list(generated["start_data_args"])
    )
    try:
        for node in data:
            cluster.start(node)
            cluster.wait(lambda node=node: cluster.client(node).ping(), f"{node.host} answering PING")
        for node in sentinels:
            cluster.start(node)
        primary = DATA_HOSTS[0]
        cluster.wait(lambda: cluster.primary() == primary, "the Sentinels naming the initial primary")
        # Both replicas in sync: until one is, `min-replicas-to-write` makes the primary refuse writes.
        cluster.wait(lambda: cluster.replication(cluster.node(primary))["min_slaves_good_slaves"] == 2, "two replicas")
        yield cluster
    finally:
        for node in [*sentinels, *data]:
            if node.process is not None and node.process.poll() is None:
                _stop(node.process)
