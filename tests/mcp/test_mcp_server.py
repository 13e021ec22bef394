"""contextsieve serve: the official SDK client against the server in memory, over stdio (a subprocess)
and over streamable HTTP (127.0.0.1, a free port, a bearer token): every tool, resources, bad
arguments, and two concurrent clients with separate sessions."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, MCPError, StdioServerParameters

from contextsieve.agent.agentfile import example_agent_path, load_agent
from contextsieve.engine import Engine
from contextsieve.mcp_server.common import ServeConfig
from contextsieve.mcp_server.server import build_server
from tests.helpers.mcp_results import refused, result

PR = "Please open a pull request for the cart rounding fix."


@pytest.fixture(scope="module")
def engine(int8, tmp_path_factory: pytest.TempPathFactory) -> Engine:  # noqa: ANN001
    return Engine.from_file(example_agent_path(), embedder=int8, cache_dir=tmp_path_factory.mktemp("serve"))


def test_every_tool_and_resource_in_memory(engine: Engine) -> None:
    async def main() -> None:
        async with Client(build_server(engine)) as c:
            names = {t.name for t in (await c.list_tools()).tools}
            assert names == {
                "select_context",
                "search_tools",
                "explain",
                "add_to_session",
                "remove_from_session",
                "record_tool_calls",
            }
            ctx = result(await c.call_tool("select_context", {"message": PR}))
            sid = ctx["session"]
            assert sid.startswith("cs-") and len(sid) > 20
            want = engine.select(PR).context
            assert [(i["type"], i["name"], i["includeMode"]) for i in ctx["items"]] == [
                (e.key.kind.value, e.key.name, e.mode.value) for e in want.entries
            ]
            tools = [i for i in ctx["items"] if i["type"] == "tool"]
            assert tools and all("serverName" in i and "similarityScore" in i for i in tools)
            assert {t["name"] for t in ctx["tools"]} >= {f"{i['serverName']}_{i['name']}" for i in tools}
            rules = [i["name"] for i in ctx["items"] if i["type"] == "rule"]
            assert [t["name"] for t in ctx["texts"] if t["type"] == "rule"] == rules
            found = result(await c.call_tool("search_tools", {"query": "open a pull request", "limit": 3}))["tools"]
            assert len(found) == 3 and found[0]["name"] == "github_create_pull_request"
            assert isinstance(found[0]["input_schema"], dict) and all(-1 <= t["similarity"] <= 1 for t in found)
            every = result(await c.call_tool("search_tools", {"query": "open a pull request", "limit": 50}))["tools"]
            assert every[: len(found)] == found and len(every) > len(found)  # the largest limit works too
            ex = result(await c.call_tool("explain", {"message": PR, "item": "rule:tone", "session": sid}))
            assert ex["key"] == "rule:tone" and ex["included"] and ex["mode"] == "always"
            added = result(await c.call_tool("add_to_session", {"item": "reference:style-guide", "session": sid}))
            assert {"item": "reference:style-guide", "includeMode": "manual"} in added["items"]
            again = result(await c.call_tool("select_context", {"message": "hello", "session": sid}))
            assert ("reference", "style-guide", "manual") in [
                (i["type"], i["name"], i["includeMode"]) for i in again["items"]
            ]
            removed = result(await c.call_tool("remove_from_session", {"item": "rule:tone", "session": sid}))
            fresh = result(await c.call_tool("select_context", {"message": "hello"}))  # no handle: a new session
            assert fresh["session"] != sid and "manual" not in [i["includeMode"] for i in fresh["items"]]
            await refused(
                c.call_tool("select_context", {"message": "hello", "session": "cs-guessed"}),
                "unknown or expired session",
            )
            assert "rule:tone" not in [x["item"] for x in removed["items"]]
            res = (await c.list_resources()).resources
            assert len(res) == len(engine.agent.rules) + len(engine.agent.references)
            tone = await c.read_resource("contextsieve://rule/tone")
            assert tone.contents[0].text == engine.agent.get("rule:tone").text
            # learning from use
            msg = "ship the cart fix so Ana can look at it"
            call = {"message": msg, "tools": ["tool:github:create_pull_request"], "session": sid}
            assert result(await c.call_tool("record_tool_calls", call))["recorded"] == [
                "tool:github:create_pull_request"
            ]
            learned = result(await c.call_tool("select_context", {"message": msg, "session": sid}))
            assert ("tool", "create_pull_request") == next(
                (i["type"], i["name"]) for i in learned["items"] if i["type"] == "tool"
            )
            await refused(c.call_tool("record_tool_calls", {"message": msg, "tools": ["rule:tone"]}), "is not a tool")
            await refused(
                c.call_tool("record_tool_calls", {"message": msg, "tools": ["tool:github:nope"]}), "agent has no"
            )
            assert engine.store.forget_examples() == 1

    anyio.run(main)


def test_bad_arguments_get_clear_errors_and_the_server_keeps_going(engine: Engine) -> None:
    async def main() -> None:
        async with Client(build_server(engine, ServeConfig(max_message_chars=1000))) as c:
            cases = [
                ("explain", {"message": "x", "item": "rule:nope"}, "has no"),
                ("explain", {"message": "x", "item": "not a key"}, "not an item key"),
                ("select_context", {"message": "x", "settings": {"bogus": 1}}, "unknown settings"),
                ("select_context", {"message": "x", "settings": {"context_top_n": -3}}, "context_top_n"),
                ("select_context", {"message": "x", "preset": "fastest"}, "preset must be one of"),
                ("select_context", {"message": "x" * 1001}, "limit is 1000"),
                ("select_context", {"message": "abc \ud800"}, "surrogate"),
                ("search_tools", {"query": "x", "limit": 0}, "limit must be from 1 to 50"),
                ("search_tools", {"query": "x", "lmit": 3}, "unknown argument .lmit.; it takes query, limit"),
                ("add_to_session", {"item": "tool:nope:x"}, "has no"),
            ]
            for tool, args, msg in cases:
                await refused(c.call_tool(tool, args), msg)
            bad_type = await c.call_tool("select_context", {"message": 5})
            assert bad_type.is_error
            assert result(await c.call_tool("select_context", {"message": PR}))["items"]

    anyio.run(main)


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_two_concurrent_clients_have_separate_sessions(engine: Engine, mode: str) -> None:
    """Stateful connections get a session each without asking; stateless clients carry their handle."""
    server = build_server(engine)
    seen: dict[str, list[tuple[str, str]]] = {}

    async def client(name: str, add: str | None) -> None:
        async with Client(server, mode=mode) as c:
            first = result(await c.call_tool("select_context", {"message": "hi"}))
            handle = {} if mode == "legacy" else {"session": first["session"]}
            if add:
                await c.call_tool("add_to_session", {"item": add, **handle})
            for _ in range(3):
                ctx = result(await c.call_tool("select_context", {"message": "hello there", **handle}))
                assert ctx["session"] == first["session"]
            seen[name] = [(i["type"], i["name"]) for i in ctx["items"] if i["includeMode"] == "manual"]

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(client, "a", "reference:style-guide")
            tg.start_soon(client, "b", None)

    anyio.run(main)
    assert seen == {"a": [("reference", "style-guide")], "b": []}


def test_over_stdio(model_cache: Path, int8) -> None:  # noqa: ANN001 - int8 builds the graph in model_cache
    env = {**os.environ, "CONTEXTSIEVE_CACHE": str(model_cache), "CONTEXTSIEVE_DATA": str(model_cache / "data")}
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "contextsieve", "serve", str(example_agent_path()), "--offline"], env=env
    )

    no_stash = StdioServerParameters(command=sys.executable, args=[*params.args, "--no-stash"], env=env)

    async def main() -> None:
        async with Client(params, read_timeout_seconds=120) as c:
            names = {t.name for t in (await c.list_tools()).tools}
            assert len(names) == 12 and "stash_context" in names  # the stash tools by default
            ctx = result(await c.call_tool("select_context", {"message": PR}))
            assert any(i["type"] == "tool" for i in ctx["items"])
            await refused(c.call_tool("explain", {"message": "x", "item": "rule:nope"}), "has no")
        async with Client(no_stash, read_timeout_seconds=120) as c:
            assert len((await c.list_tools()).tools) == 6  # --no-stash: the selection tools only

    anyio.run(main)
    # the default store: one per agent (its identity: name and file) in the data folder ($CONTEXTSIEVE_DATA here)
    identity = load_agent(example_agent_path()).identity
    assert identity.startswith("Acme-Shop-assistant-")
    assert [p.name for p in (model_cache / "data" / "stash").glob("*.db")] == [f"{identity}.db"]


@pytest.fixture()
def http_serve(model_cache: Path, int8) -> Iterator[tuple[str, str]]:  # noqa: ANN001
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    token = "t0ken-for-the-test"
    env = {
        **os.environ,
        "CONTEXTSIEVE_CACHE": str(model_cache),
        "CONTEXTSIEVE_DATA": str(model_cache / "data"),
        "CS_TEST_TOKEN": token,
    }
    cmd = [sys.executable, "-m", "contextsieve", "serve", str(example_agent_path()), "--transport", "http"]
    proc = subprocess.Popen(
        [*cmd, "--port", str(port), "--token-env", "CS_TEST_TOKEN", "--offline"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.stderr else ""
                time.sleep(0.2)
        url = f"http://127.0.0.1:{port}/mcp"
        assert proc.stderr is not None
        seen = [proc.stderr.readline().decode() for _ in range(1)]
        while url not in seen[-1] and len(seen) < 50:  # the address is announced before it listens
            seen.append(proc.stderr.readline().decode())
        assert f"serving MCP (streamable HTTP) at {url}" in seen[-1], seen
        yield url, token
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_over_http_with_a_token_and_a_size_limit(http_serve) -> None:  # noqa: ANN001
    import httpx2
    from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

    url, token = http_serve

    async def main() -> None:
        http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
        async with Client(streamable_http_client(url, http_client=http), read_timeout_seconds=120) as c:
            ctx = result(await c.call_tool("select_context", {"message": PR}))
            assert ctx["items"]
        async with httpx2.AsyncClient() as raw:
            assert (await raw.post(url, json={})).status_code == 401
            big = await raw.post(url, content=b"x" * 2_000_000, headers={"Authorization": f"Bearer {token}"})
            assert big.status_code == 413

            async def chunks() -> Any:  # no content-length: a chunked body, counted as it arrives
                for _ in range(20):
                    yield b"x" * 100_000

            chunked = await raw.post(url, content=chunks(), headers={"Authorization": f"Bearer {token}"})
            assert chunked.status_code == 413  # it was a 500 with a traceback in the log

    anyio.run(main)


INSPECTOR = "@modelcontextprotocol/inspector@0.15.0"  # 2.x needs Node >= 22.19; this runs on Node 20


def test_the_mcp_inspector_cli_lists_and_calls(model_cache: Path, int8) -> None:  # noqa: ANN001
    env = {**os.environ, "CONTEXTSIEVE_CACHE": str(model_cache), "CONTEXTSIEVE_DATA": str(model_cache / "data")}
    serve = [sys.executable, "-m", "contextsieve", "serve", str(example_agent_path()), "--offline"]
    base = ["npx", "-y", INSPECTOR, "--cli", *serve]
    listed = subprocess.run([*base, "--method", "tools/list"], env=env, capture_output=True, text=True, timeout=300)
    assert listed.returncode == 0, listed.stderr[-2000:]
    assert {t["name"] for t in json.loads(listed.stdout)["tools"]} >= {"select_context", "search_tools"}
    call = [*base, "--method", "tools/call", "--tool-name", "search_tools", "--tool-arg", "query=open a pull request"]
    called = subprocess.run(call, env=env, capture_output=True, text=True, timeout=300)
    assert called.returncode == 0, called.stderr[-2000:]
    found = json.loads(json.loads(called.stdout)["content"][0]["text"])["tools"]
    assert found[0]["name"] == "github_create_pull_request"


def test_the_declared_prompts_are_served_and_an_unknown_one_is_invalid_params(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 27 item 20: the server declares prompts, so it serves one (``context``); an unknown name is
    MCP's invalid-params error (it was code 0 / internal error with a traceback in the log)."""
    from mcp.types import INVALID_PARAMS

    async def main() -> None:
        async with Client(build_server(engine)) as c:
            assert [p.name for p in (await c.list_prompts()).prompts] == ["context"]
            got = await c.get_prompt("context", {"message": "My parcel is late and has not moved for a week."})
            text = got.messages[0].content.text  # type: ignore[union-attr]
            want = engine.select("My parcel is late and has not moved for a week.")
            rules = [e.key.name for e in want.context.entries if e.key.kind.value == "rule"]
            assert rules and all(f"Rule {name}:" in text for name in rules)
            with pytest.raises(MCPError) as bad:
                await c.get_prompt("nope")
            assert bad.value.error.code == INVALID_PARAMS and "unknown prompt 'nope'" in bad.value.error.message

    anyio.run(main)
    assert "Traceback" not in caplog.text


