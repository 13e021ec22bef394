"""A hand-written MCP server for the gateway tests: it handles one request at a time (a slow call
blocks everything after it, as in many small servers) and answers ``ping`` with -32601 (the
2026-07-28 revision removed ping). No SDK: what it speaks is written out below.

    python mcp_raw_server.py LOG.jsonl [--era legacy|modern|both] [--tools TOOLS.json] [--fail-if FILE] [--silent]

``--era legacy``: the initialize handshake only (``server/discover`` is -32601); ``modern``: the
2026-07-28 protocol only (``initialize`` is refused with -32022, ``tools/list`` carries
``ttlMs``/``cacheScope``, ``subscriptions/listen`` is served); ``both`` (default): whichever the
client opens with; ``--fail-if FILE``: while FILE exists the server cannot start (it says so on
stderr and exits with status 1); ``--silent``: a request of a method it does not serve gets no
answer at all (as some servers of the handshake era do with ``server/discover``). Every request is
appended to LOG.jsonl as ``{"method", "name", "era"}`` (the tests read it: was a call sent twice,
was a ping sent). Its tools (``TOOLS.json`` when given, read on every ``tools/list``, else the
built-in ones):

- ``echo(**args)``: the arguments back as JSON text;
- ``slow(seconds)``: progress every half second (when the call asked for it), then ``{"slept": s}``;
- ``add_tool(name)``: adds a tool (an echo) and announces the change: ``notifications/tools/list_changed``
  on the handshake protocol, the same on each open ``subscriptions/listen`` stream on the new one;
- ``exit``: the process ends before answering.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

MODERN = "2026-07-28"
HANDSHAKE = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
SUBSCRIPTION_ID = "io.modelcontextprotocol/subscriptionId"
VERSION_KEY = "io.modelcontextprotocol/protocolVersion"
BUILT_IN = [
    {"name": "echo", "description": "Echo the arguments back.", "inputSchema": {"type": "object"}},
    {
        "name": "slow",
        "description": "Sleep for some seconds, reporting progress.",
        "inputSchema": {"type": "object", "properties": {"seconds": {"type": "number"}}},
    },
    {
        "name": "add_tool",
        "description": "Add a tool to this server.",
        "inputSchema": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]},
    },
    {"name": "exit", "description": "End the server process.", "inputSchema": {"type": "object"}},
]


def send(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def reply(rid: Any, result: dict[str, Any]) -> None:
    send({"jsonrpc": "2.0", "id": rid, "result": result})


def error(rid: Any, code: int, message: str, data: Any = None) -> None:
    err: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        err["data"] = data
    send({"jsonrpc": "2.0", "id": rid, "error": err})


def main() -> None:
    log = Path(sys.argv[1])
    era = sys.argv[sys.argv.index("--era") + 1] if "--era" in sys.argv else "both"
    tools_file = Path(sys.argv[sys.argv.index("--tools") + 1]) if "--tools" in sys.argv else None
    if "--fail-if" in sys.argv and Path(sys.argv[sys.argv.index("--fail-if") + 1]).exists():
        print("cannot start: the --fail-if file exists", file=sys.stderr, flush=True)
        sys.exit(1)
    silent = "--silent" in sys.argv
    added: list[dict[str, Any]] = []
    listens: list[Any] = []  # ids of open subscriptions/listen streams (tools list_changed asked for)
    opened: str | None = None  # the era this connection opened with

    def tools() -> list[dict[str, Any]]:
        base = json.loads(tools_file.read_text(encoding="utf-8")) if tools_file is not None else BUILT_IN
        return base + added

    def result(body: dict[str, Any]) -> dict[str, Any]:
        return {**body, "resultType": "complete"} if opened == "modern" else body

    for line in sys.stdin:
        if not line.strip():
            continue
        msg = json.loads(line)
        method, rid, params = msg.get("method"), msg.get("id"), msg.get("params") or {}
        if method is None or rid is None:
            continue  # a response or a notification: nothing to do
        meta = params.get("_meta") or {}
        name = params.get("name") if method == "tools/call" else None
        with log.open("a", encoding="utf-8") as f:
            f.write(json.dumps({"method": method, "name": name, "era": opened}) + "\n")
        if method == "initialize":
            if era == "modern" or opened == "modern":
                error(rid, -32022, "this server speaks 2026-07-28 only", {"supported": [MODERN]})
                continue
            opened = "legacy"
            asked = params.get("protocolVersion")
            reply(
                rid,
                {
                    "protocolVersion": asked if asked in HANDSHAKE else HANDSHAKE[-1],
                    "capabilities": {"tools": {"listChanged": True}},
                    "serverInfo": {"name": "raw", "version": "1"},
                },
            )
            continue
        if method == "server/discover":
            if era == "legacy" or opened == "legacy":
                if not silent:
                    error(rid, -32601, "Method not found")
                continue
            opened = "modern"
            reply(
                rid,
                {
                    "supportedVersions": [MODERN],
                    "capabilities": {"tools": {"listChanged": True}},
                    "resultType": "complete",
                    "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "raw", "version": "1"}},
                },
            )
            continue
        if opened is None and meta.get(VERSION_KEY) == MODERN and era != "legacy":
            opened = "modern"  # a client that adopts the version without discover
        if method == "ping":
            error(rid, -32601, "Method not found: ping was removed in 2026-07-28")
        elif method == "subscriptions/listen" and opened == "modern":
            wanted = (params.get("notifications") or {}).get("toolsListChanged")
            honored = {"toolsListChanged": True} if wanted else {}
            if wanted:
                listens.append(rid)
            send(
                {
                    "jsonrpc": "2.0",
                    "method": "notifications/subscriptions/acknowledged",
                    "params": {"notifications": honored, "_meta": {SUBSCRIPTION_ID: rid}},
                }
            )
        elif method == "tools/list":
            body = {"tools": tools()}
            if opened == "modern":
                body |= {"ttlMs": 0, "cacheScope": "private"}
            reply(rid, result(body))
        elif method == "tools/call":
            args = params.get("arguments") or {}
            if name not in {t["name"] for t in tools()}:
                error(rid, -32602, f"unknown tool {name}")
                continue
            if name == "exit":
                os._exit(0)
            if name == "slow":
                seconds = float(args.get("seconds", 1))
                token = meta.get("progressToken")
                end, step = time.monotonic() + seconds, 0
                while time.monotonic() < end:
                    time.sleep(min(0.5, max(0.0, end - time.monotonic())))
                    step += 1
                    if token is not None:
                        note = {"progressToken": token, "progress": step, "message": f"step {step}"}
                        send({"jsonrpc": "2.0", "method": "notifications/progress", "params": note})
                text = json.dumps({"slept": seconds})
            elif name == "add_tool":
                added.append({"name": args["name"], "description": "An added tool.", "inputSchema": {"type": "object"}})
                if opened == "modern":
                    for sub in listens:
                        note = {"_meta": {SUBSCRIPTION_ID: sub}}
                        send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed", "params": note})
                else:
                    send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
                text = json.dumps({"added": args["name"]})
            else:
                text = json.dumps({"tool": name, **args})
            reply(rid, result({"content": [{"type": "text", "text": text}], "isError": False}))
        elif not silent:
            error(rid, -32601, "Method not found")


if __name__ == "__main__":
    main()
