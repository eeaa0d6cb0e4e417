"""A loopback TCP forwarder, run as a sidecar next to the operator and the consumers in e2e.

The operator and the pods accept the development emulators only on a loopback host
(operator/eventhub_balancer/contracts/endpoints.py), while in a cluster the emulators run on
the CI machine. This sidecar listens on 127.0.0.1 inside the pod and forwards each port to that
machine, so the connection strings stay loopback ones. Standard library only: it runs in the
product's images with ``python forwarding.py LOCAL_PORT=HOST:PORT ...``.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]

#: Bytes copied per read: small frames pass at once, large blobs in a few reads.
CHUNK = 65536


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        writer.close()


def forwarder(host: str, port: int) -> Handler:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(host, port)
        except OSError as e:
            print(f"cannot reach {host}:{port}: {e}", file=sys.stderr, flush=True)
            writer.close()
            return
        await asyncio.gather(pipe(reader, upstream_writer), pipe(upstream_reader, writer))

    return handle


def parse(rule: str) -> tuple[int, str, int]:
    """``LOCAL_PORT=HOST:PORT``; anything else stops with a message saying what to write."""
    local, sep, target = rule.partition("=")
    host, colon, port = target.rpartition(":")
    if not sep or not colon or not host or not local.isdigit() or not port.isdigit():
        sys.exit(f"forwarding: {rule!r} is not LOCAL_PORT=HOST:PORT (e.g. 5672=172.18.0.1:5672)")
    return int(local), host, int(port)


async def main(rules: list[str]) -> None:
    if not rules:
        sys.exit("forwarding: give at least one LOCAL_PORT=HOST:PORT")
    servers = []
    for local, host, port in map(parse, rules):
        handle = forwarder(host, port)
        servers.append(await asyncio.start_server(handle, "127.0.0.1", local))
        print(f"127.0.0.1:{local} -> {host}:{port}", flush=True)
    await asyncio.gather(*(s.serve_forever() for s in servers))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
