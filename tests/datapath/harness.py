"""Run the platform's generated data-path configuration on the real binaries, on loopback.

The platform generates three things that end up in front of real programs on a node:

* ``redis_conf`` -- the redis.conf text MetadataEngine mounts into the Redis StatefulSet;
* ``volume_secret`` -- the JuiceFS CSI volume Secret (``name``, ``metaurl``, ``storage``, ``bucket``,
  ``access-key``, ``secret-key``, optionally ``format-options``);
* ``mount_options`` -- the cold tier StorageClass ``mountOptions`` list.

This module feeds them, unchanged except for what a loopback test must change, to ``redis-server``,
``moto_server`` (the S3 endpoint), ``juicefs format`` and ``juicefs mount`` (FUSE):

* redis.conf: ``bind`` -> 127.0.0.1, ``port`` -> a free port, ``dir`` -> a temp dir; every other line is
  kept byte for byte.
* Secret: only the host:port of ``metaurl`` and of ``bucket`` are rewritten to the loopback servers
  (``https`` becomes ``http`` because moto serves plain HTTP, and an AWS virtual-hosted bucket URL
  becomes the path-style URL of the same bucket).
* mountOptions: ``cache-dir`` is rewritten to a temp dir; every other entry is handed to the real
  client the way the JuiceFS CSI mount pod does (see :func:`mount_options_to_args`). Whatever the real
  client rejects fails the mount with :class:`MountError`, which carries the client's own log lines.

Everything listens on 127.0.0.1 only and is stopped by the context managers' cleanup.
This module does not import pytest; ``conftest.py`` turns it into fixtures.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

LOOPBACK = "127.0.0.1"

# Flags the harness itself adds to every `juicefs mount`; they are not part of the platform's output.
#   --no-usage-report   never phone home
#   --metrics           the metrics listener on loopback, on a free port (CSI uses 0.0.0.0:9567)
#   --log               the background client's log, read back on failure
#   --backup-meta=0     no hourly metadata backup objects during a short test
HARNESS_MOUNT_FLAGS = ("no-usage-report", "metrics", "log", "backup-meta", "background")


class HarnessError(RuntimeError):
    """A data-path program could not be started or did not behave."""


class MountError(HarnessError):
    """`juicefs mount` failed; the message carries the command and the client's log tail."""


class FuseUnavailable(HarnessError):
    """FUSE itself cannot be used on this machine (not a problem with the generated options)."""


# --------------------------------------------------------------------------------------------------
# binaries and small helpers


ENGINES_BIN = Path(os.environ.get("AI_STORAGE_ENGINES", "/opt/ai-storage-platform/engines")) / "bin"
"""Where ``scripts/metadata-engines`` puts Redis 8 and Valkey 8.1 (the majors the platform ships): the only place
either is taken from."""
FLAVORS = ("redis", "valkey")
ENGINE_PROGRAMS = tuple(f"{flavor}-{mode}" for flavor in FLAVORS for mode in ("server", "sentinel", "cli"))


def find_binary(name: str) -> str:
    """Locate ``name``: Redis and Valkey in :data:`ENGINES_BIN` only, anything else next to the running
    interpreter (the venv's bin) or on PATH."""
    if name in ENGINE_PROGRAMS:
        program = ENGINES_BIN / name
        if not os.access(program, os.X_OK):
            raise HarnessError(f"{name} not found in {ENGINES_BIN} (scripts/metadata-engines installs it there)")
        return str(program)
    candidate = Path(sys.executable).parent / name
    if candidate.exists() and os.access(candidate, os.X_OK):
        return str(candidate)
    found = shutil.which(name)
    if not found:
        raise HarnessError(f"{name} not found next to {sys.executable} nor on PATH")
    return found


VERSIONED_PROGRAMS = {
    "redis-server": r"Redis server v=(\S+)",
    "redis-sentinel": r"Redis server v=(\S+)",
    "valkey-server": r"Valkey server v=(\S+)",
    "valkey-sentinel": r"Valkey server v=(\S+)",
    "prometheus-redis-exporter": r"Redis Metrics Exporter v?([0-9.]+[0-9])",
    "juicefs": r"juicefs version ([0-9.]+[0-9])",
    "prometheus": r"prometheus, version ([0-9.]+[0-9])",
}
"""The real programs whose versions the suite records, and how each prints its version (``--version``)."""


