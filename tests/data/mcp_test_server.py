"""A small MCP server for the tests: its tools come from a JSON file, listed a few per page.

    python mcp_test_server.py TOOLS.json [--http PORT] [--token TOKEN]

The file holds MCP ``tools/list`` entries; it is read on every ``tools/list`` (so a test can change
the list). Over stdio by default; ``--http PORT`` serves streamable HTTP on 127.0.0.1 (with
``--token``, requests without ``Authorization: Bearer TOKEN`` get 401).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio
from mcp import types
from mcp.server.lowlevel import Server

PAGE = 4


def make_server(path: Path) -> Server:
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
        and answers content that is not a list; any other tool echoes its arguments."""
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
                await ctx.session.send_tool_list_changed()
        if params.name == "add_tool":
            tools = json.loads(path.read_text(encoding="utf-8"))
            tools.append({"name": args["name"], "description": args.get("description", "")})
            path.write_text(json.dumps(tools), encoding="utf-8")
            await ctx.session.send_tool_list_changed()
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=json.dumps({"tool": params.name, **args}))]
        )

    return Server("contextsieve-test", on_list_tools=list_tools, on_call_tool=call_tool)


def main() -> None:
    path = Path(sys.argv[1])
    server = make_server(path)
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


if __name__ == "__main__":
    main()
