"""What MCP adds to a request: ``select_context`` in process, through the SDK's in-memory client, over
stdio and over streamable HTTP (127.0.0.1), in one run; and the tool-definition tokens a host sends.

    python -m benchmarks.speed.mcp_latency [--messages 100]

The bundled example agent (20 rules and references, 31 tools); messages are 1-3 docstring sentences
(``benchmarks.workloads``). Each path runs the same messages after 5 warm-up calls, each message in a
fresh session (so the history does not grow) and embedded afresh (the query cache is cleared between
paths); p50 / p99 in ms. The server processes are started with
``contextsieve serve AGENT --offline`` and share this machine's model and embedding caches.

Tokens: the tool definitions (``{"name", "description", "input_schema"}`` as JSON, counted with the
MiniLM tokenizer, a proxy for an LLM's) of all the agent's tools against those ``select_context``
offers per message (median over the messages).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from benchmarks.common import p50_p99, timed
from benchmarks.speed.request_latency import messages as make_messages
from contextsieve import Embedder
from contextsieve.agent.agentfile import example_agent_path
from contextsieve.engine import Engine
from contextsieve.mcp_server.server import build_server
from contextsieve.models.cpu import cpu_summary
from contextsieve.session.assembly import tool_definition


async def timed_calls(call: Callable[[str], Awaitable[Any]], msgs: list[str]) -> list[float]:
    for m in msgs[:5]:
        await call(m)
    out = []
    for m in msgs:
        t = time.perf_counter()
        await call(m)
        out.append(time.perf_counter() - t)
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=100)
    args = ap.parse_args(argv)
    from mcp import Client, StdioServerParameters
    from mcp.client.streamable_http import streamable_http_client

    for name in ("httpx", "httpx2"):  # the SDK 2.x client speaks httpx2
        logging.getLogger(name).setLevel(logging.WARNING)
    msgs = make_messages(args.messages)
    emb = Embedder()
    engine = Engine.from_file(example_agent_path(), embedder=emb)
    engine.index()
    rows: dict[str, list[float]] = {}
    for m in msgs[:5]:
        engine.select(m)
    rows["in process (Engine.select)"] = [timed(lambda m=m: engine.select(m)) for m in msgs]

    async def via(client: Any) -> list[float]:
        engine.store.clear_query_cache()  # every path embeds each message afresh
        async with client as c:

            async def call(m: str) -> Any:
                r = await c.call_tool("select_context", {"message": m})
                assert not r.is_error
                return r

            return await timed_calls(call, msgs)

    rows["MCP, in-memory client"] = anyio.run(via, Client(build_server(engine)))
    cmd = [sys.executable, "-m", "contextsieve", "serve", str(example_agent_path()), "--offline"]
    rows["MCP over stdio"] = anyio.run(
        via, Client(StdioServerParameters(command=cmd[0], args=cmd[1:], env=dict(os.environ)))
    )
    port = free_port()
    proc = subprocess.Popen([*cmd, "--transport", "http", "--port", str(port)], stderr=subprocess.DEVNULL)
    try:
        for _ in range(300):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                time.sleep(0.1)
        rows["MCP over HTTP (127.0.0.1)"] = anyio.run(
            via, Client(streamable_http_client(f"http://127.0.0.1:{port}/mcp"))
        )
    finally:
        proc.terminate()
        proc.wait(timeout=10)

    all_tools = [json.dumps(tool_definition(t, engine.agent.tool_names())) for t in engine.agent.tools]
    all_tokens = sum(emb.count_tokens(all_tools))
    offered = []
    for m in msgs:
        req = engine.select(m)
        offered.append(sum(emb.count_tokens([json.dumps(t) for t in req.tools])) if req.tools else 0)
    print(f"# mcp_latency: example agent, {len(msgs)} messages; {cpu_summary()}")
    print(f"{'path':<30} {'p50 ms':>8} {'p99 ms':>8} {'p50 over in-process':>20}")
    base = p50_p99(rows["in process (Engine.select)"], 1000)[0]
    for name, xs in rows.items():
        p50, p99 = p50_p99(xs, 1000)
        print(f"{name:<30} {p50:>8.2f} {p99:>8.2f} {p50 - base:>+20.2f}")
    print(
        f"\ntool definitions, example agent: all {len(all_tools)} tools {all_tokens} tokens; offered per message "
        f"median {statistics.median(offered):.0f} tokens ({statistics.median(offered) / all_tokens:.0%} of all; "
        "MiniLM tokenizer)"
    )
    gateway_part(emb, args.messages)
    return 0


GATEWAY_TASKS = [
    "What time is it in Tokyo right now?",
    "Convert 9am New York time to Berlin time.",
    "Show me the staged changes and commit them with a good message.",
    "Which branch am I on, and what do the last five commits say?",
    "Read notes.txt and list the directory it is in.",
    "Create a folder called drafts and write a file in it.",
    "Search the notes folder for files about milk.",
    "What changed since the last commit? Show the unstaged diff.",
]


def gateway_part(emb: Embedder, n: int) -> None:
    """A forwarded tools/call against a direct call to the same server; tokens with the three real servers."""
    import tempfile
    from pathlib import Path

    from mcp import Client, StdioServerParameters

    from benchmarks.speed.mcp_index import write_agent
    from contextsieve.mcp_client.client import ListConfig
    from contextsieve.mcp_server.gateway import build_gateway

    with tempfile.TemporaryDirectory(prefix="contextsieve-gw-bench-") as tmp:
        agent = write_agent(Path(tmp))
        engine = Engine.from_file(agent, embedder=emb, cache_dir=Path(tmp) / "cache")
        catalog = engine.connect(listing=ListConfig(timeout=120))
        if not catalog.ok:
            raise SystemExit(catalog.summary())
        time_cmd = engine.agent.servers["time"].config["command"]
        args = {"timezone": "Asia/Tokyo"}

        async def direct() -> list[float]:
            async with Client(StdioServerParameters(command=time_cmd, args=[])) as c:
                return await timed_calls(lambda _m: c.call_tool("get_current_time", args), ["x"] * n)

        async def gateway() -> list[float]:
            async with Client(build_gateway(engine, listing=ListConfig(timeout=120)), mode="legacy") as c:
                await c.call_tool("set_task", {"message": "What time is it in Tokyo?"})
                return await timed_calls(lambda _m: c.call_tool("time_get_current_time", args), ["x"] * n)

        d, g = anyio.run(direct), anyio.run(gateway)
        all_tokens = sum(
            emb.count_tokens([json.dumps(tool_definition(t, engine.agent.tool_names())) for t in engine.agent.tools])
        )
        offered = []
        for task in GATEWAY_TASKS:
            req = engine.select(task)
            offered.append(sum(emb.count_tokens([json.dumps(t) for t in req.tools])) if req.tools else 0)
    print(f"\n{'tools/call get_current_time':<30} {'p50 ms':>8} {'p99 ms':>8}")
    for name, xs in (("direct to mcp-server-time", d), ("through the gateway", g)):
        p50, p99 = p50_p99(xs, 1000)
        print(f"{name:<30} {p50:>8.2f} {p99:>8.2f}")
    print(
        f"tool definitions, 3 real servers ({len(engine.agent.tools)} tools): all {all_tokens} tokens; the gateway "
        f"offers median {statistics.median(offered):.0f} ({statistics.median(offered) / all_tokens:.0%}) over "
        f"{len(GATEWAY_TASKS)} tasks"
    )


if __name__ == "__main__":
    sys.exit(main())