def program_versions() -> dict[str, str]:
    """``{program: upstream version}`` of the real programs this machine runs (missing ones left out)."""
    found = {}
    for name, pattern in VERSIONED_PROGRAMS.items():
        try:
            run = subprocess.run([find_binary(name), "--version"], capture_output=True, text=True, timeout=30)
        except HarnessError:
            continue
        m = re.search(pattern, run.stdout + run.stderr)
        found[name] = m.group(1) if m else f"unknown ({(run.stdout + run.stderr).strip()[:80]})"
    return found


def free_port() -> int:
    """A TCP port that is free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def _wait_port(port: int, proc: subprocess.Popen, what: str, log: Path, timeout: float, host: str = LOOPBACK) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise HarnessError(f"{what} exited with {proc.returncode}:\n{_tail(log)}")
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.settimeout(0.2)
            if s.connect_ex((host, port)) == 0:
                return
        time.sleep(0.05)
    raise HarnessError(f"{what} did not listen on {host}:{port} within {timeout}s:\n{_tail(log)}")


def _tail(path: Path, lines: int = 25) -> str:
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return f"(no log at {path})"
    return "\n".join(text.splitlines()[-lines:])


def _stop(proc: subprocess.Popen, timeout: float = 10) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=timeout)


def subprocess_env(**extra: str) -> dict[str, str]:
    """Environment for child programs: no proxy may divert loopback traffic."""
    env = {k: v for k, v in os.environ.items() if k.lower() not in ("http_proxy", "https_proxy", "all_proxy")}
    env["NO_PROXY"] = env["no_proxy"] = f"{LOOPBACK},localhost"
    env.update(extra)
    return env


def key_files(directory: Path, access_key: str, secret_key: str) -> Path:
    """Object-store keys as a Secret mounted into a pod: one file per key, in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "access-key").write_text(access_key)
    (directory / "secret-key").write_text(secret_key)
    return directory


def run_generated_script(script: str, home: Path, **env: str) -> subprocess.CompletedProcess:
    """A script the platform generates (a CronJob's command), under /bin/sh with the pinned juicefs client on
    PATH as in its image, the given environment on top of this one's."""
    path = f"{Path(find_binary('juicefs')).parent}:{os.environ['PATH']}"
    return subprocess.run(
        ["/bin/sh", "-c", script],
        env=subprocess_env(**{**env, "HOME": str(home), "PATH": path}),
        capture_output=True,
        text=True,
        timeout=300,
    )


# --------------------------------------------------------------------------------------------------
# Redis


_REWRITTEN_REDIS_DIRECTIVES = ("bind", "port", "dir")
# Directives that would make a loopback run escape its temp dir or lose its process; a conf containing
# them needs this harness extended, so it is refused rather than silently edited.
_REFUSED_REDIS_DIRECTIVES = {
    "daemonize": lambda v: v.lower() == "yes",
    "include": lambda v: True,
    "unixsocket": lambda v: True,
    "logfile": lambda v: v.strip('"') not in ("", '""'),
    "pidfile": lambda v: True,
    "tls-port": lambda v: v != "0",
}


def _directive(line: str) -> tuple[str, str] | None:
    stripped = line.strip()
    if not stripped or stripped.startswith("#"):
        return None
    name, _, value = stripped.partition(" ")
    return name.lower(), value.strip()


def redis_password(redis_conf: str) -> str | None:
    """The ``requirepass`` value of a redis.conf (last one wins, like Redis), unquoted."""
    password = None
    for line in redis_conf.splitlines():
        d = _directive(line)
        if d and d[0] == "requirepass":
            value = d[1]
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
                value = value[1:-1]
            password = value
    return password


def rewrite_redis_conf(redis_conf: str, *, port: int, data_dir: str | os.PathLike) -> str:
    """Point a generated redis.conf at loopback: bind, port and dir change, every other line stays.

    A directive that is missing is appended (a conf without ``bind`` would listen on every interface).
    """
    out: list[str] = []
    seen: set[str] = set()
    values = {"bind": LOOPBACK, "port": str(port), "dir": str(data_dir)}
    for line in redis_conf.splitlines(keepends=True):
        d = _directive(line)
        if d and d[0] in _REFUSED_REDIS_DIRECTIVES and _REFUSED_REDIS_DIRECTIVES[d[0]](d[1]):
            raise HarnessError(f"redis.conf line {line.strip()!r} cannot run in a loopback test as generated")
        if d and d[0] in _REWRITTEN_REDIS_DIRECTIVES:
            ending = line[len(line.rstrip("\r\n")) :] or "\n"
            out.append(f"{d[0]} {values[d[0]]}{ending}")
            seen.add(d[0])
        else:
            out.append(line)
    if out and not out[-1].endswith("\n"):
        out[-1] += "\n"
    for name in _REWRITTEN_REDIS_DIRECTIVES:
        if name not in seen:
            out.append(f"{name} {values[name]}\n")
    return "".join(out)


