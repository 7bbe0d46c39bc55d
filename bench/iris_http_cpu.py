"""CPU per call of the HTTP under keeper's iris client: httpx as keeper used it first,
keeper's aiohttp poster (runtime/watch/iris_http.py), and keeper's own keep-alive poster
(runtime/watch/http1_post.py, the client's default now), side by side on one local server.

    python bench/iris_http_cpu.py                  # 3,000 calls, 0 and 40 slow ones in flight
    python bench/iris_http_cpu.py --calls 500      # a quick look

A job watch's worker holds many connections at once (the execs and thread dumps of every
watch that is checking), so each client is measured three ways: ten calls at a time with no
other call in flight; the same with `--slow` calls of 0.3 s in flight all along, as those
are; and one call at a time, 1 ms apart, as a check's reads come (the pause's own CPU,
measured alone, taken off). The server is an aiohttp app in a process of its own, answering a
small JSON body like a ListTasks; the figure is this process's CPU (user + system) over the
calls, divided by their number, the slow calls' share included. Figures are printed, never
asserted; raw figures go to bench/results/iris_http_cpu-<UTC time>.json (bench/run_record.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = str(Path(__file__).resolve().parents[1])
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import httpx  # noqa: E402
from run_record import Run  # noqa: E402

from keeper.runtime.watch.http1_post import Http1Post  # noqa: E402
from keeper.runtime.watch.iris_http import AiohttpPost  # noqa: E402

SERVER = """
import asyncio, sys
from aiohttp import web

async def answer(request):
    await request.read()
    if request.path == "/slow":
        await asyncio.sleep(0.3)
    return web.json_response({"tasks": [{"taskId": f"/a/b/{i}", "state": "TASK_STATE_RUNNING"}
                                        for i in range(8)]})

app = web.Application()
app.router.add_post("/{tail:.*}", answer)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None)
"""

BODY = b'{"jobId":"/alice/tokenize/workers"}'
HEADERS = {"Content-Type": "application/json", "Connect-Protocol-Version": "1"}
Call = Callable[[str], Awaitable[Any]]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system


async def until_listening(port: int) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError("the server did not start within 30 s") from None
            await asyncio.sleep(0.1)
            continue
        writer.close()
        return


PAUSE_S = 0.001  # between two calls made one at a time


async def pause_cpu(calls: int) -> float:
    """CPU seconds of `calls` pauses alone, to take off the one-at-a-time figure."""
    cpu = cpu_seconds()
    for _ in range(calls):
        await asyncio.sleep(PAUSE_S)
    return cpu_seconds() - cpu


async def measure(call: Call, calls: int, slow: int) -> dict[str, float]:
    """slow < 0: one call at a time, PAUSE_S apart, nothing else in flight."""
    if slow < 0:
        await call("/fast")
        started, cpu = time.monotonic(), cpu_seconds()
        for _ in range(calls):
            json.loads(await call("/fast"))
            await asyncio.sleep(PAUSE_S)
        used, elapsed = cpu_seconds() - cpu, time.monotonic() - started
        used -= await pause_cpu(calls)
        return {"cpu_ms_per_call": round(used / calls * 1000, 3), "wall_s": round(elapsed, 2)}
    stop = False

    async def keep_one_slow() -> None:
        while not stop:
            json.loads(await call("/slow"))

    slows = [asyncio.create_task(keep_one_slow()) for _ in range(slow)]
    await asyncio.sleep(1.0)  # every slow call in flight, the pool at its size
    started, cpu = time.monotonic(), cpu_seconds()
    for _ in range(calls // 10):
        for body in await asyncio.gather(*(call("/fast") for _ in range(10))):
            json.loads(body)
    used, elapsed = cpu_seconds() - cpu, time.monotonic() - started
    stop = True
    await asyncio.gather(*slows)
    return {"cpu_ms_per_call": round(used / calls * 1000, 3), "wall_s": round(elapsed, 2)}


async def httpx_client(url: str, calls: int, slow: int) -> dict[str, float]:
    async with httpx.AsyncClient(follow_redirects=False) as client:

        async def call(path: str) -> bytes:
            answer = await client.post(url + path, content=BODY, headers=HEADERS, timeout=10)
            return answer.content

        return await measure(call, calls, slow)


def keepers(make: Callable[[], AiohttpPost | Http1Post]) -> Callable[..., Any]:
    """The figures of one of keeper's posters."""

    async def figures(url: str, calls: int, slow: int) -> dict[str, float]:
        post = make()
        try:

            async def call(path: str) -> bytes:
                return (await post(url + path, BODY, HEADERS, 10)).body

            return await measure(call, calls, slow)
        finally:
            await post.aclose()

    return figures


HTTPX, AIOHTTP, HTTP1 = "httpx", "aiohttp (AiohttpPost)", "keeper's Http1Post"
CLIENTS = {HTTPX: httpx_client, AIOHTTP: keepers(AiohttpPost), HTTP1: keepers(Http1Post)}
ONE_AT_A_TIME = -1


def pattern(slow: int) -> str:
    if slow == ONE_AT_A_TIME:
        return "one at a time, 1 ms apart"
    return f"10 at once, {slow:2} slow in flight"


async def main(args: argparse.Namespace) -> int:
    run = Run("iris_http_cpu")
    port = free_port()
    server = await asyncio.create_subprocess_exec(sys.executable, "-c", SERVER, str(port))
    rows: list[dict[str, Any]] = []
    try:
        await until_listening(port)
        url = f"http://127.0.0.1:{port}"
        for slow in (0, args.slow, ONE_AT_A_TIME):
            for name, client in CLIENTS.items():
                figure = await client(url, args.calls, slow)
                rows.append({"client": name, "slow_in_flight": slow, **figure})
                print(
                    f"  {name:24} {pattern(slow):30} "
                    f"{figure['cpu_ms_per_call']:.3f} ms CPU a call  ({figure['wall_s']} s)",
                    flush=True,
                )
    finally:
        server.terminate()
        await asyncio.wait_for(server.wait(), 10)
    by = {(r["client"], r["slow_in_flight"]): r["cpu_ms_per_call"] for r in rows}
    for slow in (0, args.slow, ONE_AT_A_TIME):
        httpx_ratio = by[(HTTPX, slow)] / by[(AIOHTTP, slow)]
        http1_ratio = by[(AIOHTTP, slow)] / by[(HTTP1, slow)]
        print(
            f"  {pattern(slow)}: httpx / aiohttp {httpx_ratio:.2f}, "
            f"aiohttp / Http1Post {http1_ratio:.2f}"
        )
    path = run.write({"calls": args.calls, "rows": rows})
    print(f"raw results: {path}")
    return 0


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=3000, help="measured calls per client (3000)")
    parser.add_argument("--slow", type=int, default=40, help="slow calls kept in flight (40)")
    return parser.parse_args()


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse_args())))
