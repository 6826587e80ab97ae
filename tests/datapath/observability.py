"""The real monitoring programs on loopback: redis_exporter (Debian `prometheus-redis-exporter`) beside the
harness's redis-server, a stand-in training job that uses the training library (``training_job.py``), and
Prometheus scraping them and a JuiceFS mount with the platform's generated rules."""

from __future__ import annotations

import contextlib
import json
import select
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path

import yaml
from harness import LOOPBACK, HarnessError, _stop, _wait_port, find_binary, free_port, subprocess_env


def metric_names(text: str) -> set[str]:
    """The metric families in a Prometheus text exposition (from its ``# TYPE`` lines and sample names)."""
    names = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            names.add(line.split()[2])
        elif line and not line.startswith("#"):
            names.add(line.split("{")[0].split(" ")[0])
    return names


def samples(text: str) -> dict[str, float]:
    """The samples without labels of a Prometheus text exposition, by name."""
    found = {}
    for line in text.splitlines():
        if line and not line.startswith("#") and "{" not in line:
            name, value = line.split()[:2]
            found[name] = float(value)
    return found


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://{LOOPBACK}:{port}/metrics", timeout=10) as response:
        return response.read().decode()


@contextlib.contextmanager
def redis_exporter(redis_port: int, password_file: Path, workdir: Path) -> Iterator[int]:
    """redis_exporter scraping the Redis (or Sentinel) on ``redis_port``, its password from the generated
    password file (its ``redis://localhost:<port>`` key rewritten to the loopback address); yields its metrics
    port."""
    passwords = json.loads(password_file.read_text())
    local = {f"redis://{LOOPBACK}:{redis_port}": next(iter(passwords.values()))}
    rewritten = workdir / f"exporter-passwords-{redis_port}.json"
    rewritten.write_text(json.dumps(local))
    port = free_port()
    log = workdir / f"redis-exporter-{redis_port}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                find_binary("prometheus-redis-exporter"),
                f"-redis.addr=redis://{LOOPBACK}:{redis_port}",
                f"-redis.password-file={rewritten}",
                f"-web.listen-address={LOOPBACK}:{port}",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=subprocess_env(),
            start_new_session=True,
        )
    try:
        _wait_port(port, proc, "redis_exporter", log, 20)
        yield port
    finally:
        _stop(proc)


class TrainingJob:
    """The stand-in training job: its metrics port, and its phases run one at a time."""

    def __init__(self, proc: subprocess.Popen, port: int):
        self.proc, self.port = proc, port

    def run(self, *command: object, timeout: float = 120) -> None:
        """Run one phase (``read DIR DEPTH WORKERS SECONDS`` or ``checkpoint DIR``) and wait until it is done."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(" ".join(str(c) for c in command) + "\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)  # it answers one line per phase
        line = self.proc.stdout.readline() if ready else "nothing"
        if line != "done\n":
            raise HarnessError(f"training job phase {command} answered {line!r} (exit {self.proc.poll()})")


@contextlib.contextmanager
def training_job(workdir: Path) -> Iterator[TrainingJob]:
    """``training_job.py`` serving the training metrics on a free loopback port."""
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    log = workdir / "training-job.log"
    with open(log, "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("training_job.py"))],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env=subprocess_env(AI_STORAGE_METRICS_PORT=str(port)),
            start_new_session=True,
        )
    try:
        assert proc.stdout is not None
        if proc.stdout.readline() != "serving\n":
            raise HarnessError(f"training job did not start; see {log}")
        _wait_port(port, proc, "training job", log, 20)
        yield TrainingJob(proc, port)
    finally:
        _stop(proc)


class Prometheus:
    def __init__(self, port: int):
        self.port = port

    def query(self, expr: str) -> list[dict]:
        url = f"http://{LOOPBACK}:{self.port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        with urllib.request.urlopen(url, timeout=10) as response:
            body = json.load(response)
        if body["status"] != "success":
            raise HarnessError(f"query {expr!r} failed: {body}")
        return body["data"]["result"]

    def value(self, expr: str) -> float | None:
        """The single value of ``expr`` now, or None when it has no sample."""
        result = self.query(expr)
        return float(result[0]["value"][1]) if result else None

    def wait_targets_up(self, count: int, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if len([r for r in self.query("up == 1")]) >= count:
                return
            time.sleep(0.5)
        raise HarnessError(f"fewer than {count} targets up after {timeout}s: {self.query('up')}")


@contextlib.contextmanager
def prometheus(targets: Mapping[str, int], rule_groups: list[dict], workdir: Path) -> Iterator[Prometheus]:
    """Prometheus on loopback scraping ``targets`` (job -> port) every second, evaluating ``rule_groups`` every
    second; its data in ``workdir``."""
    workdir.mkdir(parents=True, exist_ok=True)
    rules = workdir / "rules.yml"
    rules.write_text(yaml.safe_dump({"groups": [{**g, "interval": "1s"} for g in rule_groups]}))
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(rules)],
        "scrape_configs": [
            {"job_name": job, "static_configs": [{"targets": [f"{LOOPBACK}:{port}"]}]} for job, port in targets.items()
        ],
    }
    (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    log = workdir / "prometheus.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                find_binary("prometheus"),
                f"--config.file={workdir / 'prometheus.yml'}",
                f"--storage.tsdb.path={workdir / 'data'}",
                f"--web.listen-address={LOOPBACK}:{port}",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=subprocess_env(),
            start_new_session=True,
        )
    try:
        _wait_port(port, proc, "prometheus", log, 30)
        _wait_ready(f"http://{LOOPBACK}:{port}/-/ready", proc, log, 60)
        yield Prometheus(port)
    finally:
        _stop(proc)


def _wait_ready(url: str, proc: subprocess.Popen, log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise HarnessError(f"prometheus exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise HarnessError(f"{url} not ready within {timeout}s; see {log}")