def redis_client(port: int, *, db: int = 0, password: str | None = None):
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    return redis.Redis(
        host=LOOPBACK, port=port, db=db, password=password, socket_timeout=5, retry=Retry(NoBackoff(), 0)
    )


@dataclasses.dataclass
class RedisHandle:
    port: int
    password: str | None
    conf_path: Path
    data_dir: Path
    log_path: Path
    process: subprocess.Popen

    @property
    def hostport(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    def client(self, db: int = 0, authenticated: bool = True, password: str | None = None):
        """A redis-py client (no retries: a refused AUTH must surface at once)."""
        return redis_client(self.port, db=db, password=(password or self.password) if authenticated else None)


@contextlib.contextmanager
def redis_server(
    redis_conf: str, workdir: str | os.PathLike, *, timeout: float = 20, program: str = "redis-server"
) -> Iterator[RedisHandle]:
    """Start the real ``program`` (``redis-server`` or ``valkey-server``) on the rewritten conf; wait until an
    AUTHed PING answers."""
    import redis

    workdir = Path(workdir)
    data_dir = workdir / "redis-data"
    data_dir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    conf_path = workdir / "redis.conf"
    conf_path.write_text(rewrite_redis_conf(redis_conf, port=port, data_dir=data_dir))
    log_path = workdir / "redis.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [find_binary(program), str(conf_path)],
            cwd=data_dir,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=subprocess_env(),
            start_new_session=True,
        )
    handle = RedisHandle(port, redis_password(redis_conf), conf_path, data_dir, log_path, proc)
    try:
        _wait_port(port, proc, program, log_path, timeout)
        deadline = time.monotonic() + timeout
        while True:
            try:
                if handle.client().ping():
                    break
            except redis.exceptions.BusyLoadingError:
                pass
            except redis.exceptions.ConnectionError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise
            if time.monotonic() > deadline:
                raise HarnessError(f"{program} did not answer PING within {timeout}s:\n{_tail(log_path)}")
            time.sleep(0.05)
        yield handle
    finally:
        _stop(proc)


# --------------------------------------------------------------------------------------------------
# S3 (moto)


@dataclasses.dataclass
class S3Handle:
    port: int
    bucket: str
    access_key: str
    secret_key: str
    log_path: Path
    process: subprocess.Popen
    host: str = LOOPBACK

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    def client(self, connections: int = 10):
        """A boto3 S3 client of the endpoint, pooling up to ``connections`` connections (botocore's default 10)."""
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name="us-east-1",
            config=Config(max_pool_connections=connections),
        )

    def object_bytes(self, prefix: str = "") -> int:
        """Total size of the bucket's objects under ``prefix``."""
        total = 0
        for page in self.client().get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
            total += sum(o["Size"] for o in page.get("Contents", []))
        return total


@contextlib.contextmanager
def moto_s3(
    workdir: str | os.PathLike,
    *,
    bucket: str,
    access_key: str,
    secret_key: str,
    timeout: float = 30,
    host: str = LOOPBACK,
    wrap: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
) -> Iterator[S3Handle]:
    """Start ``moto_server`` on ``host`` (127.0.0.1) and create ``bucket`` with boto3. ``wrap`` prefixes the
    command (``ip netns exec NS`` runs it in a network namespace); ``env`` adds to its environment (e.g.
    ``INITIAL_NO_AUTH_ACTION_COUNT``: moto enforces IAM policies after that many requests)."""
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    log_path = workdir / "moto.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [*wrap, find_binary("moto_server"), "-H", host, "-p", str(port)],
            cwd=workdir,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=subprocess_env(**(env or {})),
            start_new_session=True,
        )
    handle = S3Handle(port, bucket, access_key, secret_key, log_path, proc, host)
    try:
        _wait_port(port, proc, "moto_server", log_path, timeout, host)
        handle.client().create_bucket(Bucket=bucket)
        yield handle
    finally:
        _stop(proc)


# --------------------------------------------------------------------------------------------------
# the volume Secret


SECRET_KEYS = ("name", "metaurl", "storage", "bucket", "access-key", "secret-key")


