#!/usr/bin/env python3
"""Holds many idle keep-alive clients on a proxy, for bench/run.sh (standard library only).

    idle.py --port 19103 --body chat.json --clients 10000 --ready READY_FILE [--auth KEY]

Opens --clients connections to 127.0.0.1:PORT (at most --parallel opening at once), sends one
POST /v1/chat/completions with the body on each and reads its whole answer (Content-Length or
chunked), keeping the connection open. When every client is idle it writes one JSON line to
READY_FILE (clients held, failures, seconds taken) and then holds the connections until it is
sent SIGTERM or SIGINT, when it closes them and exits. The proxy's resident memory is read by the
caller while they are held.
"""

import argparse
import asyncio
import json
import os
import signal
import time


def request_bytes(body, auth):
    lines = [
        "POST /v1/chat/completions HTTP/1.1",
        "Host: 127.0.0.1",
        "Content-Type: application/json",
        f"Content-Length: {len(body)}",
    ]
    if auth:
        lines.append(f"Authorization: Bearer {auth}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


async def read_answer(reader):
    """Reads one HTTP/1.1 answer; returns its status code."""
    head = await reader.readuntil(b"\r\n\r\n")
    status_line, *fields = head.decode("latin-1").split("\r\n")
    status = int(status_line.split(" ", 2)[1])
    headers = {}
    for f in fields:
        if ":" in f:
            name, value = f.split(":", 1)
            headers[name.strip().lower()] = value.strip()
    if "content-length" in headers:
        await reader.readexactly(int(headers["content-length"]))
    elif "chunked" in headers.get("transfer-encoding", "").lower():
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            await reader.readexactly(size + 2)
            if size == 0:
                break
    return status


async def one_client(port, request, gate):
    async with gate:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(request)
        await writer.drain()
        status = await read_answer(reader)
        if status != 200:
            writer.close()
            raise RuntimeError(f"status {status}")
        return writer


async def hold(args):
    with open(args.body, "rb") as f:
        request = request_bytes(f.read(), args.auth)
    gate = asyncio.Semaphore(args.parallel)
    start = time.monotonic()
    results = await asyncio.gather(
        *(one_client(args.port, request, gate) for _ in range(args.clients)), return_exceptions=True
    )
    held = [r for r in results if not isinstance(r, BaseException)]
    failures = [r for r in results if isinstance(r, BaseException)]
    report = {
        "clients": len(held),
        "failed": len(failures),
        "first_failure": repr(failures[0]) if failures else None,
        "open_seconds": round(time.monotonic() - start, 3),
    }
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    with open(args.ready + ".tmp", "w") as f:
        f.write(json.dumps(report) + "\n")
    # Renamed into place, so the caller never reads a half-written line.
    os.replace(args.ready + ".tmp", args.ready)
    await stop.wait()
    for w in held:
        w.close()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--body", required=True)
    p.add_argument("--clients", type=int, default=10_000)
    p.add_argument("--parallel", type=int, default=200)
    p.add_argument("--ready", required=True)
    p.add_argument("--auth", default="")
    asyncio.run(hold(p.parse_args()))


if __name__ == "__main__":
    main()
