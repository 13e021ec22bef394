"""The gateway for many hosts and bad days, against real processes (``contextsieve gateway``, over HTTP and
stdio) with the MCP SDK as host: one offer per conversation on both protocol eras, a first contact that
offers tools before any task, answers that say which servers are down or still starting, a first task
that waits a bounded time for a stuck server, and the bundled example refused in one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from mcp import Client, StdioServerParameters

from contextsieve.agent.agentfile import example_agent_path
from tests.helpers.fake_embedder import FakeEmbedder
from tests.helpers.servers import http_server

DATA = Path(__file__).parents[1] / "data"
RAW = DATA / "mcp_raw_server.py"

#: twelve tools a host's conversations each need one of, with a task that names what it does
TASKS = {
    "get_weather": ("Current weather and forecast for a city", "What is the weather forecast for Lisbon?"),
    "convert_currency": ("Convert money between currencies", "Convert 250 dollars into euros"),
    "search_flights": ("Search airline flights between airports", "Search flights from Oslo to Rome"),
    "book_hotel": ("Book a hotel room in a city", "Book a hotel room in Paris"),
    "send_email": ("Send an email message to a recipient", "Send an email message to Anna"),
    "get_stock_price": ("Latest stock market price of a ticker", "What is the stock price of Apple?"),
    "translate_text": ("Translate text into another language", "Translate good morning into Japanese"),
    "run_sql_query": ("Run a SQL query on the analytics database", "Run a SQL query on the analytics database"),
    "restart_service": ("Restart a systemd service on a server", "Restart the nginx service on the server"),
    "order_pizza": ("Order a pizza for delivery", "Order a pepperoni pizza for delivery"),
    "set_reminder": ("Set a reminder that notifies the user", "Set a reminder to call mum"),
    "play_music": ("Play a song on the speakers", "Play a song on the speakers"),
}


def _agent(folder: Path, servers: dict[str, Any], **extra: Any) -> Path:
    path = folder / "agent.yaml"
    doc = {"name": "desk", "systemPrompt": "You help with errands.", "mcpServers": servers, **extra}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _raw(folder: Path, name: str, tools: list[dict[str, Any]], *extra: str, include: str = "agent") -> dict[str, Any]:
    (folder / f"{name}.tools.json").write_text(json.dumps(tools))
    return {
        "type": "stdio",
        "command": sys.executable,
        "args": [str(RAW), str(folder / f"{name}.jsonl"), "--tools", str(folder / f"{name}.tools.json"), *extra],
        "serverToolDefaults": {"include": include, "permissionRequired": False},
    }


def _calls(log: Path) -> list[str]:
    lines = log.read_text().splitlines() if log.exists() else []
    return [r["name"] for r in map(json.loads, lines) if r["method"] == "tools/call"]


def _env(model_cache: Path, folder: Path) -> dict[str, str]:
    return {**os.environ, "CONTEXTSIEVE_CACHE": str(model_cache), "CONTEXTSIEVE_DATA": str(folder / "data")}


def result(r: Any) -> dict[str, Any]:
    assert not r.is_error, r.content
    return json.loads(r.content[0].text)


@pytest.mark.parametrize("transport", ["http", "memory"])
@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_twelve_hosts_eight_rounds_each_get_their_own_offer(
    model_cache: Path,
    int8,  # noqa: ANN001
    tmp_path: Path,
    mode: str,
    transport: str,
) -> None:
    """Item 1: every request of the 2026-07-28 protocol used one gateway state: stateless clients were
    told 'not offered for this task' right after their own set_task offered the tool (10 of 48), or
    given another client's tools (2 of 48). Each client here runs 8 tasks (its own tool and one
    other's, in turn) in its conversation and calls the tool its set_task offered: all 96 calls answer
    from the right tool, each runs once, and a handshake connection lists its own offer only."""
    tools = [{"name": n, "description": d, "inputSchema": {"type": "object"}} for n, (d, _) in TASKS.items()]
    agent = _agent(tmp_path, {"desk": _raw(tmp_path, "desk", tools)}, settings={"contextTopN": 3})
    names = list(TASKS)
    wrong: list[str] = []

    async def client(where: Any, i: int) -> None:
        async with Client(where, mode=mode, read_timeout_seconds=120) as c:
            conversation = None
            for r in range(8):
                tool = names[(i + r * 5) % 12] if r % 2 else names[i]
                args: dict[str, Any] = {"message": TASKS[tool][1]}
                if conversation is not None:
                    args["conversation"] = conversation
                got = result(await c.call_tool("set_task", args))
                conversation = got["conversation"]
                offered = got["tools"]
                if f"desk_{tool}" not in offered:
                    wrong.append(f"client {i} round {r}: {tool} not offered: {offered}")
                    continue
                if mode == "legacy":  # a connection lists its own conversation's offer, no other's
                    listed = {t.name for t in (await c.list_tools()).tools} - {
                        "set_task",
                        "select_context",
                        "search_tools",
                    }
                    if listed != set(offered):
                        wrong.append(f"client {i} round {r}: lists {sorted(listed)}, offered {offered}")
                answer = await c.call_tool(f"desk_{tool}", {"client": i, "round": r})
                if answer.is_error or json.loads(answer.content[0].text) != {"tool": tool, "client": i, "round": r}:
                    wrong.append(f"client {i} round {r}: {answer.content}")

    async def main(where: Any) -> None:
        async with anyio.create_task_group() as tg:
            for i in range(12):
                tg.start_soon(client, where, i)

    if transport == "http":
        with http_server(
            model_cache, agent=agent, command="gateway", token=None, env=_env(model_cache, tmp_path)
        ) as url:
            anyio.run(main, url)
    else:  # twelve hosts of one gateway in process (each its own connection on the handshake)
        from contextsieve.engine import Engine
        from contextsieve.mcp_server.gateway import build_gateway

        engine = Engine.from_file(agent, embedder=int8, cache_dir=tmp_path / "cache")
        anyio.run(main, build_gateway(engine))
    assert wrong == []
    assert len(_calls(tmp_path / "desk.jsonl")) == 96  # each call ran once


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_a_first_contact_offers_tools_and_old_offers_stay_callable(
    model_cache: Path,
    int8,  # noqa: ANN001
    tmp_path: Path,
    mode: str,
) -> None:
    """Item 7: before set_task the host saw no agent tool, and a tool offered in the previous task was
    refused. Now the first tools/list has the always tools and a starter offer (the tools this agent
    used most; before any use, those its description names), and a tool offered before stays callable
    in the conversation."""
    tools = [{"name": n, "description": d, "inputSchema": {"type": "object"}} for n, (d, _) in TASKS.items()]
    servers = {"desk": _raw(tmp_path, "desk", tools), "ops": _raw(tmp_path, "ops", tools[:1], include="always")}
    agent = _agent(tmp_path, servers, systemPrompt="You order pizza and play music for the user.")
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "contextsieve", "gateway", str(agent)], env=_env(model_cache, tmp_path)
    )

    async def main() -> None:
        async with Client(params, mode=mode, read_timeout_seconds=120) as c:
            with anyio.fail_after(60):  # both servers listed (they start side by side: ops may come first)
                while not {"ops_get_weather", "desk_order_pizza"} <= {t.name for t in (await c.list_tools()).tools}:
                    await anyio.sleep(0.1)
            first = {t.name for t in (await c.list_tools()).tools}
            assert {"ops_get_weather", "desk_order_pizza", "desk_play_music"} <= first, first
            assert "desk_book_hotel" not in first  # the starter: the tools the description names
            assert result(await c.call_tool("desk_play_music", {"song": "x"})) == {"tool": "play_music", "song": "x"}
            task = result(await c.call_tool("set_task", {"message": TASKS["book_hotel"][1]}))
            conv = task["conversation"]
            assert "desk_book_hotel" in task["tools"]
            later = {"message": TASKS["send_email"][1], "conversation": conv}
            assert "desk_book_hotel" not in result(await c.call_tool("set_task", later))["tools"]
            again = await c.call_tool("desk_book_hotel", {"city": "Paris"})  # offered in the previous task
            assert result(again) == {"tool": "book_hotel", "city": "Paris"}

    anyio.run(main)


def test_answers_say_which_servers_are_down_or_starting(model_cache: Path, int8, tmp_path: Path) -> None:  # noqa: ANN001
    """Items 4 and 5: a server stuck at start-up held the first set_task for 61.4 s (twice --timeout plus
    one) with one progress notification; set_task never said why it offered nothing and search_tools
    offered a down server's tools. Now the first task waits at most 10 s, with progress at least every
    5 s, and says which server is still starting; a down server is named, and search_tools marks its
    tools unavailable."""
    tools = [{"name": n, "description": d, "inputSchema": {"type": "object"}} for n, (d, _) in TASKS.items()]
    stuck = {"type": "stdio", "command": sys.executable, "args": ["-c", "import time; time.sleep(600)"]}
    down = _raw(tmp_path, "down", tools[:2], "--fail-if", str(tmp_path / "down.fail"))
    servers = {"desk": _raw(tmp_path, "desk", tools[2:]), "stuck": stuck, "broken": down}
    agent = _agent(tmp_path, servers)
    env = _env(model_cache, tmp_path)
    subprocess.run(  # a listing of "broken" in the cache, while it still starts: then it breaks
        [sys.executable, "-m", "contextsieve", "tools", str(agent), "--timeout", "5"], env=env, capture_output=True
    )
    (tmp_path / "down.fail").write_text("")
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "contextsieve", "gateway", str(agent), "--timeout", "30"],
        env=env,
    )
    progress: list[float] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append(time.monotonic())

    async def main() -> None:
        async with Client(params, read_timeout_seconds=120) as c:
            t0 = time.monotonic()
            got = result(
                await c.call_tool("set_task", {"message": TASKS["search_flights"][1]}, progress_callback=on_progress)
            )
            took = time.monotonic() - t0
            assert took <= 15, took
            assert "desk_search_flights" in got["tools"]
            notes = " ".join(got["notes"])
            assert "'stuck' is still starting" in notes and "'broken' is down" in notes, notes
            assert "desk_get_weather" not in got["tools"]  # the broken server's tool, from its cached listing
            gaps = [b - a for a, b in zip([t0, *progress], [*progress, t0 + took])]
            assert progress and max(gaps) <= 5.5, gaps
            found = result(await c.call_tool("search_tools", {"query": "weather forecast for a city", "limit": 3}))
            weather = next(t for t in found["tools"] if t["name"] == "broken_get_weather")
            assert weather["available"] is False and "down" in weather["unavailable"]

    anyio.run(main)


def test_the_gateway_on_the_bundled_example_says_so_and_exits(tmp_path: Path) -> None:
    """Item 6: `contextsieve gateway $(contextsieve example-agent)` started npx for a folder that does not
    exist, resolved placeholder host names, printed 16 warnings and offered nothing."""
    env = {**os.environ, "CONTEXTSIEVE_DATA": str(tmp_path / "data")}
    done = subprocess.run(
        [sys.executable, "-m", "contextsieve", "gateway", str(example_agent_path())],
        input="",
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 1
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "placeholders" in lines[0], done.stderr


def _engine_on_test_server(tmp_path: Path, tools: list[dict[str, Any]], include: str = "always") -> Any:
    from contextsieve.engine import Engine

    (tmp_path / "tools.json").write_text(json.dumps(tools))
    server = {
        "type": "stdio",
        "command": sys.executable,
        "args": [str(DATA / "mcp_test_server.py"), str(tmp_path / "tools.json")],
        "serverToolDefaults": {"include": include, "permissionRequired": False},
    }
    return Engine.from_file(_agent(tmp_path, {"probe": server}), embedder=FakeEmbedder(), cache_dir=tmp_path / "cache")


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_a_tool_that_leaves_the_list_during_its_call_returns_what_it_ran(tmp_path: Path, mode: str) -> None:
    """Item 3: the bookkeeping after the call looked the vanished tool up (agent.get) and turned the call
    that ran into an error (code 0 on the handshake, -32603 on 2026-07-28), with a traceback; a host that
    retries runs it twice."""
    from contextsieve.mcp_server.gateway import build_gateway

    engine = _engine_on_test_server(tmp_path, [{"name": "vanish", "description": "Leave while running"}])

    async def main() -> None:
        async with Client(build_gateway(engine), mode=mode) as c:
            with anyio.fail_after(60):
                while "probe_vanish" not in {t.name for t in (await c.list_tools()).tools}:
                    await anyio.sleep(0.1)
            await c.call_tool("set_task", {"message": "leave while running"})  # a task: its calls are recorded
            got = await c.call_tool("probe_vanish", {"seconds": 1.5, "n": 7})
            assert result(got) == {"tool": "vanish", "seconds": 1.5, "n": 7}
            assert "probe_vanish" not in {t.name for t in (await c.list_tools()).tools}  # it did leave

    anyio.run(main)
    assert not engine.agent.has("tool:probe:vanish")


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_select_context_on_a_cold_cache_offers_the_always_tools(tmp_path: Path, mode: str) -> None:
    """Item 2: with no cached listing, select_context offered '0 rules, 0 references, 0 tools' for the
    gateway's whole life while set_task offered the always tools (its session began before the server
    listed them)."""
    from contextsieve.mcp_server.gateway import build_gateway

    tools = [{"name": n, "description": f"{n} things"} for n in ("read", "write", "list")]
    engine = _engine_on_test_server(tmp_path, tools)
    assert engine.agent.tools == []  # nothing listed, nothing cached

    async def main() -> None:
        async with Client(build_gateway(engine), mode=mode) as c:
            ctx = result(await c.call_tool("select_context", {"message": "list the things"}))
            assert sorted(t["name"] for t in ctx["tools"]) == ["probe_list", "probe_read", "probe_write"], ctx
            task = result(await c.call_tool("set_task", {"message": "list the things"}))
            assert sorted(task["tools"]) == ["probe_list", "probe_read", "probe_write"]

    anyio.run(main)


def test_a_stateless_call_of_another_conversations_tool_teaches_nothing(tmp_path: Path) -> None:
    """Found by probing: a stateless host with no task called a tool another host's search offered, and
    the gateway recorded that host's message as an example of it. A call that names no conversation
    (no handle in its _meta) teaches nothing; one that names it lists and learns for its own."""
    from contextsieve.mcp_server.gateway import build_gateway
    from contextsieve.mcp_server.gateway_state import CONVERSATION_META

    tools = [{"name": n, "description": d} for n, (d, _) in TASKS.items()]
    engine = _engine_on_test_server(tmp_path, tools, include="agent")

    async def main() -> None:
        gateway = build_gateway(engine)
        async with Client(gateway) as b, Client(gateway) as c:  # two hosts of the 2026-07-28 protocol
            with anyio.fail_after(60):
                while not engine.agent.tools:
                    await anyio.sleep(0.1)
            got = result(await b.call_tool("set_task", {"message": TASKS["play_music"][1]}))
            handle = got["conversation"]
            assert "probe_play_music" in got["tools"]
            mine = await b.list_tools(meta={CONVERSATION_META: handle})
            assert {t.name for t in mine.tools} - {"set_task", "select_context", "search_tools"} == set(got["tools"])
            await c.call_tool("probe_play_music", {"song": "x"})  # C names no conversation: B's tool, no lesson
            assert engine.store.usage().counts(engine.store.usage_scope) == {}
            await b.call_tool("probe_play_music", {"song": "y"}, meta={CONVERSATION_META: handle})
            learned = engine.store.usage().counts(engine.store.usage_scope)
            assert {str(k) for k in learned} == {"tool:probe:play_music"}

    anyio.run(main)


def test_only_the_first_task_waits_for_a_stuck_server(model_cache: Path, int8, tmp_path: Path) -> None:  # noqa: ANN001
    """Found by probing: while a server was stuck in its first start, every gateway call waited 10 s,
    not just the first: the bound is one deadline for every call waiting for that start."""
    tools = [{"name": n, "description": d, "inputSchema": {"type": "object"}} for n, (d, _) in TASKS.items()]
    stuck = {"type": "stdio", "command": sys.executable, "args": ["-c", "import time; time.sleep(600)"]}
    agent = _agent(tmp_path, {"desk": _raw(tmp_path, "desk", tools), "stuck": stuck})
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "contextsieve", "gateway", str(agent), "--timeout", "60"],
        env=_env(model_cache, tmp_path),
    )

    async def main() -> None:
        async with Client(params, read_timeout_seconds=120) as c:
            t0 = time.monotonic()
            result(await c.call_tool("set_task", {"message": TASKS["book_hotel"][1]}))
            first = time.monotonic() - t0
            t1 = time.monotonic()
            for tool in ("select_context", "set_task", "search_tools"):
                args = {"query": "hotel"} if tool == "search_tools" else {"message": TASKS["send_email"][1]}
                result(await c.call_tool(tool, args))
            later = time.monotonic() - t1
            assert first <= 15 and later < 5, (first, later)

    anyio.run(main)


def test_a_copy_of_the_bundled_example_is_refused_too(tmp_path: Path) -> None:
    copy = tmp_path / "my-agent.yaml"
    copy.write_bytes(example_agent_path().read_bytes())
    done = subprocess.run(
        [sys.executable, "-m", "contextsieve", "gateway", str(copy)],
        input="",
        capture_output=True,
        text=True,
        env={**os.environ, "CONTEXTSIEVE_DATA": str(tmp_path / "data")},
        timeout=60,
    )
    assert done.returncode == 1 and "placeholders" in done.stderr, done.stderr


def test_a_history_that_cannot_be_written_never_stops_a_task(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Found by probing a read-only data folder: the gateway recorded the last task's outcome at each
    set_task without a guard, so once recording failed every later set_task and select_context was an
    error and the offer never followed the host's tasks. Here the history is a FIFO (never opened:
    reading it warns, recording raises EmbeddingCacheError), as any history that cannot be written."""
    import logging
    import warnings

    from contextsieve.engine import Engine
    from contextsieve.errors import UsageLogWarning
    from contextsieve.mcp_server.gateway import build_gateway

    tools = [{"name": n, "description": d} for n, (d, _) in TASKS.items()]
    (tmp_path / "tools.json").write_text(json.dumps(tools))
    server = {
        "type": "stdio",
        "command": sys.executable,
        "args": [str(DATA / "mcp_test_server.py"), str(tmp_path / "tools.json")],
        "serverToolDefaults": {"include": "agent", "permissionRequired": False},
    }
    history = tmp_path / "history.fifo"
    os.mkfifo(history)

    class KeptEmbedder(FakeEmbedder):
        model_id = "fake-bag-of-words/1"  # an identity: what it learns is kept in the history file

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UsageLogWarning)
        engine = Engine.from_file(
            _agent(tmp_path, {"probe": server}), embedder=KeptEmbedder(), cache_dir=tmp_path / "cache", history=history
        )
        assert engine.history_path == history

        async def main() -> None:
            async with Client(build_gateway(engine), mode="legacy") as c:
                with anyio.fail_after(60):
                    while not engine.agent.tools:
                        await anyio.sleep(0.1)
                for tool in ("play_music", "get_weather", "order_pizza"):
                    got = await c.call_tool("set_task", {"message": TASKS[tool][1]})
                    assert not got.is_error, got
                    assert f"probe_{tool}" in result(got)["tools"]
                    ran = await c.call_tool(f"probe_{tool}", {"n": 1})
                    assert not ran.is_error, ran
                ctx = await c.call_tool("select_context", {"message": TASKS["send_email"][1]})
                assert not ctx.is_error, ctx

        with caplog.at_level(logging.DEBUG, logger="contextsieve"):
            anyio.run(main)
    said = [r for r in caplog.records if "recording" in r.getMessage()]
    warned = [r.getMessage() for r in said if r.levelno == logging.WARNING]
    assert len(warned) == 1 and "history.fifo" in warned[0], warned  # said once, with the file
    assert any("outcome" in r.getMessage() for r in said) and len(said) >= 5  # every later one at debug