def _aws_virtual_hosted_bucket(host: str) -> str | None:
    m = re.match(r"^(?P<bucket>[^.]+)\.s3[.-]", host)
    return m.group("bucket") if m and host.endswith("amazonaws.com") else None


def bucket_name(bucket_url: str) -> str:
    """The bucket's name in a JuiceFS ``bucket`` URL (path style, or an AWS virtual-hosted URL)."""
    parsed = urllib.parse.urlsplit(bucket_url if "://" in bucket_url else f"http://{bucket_url}")
    virtual = _aws_virtual_hosted_bucket(parsed.hostname or "")
    if virtual:
        return virtual
    parts = [p for p in parsed.path.split("/") if p]
    if not parts:
        raise HarnessError(f"cannot tell the bucket name from bucket URL {bucket_url!r}")
    return parts[0]


def replace_hostport(url: str, hostport: str) -> str:
    parsed = urllib.parse.urlsplit(url)
    userinfo = parsed.netloc.rpartition("@")[0]
    netloc = f"{userinfo}@{hostport}" if userinfo else hostport
    return urllib.parse.urlunsplit(parsed._replace(netloc=netloc))


def rewrite_volume_secret(secret: Mapping[str, str], *, meta_hostport: str, s3_endpoint: str) -> dict[str, str]:
    """Return a copy of the Secret whose ``metaurl`` and ``bucket`` endpoints point at loopback.

    Only host:port change (plus ``https`` -> ``http`` and AWS virtual-hosted -> path style for the
    bucket, because moto serves plain path-style HTTP); password, database number, bucket name, keys
    and every other field are kept.
    """
    missing = [k for k in SECRET_KEYS if k not in secret]
    if missing:
        raise HarnessError(f"volume secret lacks {missing}; JuiceFS CSI needs {list(SECRET_KEYS)}")
    out = dict(secret)
    out["metaurl"] = replace_hostport(secret["metaurl"], meta_hostport)
    s3 = urllib.parse.urlsplit(s3_endpoint)
    bucket_url = secret["bucket"] if "://" in secret["bucket"] else f"http://{secret['bucket']}"
    parsed = urllib.parse.urlsplit(bucket_url)
    if _aws_virtual_hosted_bucket(parsed.hostname or ""):
        path = (
            f"/{bucket_name(bucket_url)}{parsed.path}"
            if parsed.path not in ("", "/")
            else f"/{bucket_name(bucket_url)}"
        )
        out["bucket"] = urllib.parse.urlunsplit(("http", s3.netloc, path, parsed.query, ""))
    else:
        out["bucket"] = urllib.parse.urlunsplit(("http", s3.netloc, parsed.path, parsed.query, ""))
    return out


def options_to_flags(options: Sequence[str]) -> list[str]:
    """``["trash-days=0", "hash-prefix"]`` -> ``["--trash-days=0", "--hash-prefix"]``."""
    flags = []
    for option in options:
        option = option.strip()
        if not option:
            continue
        if option.startswith("-"):
            raise HarnessError(f"option {option!r} must be given without leading dashes")
        flags.append(f"--{option}")
    return flags


def secret_format_options(secret: Mapping[str, str]) -> list[str]:
    """The Secret's optional ``format-options`` (comma separated, as JuiceFS CSI reads it)."""
    return [o.strip() for o in secret.get("format-options", "").split(",") if o.strip()]


