"""A small MCP server for the tests: its tools come from a JSON file, listed a few per page.

    python mcp_test_server.py TOOLS.json [--http PORT] [--token TOKEN] [--linger PIDFILE] [--modern-only]

The file holds MCP ``tools/list`` entries; it is read on every ``tools/list`` (so a test can change
the list). Over stdio by default; ``--http PORT`` serves streamable HTTP on 127.0.0.1 (with
``--token``, requests without ``Authorization: Bearer TOKEN`` get 401).

``--linger PIDFILE``: a stubborn child: writes its pid to PIDFILE, ignores SIGTERM, and keeps running
after stdin closes (only SIGKILL ends it); it starts a child of its own, as stubborn, whose pid it
writes to PIDFILE.child first. ``--modern-only``: speaks the 2026-07-28 protocol only
(``initialize`` is refused with -32022). A change of the tool list (``add_tool``, ``storm``) is
announced as each protocol says: ``notifications/tools/list_changed`` on the handshake, an event on
the ``subscriptions/listen`` streams on 2026-07-28.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio
from mcp import MCPError, types
from mcp.server.lowlevel import Server
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ToolsListChanged
from mcp_types import UNSUPPORTED_PROTOCOL_VERSION

MODERN = "2026-07-28"

PAGE = 4


def make_server(path: Path, modern_only: bool = False) -> Server:
    bus = InMemorySubscriptionBus()

    async def announce(ctx) -> None:  # noqa: ANN001
        if ctx.protocol_version == MODERN:  # on subscriptions/listen streams (the 2026-07-28 way)
            await bus.publish(ToolsListChanged())
        else:  # the handshake's notification
            await ctx.session.send_tool_list_changed()

    async def list_tools(ctx, params):  # noqa: ANN001, ANN202
        tools = json.loads(path.read_text(encoding="utf-8"))
        start = int(params.cursor) if params is not None and params.cursor else 0
        page = tools[start : start + PAGE]
        nxt = str(start + PAGE) if start + PAGE < len(tools) else None
        return types.ListToolsResult(
            tools=[
                types.Tool(
                    name=t["name"],
                    description=t.get("description"),
                    input_schema=t.get("inputSchema", {"type": "object"}),
                )
                for t in page
            ],
            next_cursor=nxt,
        )

    async def call_tool(ctx, params):  # noqa: ANN001, ANN202
        """``add_tool(name, description)`` adds a tool to the file and sends tools/list_changed;
        ``crash`` notes its run in ``TOOLS.json.runs`` and exits before answering, ``malformed`` notes it
        and answers content that is not a list; ``vanish`` removes itself from the file, sends
        tools/list_changed, waits ``seconds`` (default 1) and echoes; any other tool echoes its arguments."""
        args = dict(params.arguments or {})
        meta = ctx.meta or {}
        token = meta.get("progress_token") if isinstance(meta, dict) else None
        if params.name == "slow" and token is not None:
            for i in range(1, 4):
                await ctx.session.send_progress_notification(
                    token, i, 3, f"step {i}", related_request_id=str(ctx.request_id)
                )
        if params.name in ("crash", "malformed"):  # misbehave on cue, after noting that the call ran
            with open(str(path) + ".runs", "a", encoding="utf-8") as runs:
                runs.write(params.name + "\n")
            if params.name == "crash":
                import os

                os._exit(3)  # dies before answering: the call did run
            return types.CallToolResult.model_construct(content="not a list", is_error=False)
        if params.name == "storm":  # many tools/list_changed at once
            for _ in range(int(args.get("count", 500))):
                await announce(ctx)
        if params.name == "vanish":  # leaves the tool list (announced) while it runs, then answers
            tools = [t for t in json.loads(path.read_text(encoding="utf-8")) if t["name"] != "vanish"]
            path.write_text(json.dumps(tools), encoding="utf-8")
            await announce(ctx)
            await anyio.sleep(float(args.get("seconds", 1.0)))
        if params.name == "add_tool":
            tools = json.loads(path.read_text(encoding="utf-8"))
            tools.append({"name": args["name"], "description": args.get("description", "")})
            path.write_text(json.dumps(tools), encoding="utf-8")
            await announce(ctx)
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=json.dumps({"tool": params.name, **args}))]
        )

    server = Server(
        "contextsieve-test",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_subscriptions_listen=ListenHandler(bus),
    )
    if not modern_only:
        return server

    async def refuse_handshake(ctx, call_next):  # noqa: ANN001, ANN202
        if ctx.method == "initialize":
            raise MCPError(UNSUPPORTED_PROTOCOL_VERSION, "this server speaks 2026-07-28 only", {"supported": [MODERN]})
        return await call_next(ctx)

    server.middleware.append(refuse_handshake)
    return server


def main() -> None:
    path = Path(sys.argv[1])
    server = make_server(path, modern_only="--modern-only" in sys.argv)
    if "--linger" in sys.argv:  # a stubborn child: ignores SIGTERM and outlives its stdin
        import os
        import signal
        import subprocess

        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        pidfile = Path(sys.argv[sys.argv.index("--linger") + 1])
        stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
        child = subprocess.Popen([sys.executable, "-c", stubborn], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        Path(f"{pidfile}.child").write_text(str(child.pid))
        pidfile.write_text(str(os.getpid()))
    if "--http" in sys.argv:
        import uvicorn

        port = int(sys.argv[sys.argv.index("--http") + 1])
        token = sys.argv[sys.argv.index("--token") + 1] if "--token" in sys.argv else None
        app = server.streamable_http_app()
        if token:
            inner = app

            async def app(scope, receive, send):  # noqa: ANN001, ANN202
                if scope["type"] == "http":
                    headers = dict(scope.get("headers") or [])
                    if headers.get(b"authorization") != f"Bearer {token}".encode():
                        await send({"type": "http.response.start", "status": 401, "headers": []})
                        await send({"type": "http.response.body", "body": b"unauthorized"})
                        return
                await inner(scope, receive, send)

        uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
        return
    from mcp.server.stdio import stdio_server

    async def run() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(run)
    if "--linger" in sys.argv:
        import time

        while True:
            time.sleep(1)


if __name__ == "__main__":
    main()
