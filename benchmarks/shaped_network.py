#!/usr/bin/env python3
"""An S3 endpoint behind a shaped link: the benchmark's model of a remote object store.

``moto_server`` runs in the project's own network namespace ``aisp-bench``, reached over a veth pair
(``aisp-h`` 10.200.0.1/30 here, ``aisp-n`` 10.200.0.2/30 there). ``tc tbf`` limits the rate on both ends
(each end's egress). The kernel here has no ``netem``, so the latency is added in user space: a delay line
in the namespace (this file run as a script) forwards every chunk of every connection ``delay/2`` after it
arrived, in each direction, so each request/response round trip gains ``delay`` and throughput is left to
``tbf``. Its limits: TCP handshakes are not delayed, and TCP sees the short local round trip, so there is
no bandwidth-delay-product window effect. Needs root, ``ip`` and ``tc``; everything is removed on exit.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

NAMESPACE = "aisp-bench"
HOST_IF, NS_IF = "aisp-h", "aisp-n"
HOST_ADDR, NS_ADDR = "10.200.0.1", "10.200.0.2"


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def _tc_rate(dev: str, rate_mbit: float, netns: bool) -> None:
    burst = max(32 * 1024, int(rate_mbit * 1e6 / 8 / 250))  # at least one timer tick's worth of bytes
    cmd = ["tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate", f"{rate_mbit}mbit"]
    cmd += ["burst", str(burst), "latency", "50ms"]
    subprocess.run(["ip", "netns", "exec", NAMESPACE, *cmd] if netns else cmd, check=True, capture_output=True)


def _remove() -> None:
    _ip("link", "del", HOST_IF, check=False)  # deletes both ends of the pair
    _ip("netns", "del", NAMESPACE, check=False)


@contextlib.contextmanager
def link(rate_mbit: float) -> Iterator[list[str]]:
    """The namespace and its veth pair, ``rate_mbit`` each way; yields the command prefix that runs in it."""
    _remove()  # a leftover of an interrupted run of ours (these names are the project's own)
    try:
        _ip("netns", "add", NAMESPACE)
        _ip("link", "add", HOST_IF, "type", "veth", "peer", "name", NS_IF)
        _ip("link", "set", NS_IF, "netns", NAMESPACE)
        _ip("addr", "add", f"{HOST_ADDR}/30", "dev", HOST_IF)
        _ip("link", "set", HOST_IF, "up")
        _ip("-n", NAMESPACE, "addr", "add", f"{NS_ADDR}/30", "dev", NS_IF)
        _ip("-n", NAMESPACE, "link", "set", NS_IF, "up")
        _ip("-n", NAMESPACE, "link", "set", "lo", "up")
        if rate_mbit:
            _tc_rate(HOST_IF, rate_mbit, netns=False)
            _tc_rate(NS_IF, rate_mbit, netns=True)
        yield ["ip", "netns", "exec", NAMESPACE]
    except subprocess.CalledProcessError as e:
        raise SystemExit(f"shaped network: {' '.join(e.cmd)} failed: {e.stderr.strip()}") from None
    finally:
        _remove()


@contextlib.contextmanager
def shaped_moto_s3(workdir, *, rate_mbit: float, delay_ms: float, **s3) -> Iterator:
    """:func:`harness.moto_s3` in the namespace behind the shaped link, with ``delay_ms`` added per round trip
    by the delay line; the handle's endpoint is the delay line's address."""
    import harness

    with link(rate_mbit) as netns, harness.moto_s3(workdir, host=NS_ADDR, wrap=netns, **s3) as moto:
        if not delay_ms:
            yield moto
            return
        port = harness.free_port()
        log_path = Path(workdir) / "delay-line.log"
        argv = [*netns, sys.executable, __file__, f"{NS_ADDR}:{port}", f"{NS_ADDR}:{moto.port}", str(delay_ms)]
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            harness._wait_port(port, proc, "delay line", log_path, 15, NS_ADDR)
            yield harness.S3Handle(port, moto.bucket, moto.access_key, moto.secret_key, log_path, proc, NS_ADDR)
        finally:
            harness._stop(proc)


# --------------------------------------------------------------------------------------------------
# the delay line (runs in the namespace)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
    """Forward each chunk ``delay`` seconds after it arrived (chunks keep their order and spacing)."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def receive() -> None:
        while chunk := await reader.read(256 * 1024):
            queue.put_nowait((loop.time() + delay, chunk))
        queue.put_nowait((loop.time() + delay, b""))

    receiving = asyncio.ensure_future(receive())
    try:
        while True:
            due, chunk = await queue.get()
            await asyncio.sleep(max(0.0, due - loop.time()))
            if not chunk:
                break
            writer.write(chunk)
            await writer.drain()
    finally:
        receiving.cancel()
        with contextlib.suppress(Exception):
            writer.close()


async def _serve(listen: str, target: str, delay_ms: float) -> None:
    host, port = listen.rsplit(":", 1)
    to_host, to_port = target.rsplit(":", 1)
    half = delay_ms / 2000

    async def connection(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        server_r, server_w = await asyncio.open_connection(to_host, int(to_port))
        await asyncio.gather(_pipe(client_r, server_w, half), _pipe(server_r, client_w, half), return_exceptions=True)

    server = await asyncio.start_server(connection, host, int(port))
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="TCP delay line: LISTEN -> TARGET, DELAY_MS added per round trip")
    ap.add_argument("listen", help="host:port to listen on")
    ap.add_argument("target", help="host:port to forward to")
    ap.add_argument("delay_ms", type=float)
    args = ap.parse_args(argv)
    asyncio.run(_serve(args.listen, args.target, args.delay_ms))


if __name__ == "__main__":
    main()