def run_juicefs(
    args: Sequence[str], *, env: Mapping[str, str] | None = None, timeout: float = 120, check: bool = True
) -> subprocess.CompletedProcess:
    """Run ``juicefs --no-agent ARGS`` (no pprof listener), capture output, raise with it on failure."""
    cmd = [find_binary("juicefs"), "--no-agent", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=dict(env or subprocess_env()))
    if check and proc.returncode != 0:
        raise HarnessError(
            f"{_redact(' '.join(cmd))} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
    return proc


def _redact(text: str) -> str:
    return re.sub(r"(://[^:/@]*:)[^@]*@", r"\1****@", text)


def format_volume(secret: Mapping[str, str], *, format_options: Sequence[str] = (), timeout: float = 120) -> str:
    """``juicefs format`` with the Secret's fields (keys in the environment, not on the command line)."""
    args = ["format", "--storage", secret["storage"], "--bucket", secret["bucket"]]
    args += options_to_flags([*secret_format_options(secret), *format_options])
    args += [secret["metaurl"], secret["name"]]
    env = subprocess_env(ACCESS_KEY=secret["access-key"], SECRET_KEY=secret["secret-key"], **client_env(secret))
    return run_juicefs(args, env=env, timeout=timeout).stderr


def client_env(secret: Mapping[str, str]) -> dict[str, str]:
    """The Secret's optional ``envs`` (a JSON object): environment variables the JuiceFS CSI driver gives the
    client (``juicefs format`` and the mount pod), e.g. ``SENTINEL_PASSWORD``."""
    return dict(json.loads(secret["envs"])) if secret.get("envs") else {}


# --------------------------------------------------------------------------------------------------
# mount options


_FLAG_LINE = re.compile(r"^\s{2,}(?P<names>-{1,2}[\w-]+(?:,\s*-{1,2}[\w-]+)*)(?P<rest>.*)$")


def mount_flag_spec(juicefs: str | None = None) -> dict[str, bool]:
    """The installed client's ``juicefs mount`` flags (and global flags): name -> takes a value.

    Parsed from ``juicefs mount --help`` and ``juicefs --help`` of the binary that will run, so the
    client itself is the authority on what exists.
    """
    juicefs = juicefs or find_binary("juicefs")
    spec: dict[str, bool] = {}
    for args in (["mount", "--help"], ["--help"]):
        text = subprocess.run([juicefs, *args], capture_output=True, text=True, timeout=30).stdout
        for line in text.splitlines():
            m = _FLAG_LINE.match(line)
            if not m:
                continue
            rest = m.group("rest").strip()
            # "--cache-size value   size of ..." takes a value; "--writeback   upload ... (default: false)" is a switch
            takes_value = not re.search(r"\(default: (false|true)\)", rest)
            for name in re.findall(r"-{1,2}([\w-]+)", m.group("names")):
                if len(name) > 1:
                    spec[name] = takes_value
    if "cache-size" not in spec:
        raise HarnessError(f"could not read the mount flags from `{juicefs} mount --help`")
    return spec


@dataclasses.dataclass
class MountArgs:
    flags: list[str]
    fuse_options: list[str]
    cache_dirs: list[Path]

    def argv(self) -> list[str]:
        return [*self.flags, *(["-o", ",".join(self.fuse_options)] if self.fuse_options else [])]


def mount_options_to_args(
    options: Sequence[str], *, cache_root: str | os.PathLike, spec: Mapping[str, bool] | None = None
) -> MountArgs:
    """Turn a StorageClass ``mountOptions`` list into ``juicefs mount`` arguments, as CSI does.

    The JuiceFS CSI mount pod runs ``mount.juicefs META MOUNTPOINT -o <entries joined by ,>`` and the
    client turns each entry whose name is one of its own flags into ``--name[=value]`` and passes every
    other entry to FUSE (``-o``), which refuses options it does not know. Here the same split is done
    explicitly so the argv is visible; the real client and fusermount then accept or reject it.

    ``cache-dir`` is rewritten to directories under ``cache_root`` (one per ``:``-separated entry).
    Entries the harness sets itself (:data:`HARNESS_MOUNT_FLAGS`) are refused: the platform must not set
    ``metrics``/``log``/``background`` in a way the test would silently override.
    """
    spec = spec if spec is not None else mount_flag_spec()
    cache_root = Path(cache_root)
    flags: list[str] = []
    fuse: list[str] = []
    cache_dirs: list[Path] = []
    for entry in options:
        entry = entry.strip()
        if not entry:
            continue
        name, eq, value = entry.partition("=")
        name, value = name.strip(), value.strip()
        if name.startswith("-"):
            raise HarnessError(f"mount option {entry!r}: StorageClass mountOptions carry no leading dashes")
        if name in HARNESS_MOUNT_FLAGS:
            raise HarnessError(f"mount option {entry!r} is set by the harness; leave it out of the tier's options")
        if name == "cache-dir":
            if not eq or not value:
                raise HarnessError("mount option cache-dir needs a value")
            dirs = []
            for i, _ in enumerate(value.split(":")):
                d = cache_root / f"cache{i}"
                d.mkdir(parents=True, exist_ok=True)
                dirs.append(d)
            cache_dirs = dirs
            flags.append("--cache-dir=" + ":".join(str(d) for d in dirs))
        elif name in spec:
            if eq:
                flags.append(f"--{name}={value}")
            elif spec[name]:
                raise HarnessError(f"mount option {entry!r}: juicefs mount --{name} requires a value")
            else:
                flags.append(f"--{name}")
        else:
            fuse.append(entry)
    if not cache_dirs:
        # The client would default to /var/jfsCache; a test never writes there.
        d = cache_root / "cache0"
        d.mkdir(parents=True, exist_ok=True)
        cache_dirs = [d]
        flags.append(f"--cache-dir={d}")
    return MountArgs(flags, fuse, cache_dirs)


# --------------------------------------------------------------------------------------------------
# FUSE and juicefs mount


def fuse_unavailable_reason() -> str | None:
    """Why FUSE cannot work here (no /dev/fuse, no permission, no fusermount), or None."""
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse does not exist (no FUSE device in this container)"
    if not stat.S_ISCHR(os.stat("/dev/fuse").st_mode):
        return "/dev/fuse is not a character device"
    try:
        fd = os.open("/dev/fuse", os.O_RDWR)
        os.close(fd)
    except OSError as e:
        return f"/dev/fuse cannot be opened: {e}"
    if not (shutil.which("fusermount3") or shutil.which("fusermount")):
        return "neither fusermount3 nor fusermount is installed (apt-get install fuse3)"
    return None


_FUSE_FAILURE_HINTS = ("fusermount", "/dev/fuse", "fuse: ", "operation not permitted")


def is_mounted(path: str | os.PathLike) -> bool:
    target = os.path.realpath(path)
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == target for line in f)


