"""The benchmark's shaped mode does what it claims: an S3 endpoint in the project's own network namespace, behind
a veth pair limited with tc tbf, with the delay line adding its latency to every request (see docs/datapath.md)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import shaped_network

KEYS = {"bucket": "shaped", "access_key": "shaped-access", "secret_key": "shaped-secret-key"}


def _run(argv: list[str]) -> str:
    return subprocess.run(argv, capture_output=True, text=True, check=True).stdout


def _get_seconds(client, key: str) -> float:
    t0 = time.perf_counter()
    client.get_object(Bucket=KEYS["bucket"], Key=key)["Body"].read()
    return time.perf_counter() - t0


def test_the_shaped_link_adds_the_delay_to_each_request_and_limits_the_rate(root, tmp_path):
    with shaped_network.shaped_moto_s3(tmp_path, rate_mbit=80, delay_ms=60, **KEYS) as s3:
        assert s3.endpoint.startswith(f"http://{shaped_network.NS_ADDR}:")
        client = s3.client()
        client.put_object(Bucket=KEYS["bucket"], Key="small", Body=b"x")
        client.put_object(Bucket=KEYS["bucket"], Key="large", Body=os.urandom(4 * 1024 * 1024))
        small = min(_get_seconds(client, "small") for _ in range(3))
        large = _get_seconds(client, "large")
    assert small >= 0.06  # one request/response round trip through the delay line
    assert large >= 4 * 1024 * 1024 * 8 / 80e6 * 0.9  # 4 MiB at 80 Mbit/s, within tbf's burst
    # Everything is gone afterwards: the namespace and both ends of the pair.
    assert shaped_network.NAMESPACE not in _run(["ip", "netns", "list"])
    assert shaped_network.HOST_IF not in _run(["ip", "-o", "link"])