@pytest.mark.filterwarnings("ignore:The logging capability is deprecated")  # by the SDK, from 2026-07-28
@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_the_logging_capability_sends_a_requests_notes_at_the_level_asked(engine: Engine, mode: str) -> None:
    """Issue 27 item 20: the server declares ``logging`` and serves ``logging/setLevel`` (it answered
    "method not found"); a request context's notes also reach the client as ``notifications/message``
    at ``notice``, only when the level allows: set per connection (legacy) or per request (the default
    protocol's ``_meta`` level, which the SDK client sends from ``log_level``)."""
    got: list[tuple[str, object]] = []

    async def on_log(params: Any) -> None:
        got.append((params.level, params.data))

    over_budget = {"message": "hello there", "settings": {"token_budget": 1}}

    async def main() -> None:
        async with Client(build_server(engine), mode=mode, logging_callback=on_log, log_level="debug") as c:
            assert c.server_capabilities.logging is not None
            if mode == "legacy":
                await c.set_logging_level("debug")
            notes = result(await c.call_tool("select_context", over_budget))["notes"]
            assert notes and any("over the budget of 1" in n for n in notes)
            assert got == [("notice", n) for n in notes]
            got.clear()
            if mode == "legacy":
                await c.set_logging_level("error")  # above notice: nothing more is sent
                result(await c.call_tool("select_context", over_budget))
                assert got == []
                assert got == []  # (a level outside RFC 5424's is refused by the SDK's own validation)

    anyio.run(main)