def _fuse_connection(mountpoint: str | os.PathLike) -> str | None:
    """The FUSE connection id (the device minor) of a mount, from mountinfo (no stat: it could hang)."""
    target = os.path.realpath(mountpoint)
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            if fields[4] == target:
                return fields[2].split(":")[1]
    return None


def abort_fuse_connection(mountpoint: str | os.PathLike) -> bool:
    """Abort a mount's FUSE connection (fusectl), so nothing blocks on a dead or hung client.

    Every pending and future request on the mount then fails with ENOTCONN instead of waiting forever.
    """
    conn = _fuse_connection(mountpoint)
    if conn is None:
        return False
    ctl = Path("/sys/fs/fuse/connections")
    if not (ctl / conn).exists():
        subprocess.run(["mount", "-t", "fusectl", "fusectl", str(ctl)], capture_output=True, timeout=10)
    try:
        (ctl / conn / "abort").write_text("1\n")
        return True
    except OSError:
        return False


def _unmount(mountpoint: Path, timeout: float = 30) -> None:
    """Unmount, escalating: juicefs umount, umount --force, abort the FUSE connection + lazy unmount."""
    fusermount = shutil.which("fusermount3") or shutil.which("fusermount") or "fusermount3"
    steps = [
        lambda: run_juicefs(["umount", str(mountpoint)], timeout=timeout, check=False),
        lambda: run_juicefs(["umount", "--force", str(mountpoint)], timeout=timeout, check=False),
        lambda: (
            abort_fuse_connection(mountpoint),
            subprocess.run([fusermount, "-u", "-z", str(mountpoint)], capture_output=True, timeout=timeout),
        ),
    ]
    for step in steps:
        if not is_mounted(mountpoint):
            return
        with contextlib.suppress(subprocess.TimeoutExpired):
            step()
    if is_mounted(mountpoint):
        raise HarnessError(f"could not unmount {mountpoint}")


def _process_identity(pid: int) -> str | None:
    """The start time of a live (not zombie) process ``pid``, which tells it from a later process given the same
    PID; None once it has ended."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] in ("Z", "X") else fields[19]


def _wait_ended(processes: Mapping[int, str], timeout: float) -> dict[int, str]:
    """Wait up to ``timeout`` seconds for each process (PID -> start time) to end; the ones still running."""
    deadline = time.monotonic() + timeout
    while True:
        alive = {pid: start for pid, start in processes.items() if _process_identity(pid) == start}
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.05)


def _end_processes(pids: Sequence[int], timeout: float = 15) -> None:
    """Wait for ``pids`` to end by themselves within ``timeout``, then SIGKILL the rest and wait for them too;
    raise if one still runs. (Exiting processes lose their command line before they end, so a search by
    command line would miss them: the PIDs are taken before the unmount and followed to their end.)"""
    processes = {pid: start for pid in pids if (start := _process_identity(pid)) is not None}
    alive = _wait_ended(processes, timeout)
    for pid in alive:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    alive = _wait_ended(alive, timeout)
    if alive:
        raise HarnessError(f"juicefs processes {sorted(alive)} still run {2 * timeout:.0f}s after the unmount")


def _mount_pids(log_path: Path, log_offset: int = 0) -> list[int]:
    """Live juicefs processes of one mount: the PIDs its own log names (``juicefs[PID]``).

    (The client rewrites and truncates its process title, so the command line cannot tell mounts apart;
    each mount here has its own log file.)
    """
    try:
        text = Path(log_path).read_bytes()[log_offset:].decode(errors="replace")
    except OSError:
        return []
    pids = []
    for pid in sorted({int(p) for p in re.findall(r"juicefs\[(\d+)\]", text)}):
        try:
            args = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").split()
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if args and args[0].endswith(b"juicefs") and state != "Z":
            pids.append(pid)
    return pids


@dataclasses.dataclass
class MountHandle:
    mountpoint: Path
    cache_dirs: list[Path]
    argv: list[str]
    log_path: Path
    metrics_port: int
    fuse_options: list[str]
    log_offset: int = 0

    def pids(self) -> list[int]:
        """The live juicefs processes serving this mount (supervisor and FUSE server)."""
        return _mount_pids(self.log_path, self.log_offset)

    def metrics(self) -> dict[str, float]:
        """The client's Prometheus metrics (name{labels} -> value), read from its loopback listener."""
        with urllib.request.urlopen(f"http://{LOOPBACK}:{self.metrics_port}/metrics", timeout=5) as r:
            text = r.read().decode()
        out: dict[str, float] = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                key, _, value = line.rpartition(" ")
                try:
                    out[key] = float(value)
                except ValueError:
                    pass
        return out

    @property
    def bdi_read_ahead_path(self) -> Path:
        dev = os.stat(self.mountpoint).st_dev
        return Path(f"/sys/class/bdi/{os.major(dev)}:{os.minor(dev)}/read_ahead_kb")

    def run_post_start(self, command: Sequence[str], timeout: float = 150) -> str:
        """Run a mount pod's postStart command (the platform's mount pod patch) against this mount: the JuiceFS
        CSI driver replaces ``${MOUNT_POINT}`` in the patch with the mount point, and so does this."""
        argv = [part.replace("${MOUNT_POINT}", str(self.mountpoint)) for part in command]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0:
            raise HarnessError(f"postStart exited {proc.returncode}: {proc.stdout}{proc.stderr}")
        return proc.stdout

    def metric(self, name: str, **labels: str) -> float:
        """Sum of metric ``name`` over every series whose labels include ``labels``."""
        total = 0.0
        for key, value in self.metrics().items():
            metric, _, rest = key.partition("{")
            if metric == name and all(f'{k}="{v}"' in rest for k, v in labels.items()):
                total += value
        return total

    def object_get_bytes(self) -> float:
        """Bytes this client has downloaded from the object store so far."""
        return self.metric("juicefs_object_request_data_bytes", method="GET")

    def wait_cached(self, expected_bytes: int, timeout: float = 60) -> int:
        """Wait until the local cache holds ``expected_bytes`` of blocks (cache writes are asynchronous)."""
        deadline = time.monotonic() + timeout
        cached = self.cached_bytes()
        while cached < expected_bytes and time.monotonic() < deadline:
            time.sleep(0.05)
            cached = self.cached_bytes()
        return cached

    def cached_bytes(self) -> int:
        """Bytes of complete block files in the local cache directories (``<uuid>/raw/chunks``)."""
        total = 0
        for p in self.cache_block_files():
            with contextlib.suppress(FileNotFoundError):  # evicted or renamed meanwhile
                total += p.stat().st_size
        return total

    def cache_block_files(self) -> list[Path]:
        """Complete cached blocks (the client writes ``*.tmp`` first and renames when done)."""
        files = []
        for d in self.cache_dirs:
            files += [p for p in d.glob("*/raw/chunks/**/*") if not p.name.endswith(".tmp") and p.is_file()]
        return sorted(files)