def test_a_body_that_does_not_arrive_in_time_gets_408_and_the_app_never_runs() -> None:
    """A client that trickles its body holds nothing past ``body_seconds`` (issue 27 item 13)."""
    from contextsieve.mcp_server.http_transport import guarded_app

    ran: list[bool] = []
    sent: list[dict[str, Any]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        ran.append(True)

    async def slow_receive() -> dict[str, Any]:
        await anyio.sleep(5)
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "headers": [(b"content-length", b"2")]}
    guarded = guarded_app(app, token=None, max_request_bytes=1000, body_seconds=0.2)
    anyio.run(guarded, scope, slow_receive, send)
    assert not ran and sent[0]["status"] == 408

    async def whole() -> dict[str, Any]:
        return {"type": "http.request", "body": b"{}", "more_body": False}

    seen: list[bytes] = []

    async def echo(scope: Any, receive: Any, send: Any) -> None:
        seen.append((await receive())["body"])

    anyio.run(guarded_app(echo, token=None, max_request_bytes=1000), scope, whole, send)
    assert seen == [b"{}"]  # a body in time reaches the app whole


def test_unreadable_stdio_lines_get_a_json_rpc_error_at_once(model_cache: Path, int8) -> None:  # noqa: ANN001
    """Issue 27 item 12: before, each of these lines got no reply and the host waited for its timeout."""
    import json
    import select
    import subprocess
    import time

    env = {**os.environ, "CONTEXTSIEVE_CACHE": str(model_cache), "CONTEXTSIEVE_DATA": str(model_cache / "data")}
    args = [sys.executable, "-m", "contextsieve", "serve", str(example_agent_path()), "--offline", "--no-stash"]
    proc = subprocess.Popen(args, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdin is not None and proc.stdout is not None
    pending = b""

    def ask(line: str, wait: float = 60.0) -> dict[str, Any]:
        nonlocal pending
        proc.stdin.write(line.encode("utf-8", "surrogatepass") + b"\n")  # type: ignore[union-attr]
        proc.stdin.flush()  # type: ignore[union-attr]
        end = time.monotonic() + wait
        while b"\n" not in pending:
            ready, _, _ = select.select([proc.stdout], [], [], max(0.0, end - time.monotonic()))
            assert ready, f"no reply to {line[:60]!r}"
            chunk = os.read(proc.stdout.fileno(), 65536)  # type: ignore[union-attr]
            assert chunk, "the server exited"
            pending += chunk
        first, pending = pending.split(b"\n", 1)
        return json.loads(first)

    try:
        cases = [
            ("not json at all", -32700, None),
            ('{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"\\ud800"}}', -32700, 5),
            ("[" * 5000 + "]" * 5000, -32700, None),
            ("[]", -32600, None),  # a batch of requests: an array of replies (tests/mcp/test_jsonrpc_letter.py)
            ('{"jsonrpc":"2.0","id":"seven","method":3}', -32600, "seven"),
        ]
        for line, code, rid in cases:
            reply = ask(line)
            assert reply["jsonrpc"] == "2.0" and reply["error"]["code"] == code and reply["id"] == rid, (line, reply)
        client = {"name": "t", "version": "1"}
        init = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": client},
        }
        assert ask(json.dumps(init))["result"]["serverInfo"]["name"]  # still serving after all of them
        assert ask('{"jsonrpc":"2.0","id":2,"method":"ping"}') == {"jsonrpc": "2.0", "id": 2, "result": {}}
        # an id with a lone surrogate escape is valid JSON and echoed in the reply: the SDK's writer
        # raised on it and the server process ended (found by benchmarks.robustness.fuzz, mcp_stdio)
        assert ask('{"jsonrpc":"2.0","id":"a\\udfffb","method":"ping"}')["id"] == "a\ufffdb"
        assert ask('{"jsonrpc":"2.0","id":3,"method":"ping"}') == {"jsonrpc": "2.0", "id": 3, "result": {}}
    finally:
        proc.kill()
        proc.wait()