@contextlib.contextmanager
def juicefs_mount(
    metaurl: str,
    mountpoint: str | os.PathLike,
    mount_options: Sequence[str],
    *,
    cache_root: str | os.PathLike,
    log_path: str | os.PathLike | None = None,
    spec: Mapping[str, bool] | None = None,
    timeout: float = 60,
    env: Mapping[str, str] | None = None,
) -> Iterator[MountHandle]:
    """``juicefs mount -d`` with the tier's options (cache-dir rewritten) and the client environment ``env``
    (the volume Secret's ``envs``); unmount on exit.

    Raises :class:`FuseUnavailable` when FUSE itself is missing and :class:`MountError` for anything
    else, with the command line and the tail of the client's log.
    """
    reason = fuse_unavailable_reason()
    if reason:
        raise FuseUnavailable(reason)
    mountpoint = Path(mountpoint)
    mountpoint.mkdir(parents=True, exist_ok=True)
    args = mount_options_to_args(mount_options, cache_root=cache_root, spec=spec)
    log_path = Path(log_path or Path(cache_root) / "juicefs-mount.log")
    metrics_port = free_port()
    argv = [
        find_binary("juicefs"),
        "--no-agent",
        "mount",
        "--background",
        "--no-usage-report",
        f"--metrics={LOOPBACK}:{metrics_port}",
        f"--log={log_path}",
        "--backup-meta=0",
        *args.argv(),
        metaurl,
        str(mountpoint),
    ]
    log_offset = log_path.stat().st_size if log_path.exists() else 0
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=subprocess_env(**(env or {})))
    handle = MountHandle(mountpoint, args.cache_dirs, argv, log_path, metrics_port, args.fuse_options, log_offset)
    try:
        if proc.returncode != 0 or not is_mounted(mountpoint):
            log = log_path.read_bytes()[log_offset:].decode(errors="replace") if log_path.exists() else ""
            detail = "\n".join((proc.stdout + proc.stderr + log).splitlines()[-30:])
            message = f"{_redact(' '.join(argv))}\nexited {proc.returncode}:\n{_redact(detail)}"
            only_fuse = not args.fuse_options and any(h in detail.lower() for h in _FUSE_FAILURE_HINTS)
            if only_fuse:
                key = [ln.strip() for ln in detail.splitlines() if "fusermount" in ln.lower() or "/dev/fuse" in ln]
                raise FuseUnavailable(
                    f"FUSE cannot mount here: {'; '.join(key[:2]) or detail[-300:]} (full log: {log_path})"
                )
            raise MountError(message)
        yield handle
    finally:
        pids = handle.pids()  # only processes this mount's own log names
        try:
            _unmount(mountpoint)
        finally:
            _end_processes(sorted({*pids, *handle.pids()}))


# --------------------------------------------------------------------------------------------------
# the whole stack


@dataclasses.dataclass
class Stack:
    workdir: Path
    redis: RedisHandle
    s3: S3Handle
    secret: dict[str, str]
    """The volume Secret with its endpoints rewritten to loopback (everything else as generated)."""
    format_log: str

    def mount(
        self, mount_options: Sequence[str], name: str = "mnt", **kw
    ) -> contextlib.AbstractContextManager[MountHandle]:
        """Mount the volume at ``workdir/name`` with its own cache root ``workdir/name-cache``."""
        return juicefs_mount(
            self.secret["metaurl"],
            self.workdir / name,
            mount_options,
            env=client_env(self.secret),
            cache_root=kw.pop("cache_root", self.workdir / f"{name}-cache"),
            log_path=kw.pop("log_path", self.workdir / f"{name}-juicefs.log"),
            **kw,
        )


@contextlib.contextmanager
def datapath_stack(
    redis_conf: str,
    volume_secret: Mapping[str, str],
    workdir: str | os.PathLike | None = None,
    *,
    format_options: Sequence[str] = (),
    object_store: Callable[..., contextlib.AbstractContextManager[S3Handle]] | None = None,
    server: str = "redis-server",
) -> Iterator[Stack]:
    """``server`` (redis-server or valkey-server, the generated conf) + moto S3 (bucket created) + ``juicefs
    format`` (generated Secret). ``object_store`` replaces :func:`moto_s3` (same arguments), e.g. with an S3
    behind a shaped link."""
    with contextlib.ExitStack() as stack:
        if workdir is None:
            workdir = stack.enter_context(tempfile.TemporaryDirectory(prefix="datapath-"))
        workdir = Path(workdir)
        workdir.mkdir(parents=True, exist_ok=True)
        redis = stack.enter_context(redis_server(redis_conf, workdir, program=server))
        s3 = stack.enter_context(
            (object_store or moto_s3)(
                workdir,
                bucket=bucket_name(volume_secret["bucket"]),
                access_key=volume_secret["access-key"],
                secret_key=volume_secret["secret-key"],
            )
        )
        secret = rewrite_volume_secret(volume_secret, meta_hostport=redis.hostport, s3_endpoint=s3.endpoint)
        format_log = format_volume(secret, format_options=format_options)
        yield Stack(workdir, redis, s3, secret, format_log)


# --------------------------------------------------------------------------------------------------
# page cache


def drop_page_cache() -> None:
    """``sync; echo 3 > /proc/sys/vm/drop_caches`` (root only); raises if the kernel refuses."""
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")