def test_the_access_model_of_handles_with_two_real_http_clients(http_serve) -> None:  # noqa: ANN001
    """Issue 27 item 21: a second connection (same token) read a stateful connection's stash by
    passing its handle, and the handle still worked after the first client ended its session."""
    from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

    url, token = http_serve

    def client(**kw: Any) -> Client:
        http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
        return Client(streamable_http_client(url, http_client=http), read_timeout_seconds=120, **kw)

    segment = {"text": "The staging database password rotates every Friday at noon.", "topic": "ops"}

    async def main() -> None:
        async with client(mode="legacy") as first:  # the stateful protocol: a connection
            own = result(await first.call_tool("stash_context", {"segments": [segment]}))
            handle = own["session"]
            found = result(await first.call_tool("retrieve_stashed_context", {"query": "database password"}))
            assert [s["text"] for s in found["segments"]] == [segment["text"]]
            for mode in ("legacy", None):  # another connection, and a stateless request, same token
                async with client(**({"mode": mode} if mode else {})) as other:
                    await refused(
                        other.call_tool("retrieve_stashed_context", {"query": "password", "session": handle}),
                        "unknown or expired session handle",
                    )
            again = result(await first.call_tool("select_context", {"message": PR, "session": handle}))
            assert again["session"] == handle  # its own connection may name it
        async with client(mode="legacy") as later:  # after the first client ended its session
            await refused(
                later.call_tool("select_context", {"message": PR, "session": handle}),
                "unknown or expired session handle",
            )
        async with client() as stateless:  # stateless handles are capabilities for stateless requests
            made = result(await stateless.call_tool("select_context", {"message": PR}))["session"]
        async with client() as another:
            assert (
                result(await another.call_tool("select_context", {"message": PR, "session": made}))["session"] == made
            )
        async with client(mode="legacy") as stateful:
            await refused(
                stateful.call_tool("select_context", {"message": PR, "session": made}),
                "unknown or expired session handle",
            )

    anyio.run(main)
