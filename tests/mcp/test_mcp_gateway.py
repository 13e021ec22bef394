"""The gateway in front of real servers (mcp-server-time from PyPI, the filesystem server through npx):
the host sees only the offered tools, list_changed arrives after a new task, forwarded calls return
the downstream result, a refused call names the tool, and a killed downstream server is started
again once and then reported while the others keep working."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from mcp import Client, MCPError, StdioServerParameters, types

from contextsieve.agent.usage import example_text
from contextsieve.engine import Engine
from contextsieve.mcp_client.client import ListConfig
from contextsieve.mcp_server.gateway import build_gateway
from contextsieve.retrieval.cache import text_key
from tests.helpers.fake_embedder import FakeEmbedder

TASK = "What time is it in Tokyo? And list the directory with the notes."
TASK_KEY = text_key(example_text(TASK))  # how a usage log names a recorded request


def server_command(name: str) -> str:
    local = Path(sys.executable).parent / name
    return str(local) if local.exists() else name


@pytest.fixture()
def agent_file(tmp_path: Path) -> Path:
    files = tmp_path / "files"
    files.mkdir()
    (files / "notes.txt").write_text("buy milk\n")
    doc = {
        "name": "gw",
        "systemPrompt": "You help.",
        "settings": {"contextTopN": 4},
        "mcpServers": {
            "time": {
                "type": "stdio",
                "command": server_command("mcp-server-time"),
                "serverToolDefaults": {"include": "agent"},
            },
            "files": {
                "type": "stdio",
                "command": "npx",
                "args": ["-y", "@modelcontextprotocol/server-filesystem", str(files)],
                "serverToolDefaults": {"include": "agent"},
                "tools": {"list_allowed_directories": {"include": "always"}},
            },
        },
    }
    path = tmp_path / "agent.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def text(r: Any) -> str:
    assert not r.is_error, r.content
    return r.content[0].text


def test_gateway_offers_forwards_refuses_and_survives_a_dead_server(agent_file: Path, int8) -> None:  # noqa: ANN001
    engine = Engine.from_file(agent_file, embedder=int8, cache_dir=agent_file.parent / "cache")
    catalog = engine.connect(listing=ListConfig(timeout=120))
    assert catalog.ok, catalog.summary()
    gateway = build_gateway(engine, listing=ListConfig(timeout=120))
    gw = gateway.contextsieve_gateway
    changed: list[str] = []

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            changed.append("tools")

    async def main() -> None:
        async with Client(gateway, mode="legacy", message_handler=on_message) as c:
            first = {t.name for t in (await c.list_tools()).tools}
            assert first == {"set_task", "select_context", "search_tools", "files_list_allowed_directories"}
            offered = json.loads(text(await c.call_tool("set_task", {"message": TASK})))["tools"]
            first_offer = list(offered)
            assert "time_get_current_time" in offered and "files_list_directory" in offered
            assert "files_write_file" not in offered
            await anyio.sleep(0.2)
            assert changed, "no notifications/tools/list_changed after the task"
            listed = {t.name for t in (await c.list_tools()).tools}
            assert listed == {"set_task", "select_context", "search_tools", *offered}
            now = json.loads(text(await c.call_tool("time_get_current_time", {"timezone": "Asia/Tokyo"})))
            assert now["timezone"] == "Asia/Tokyo"
            listing = text(await c.call_tool("files_list_directory", {"path": str(agent_file.parent / "files")}))
            assert "notes.txt" in listing
            # learning from use: each successful call keeps the task as an example of its tool
            learned = engine.store.usage().records(engine.store.usage_scope, 50)  # kept as vectors, not words
            assert {str(k) for k in learned} == {"tool:time:get_current_time", "tool:files:list_directory"}
            assert all([e.hash for e in v] == [TASK_KEY] and v[0].text is None for v in learned.values())
            with pytest.raises(MCPError, match="files_write_file.*not offered"):
                await c.call_tool("files_write_file", {"path": "x", "content": "y"})
            found = json.loads(text(await c.call_tool("search_tools", {"query": "write a file", "limit": 2})))
            assert "files_write_file" in [f["name"] for f in found["tools"]]
            assert "files_write_file" in {t.name for t in (await c.list_tools()).tools}
            # a downstream error comes back unchanged, as the server's own result
            bad = await c.call_tool("time_get_current_time", {"timezone": "Not/AZone"})
            assert bad.is_error
            # kill the time server: it is started again once, then reported; files keeps working
            link = gw.links["time"]
            for attempt in range(2):
                assert _kill_children(server_command("mcp-server-time")) == 1
                await anyio.sleep(0.5)
                if attempt == 0:
                    again = json.loads(text(await c.call_tool("time_get_current_time", {"timezone": "UTC"})))
                    assert again["timezone"] == "UTC" and link.starts == 2, (link.starts, link.error)
            with pytest.raises(MCPError, match="time.*unavailable"):
                await c.call_tool("time_get_current_time", {"timezone": "UTC"})
            offered = {t.name for t in (await c.list_tools()).tools}  # a server known down: its tools go
            assert not any(n.startswith("time_") for n in offered) and "files_list_directory" in offered
            assert "notes.txt" in text(
                await c.call_tool("files_list_directory", {"path": str(agent_file.parent / "files")})
            )
            # the next task records the last one's outcome: the tools it selected and the host never
            # called become misses of the task's message (learning from the outcome)
            assert engine.store.usage().records(engine.store.usage_scope, 50, "misses") == {}
            await c.call_tool("set_task", {"message": "What time is it in Lisbon?"})
            misses = engine.store.usage().records(engine.store.usage_scope, 50, "misses")
            never = set(first_offer) - {
                "time_get_current_time",
                "files_list_directory",
                "files_list_allowed_directories",
            }
            assert {f"{k.server}_{k.name}" for k in misses} == never and never
            assert all([e.hash for e in v] == [TASK_KEY] for v in misses.values())

    anyio.run(main)


def _kill_children(command: str) -> int:
    out = subprocess.run(["ps", "-ww", "-eo", "pid,ppid,args"], capture_output=True, text=True, check=True).stdout
    me, killed = os.getpid(), 0
    for line in out.splitlines()[1:]:
        pid, ppid, args = line.split(None, 2)
        if int(ppid) == me and command.split("/")[-1] in args:
            os.kill(int(pid), signal.SIGKILL)
            killed += 1
    return killed


def test_gateway_over_stdio_from_the_cli(agent_file: Path, model_cache: Path, int8) -> None:  # noqa: ANN001
    env = {**os.environ, "CONTEXTSIEVE_CACHE": str(model_cache)}
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "contextsieve", "gateway", str(agent_file), "--timeout", "120"], env=env
    )

    async def main() -> None:
        async with Client(params, read_timeout_seconds=180) as c:
            await c.call_tool("set_task", {"message": "what time is it in Berlin"})
            names = {t.name for t in (await c.list_tools()).tools}
            assert "time_get_current_time" in names
            got = json.loads(text(await c.call_tool("time_get_current_time", {"timezone": "Europe/Berlin"})))
            assert got["timezone"] == "Europe/Berlin"

    anyio.run(main)


def test_stateless_clients_share_the_gateway_task(agent_file: Path) -> None:
    engine = Engine.from_file(agent_file, embedder=FakeEmbedder(), cache_dir=agent_file.parent / "cache2")
    engine.connect(listing=ListConfig(timeout=120))
    gateway = build_gateway(engine)

    async def main() -> None:
        async with Client(gateway) as c:  # the 2026-07-28 protocol: no connection state
            await c.call_tool("set_task", {"message": "time in tokyo convert time zone"})
            names = {t.name for t in (await c.list_tools()).tools}
            assert {"set_task", "search_tools"} <= names and any(n.startswith("time_") for n in names)

    anyio.run(main)


def test_a_downstream_tools_list_changed_relists_and_tells_the_host(tmp_path: Path) -> None:
    """The downstream server adds a tool and sends tools/list_changed while the gateway is connected:
    the gateway lists it again, the agent has the new tool, and the host is told."""
    tools = [{"name": "add_tool", "description": "add a tool to this server"}]
    engine = _test_server_engine(tmp_path, "tracker", tools)
    gateway = build_gateway(engine)
    changes: list[str] = []

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            changes.append("tools")

    async def main() -> None:
        async with Client(gateway, mode="legacy", message_handler=on_message) as c:
            assert "tracker_add_tool" in {t.name for t in (await c.list_tools()).tools}
            await c.call_tool("tracker_add_tool", {"name": "close_ticket", "description": "Close a support ticket"})
            for _ in range(50):
                if changes:
                    break
                await anyio.sleep(0.1)
            assert changes, "the host was not told"
            assert "tracker_close_ticket" in {t.name for t in (await c.list_tools()).tools}
            echoed = json.loads(text(await c.call_tool("tracker_close_ticket", {"id": 7})))
            assert echoed == {"tool": "close_ticket", "id": 7}
            # progress of a downstream call reaches the host
            await c.call_tool("tracker_add_tool", {"name": "slow", "description": "takes a while"})
            for _ in range(50):
                if "tracker_slow" in {t.name for t in (await c.list_tools()).tools}:
                    break
                await anyio.sleep(0.1)
            steps: list[tuple[float, float | None, str | None]] = []

            async def on_progress(progress: float, total: float | None, message: str | None) -> None:
                steps.append((progress, total, message))

            done = json.loads(text(await c.call_tool("tracker_slow", {}, progress_callback=on_progress)))
            assert done == {"tool": "slow"} and [s[0] for s in steps] == [1, 2, 3] and steps[-1][2] == "step 3"

    anyio.run(main)
    assert engine.agent.has("tool:tracker:close_ticket")


def test_a_call_that_may_have_run_is_never_sent_twice(tmp_path: Path) -> None:
    """Issue 27 item 9: a downstream server that crashes during a call, or answers something that is
    not a tool result, gives the host an error for that call; the call ran once, is not re-sent, and
    the gateway keeps serving (a crashed server is started again on the next call)."""
    tools = [{"name": n, "description": f"{n} on cue"} for n in ("crash", "malformed", "echo")]
    engine = _test_server_engine(tmp_path, "probe", tools)
    runs = tmp_path / "tools.json.runs"

    async def main() -> None:
        async with Client(build_gateway(engine), mode="legacy") as c:
            with pytest.raises(MCPError, match="not sent again"):
                await c.call_tool("probe_crash", {})
            assert runs.read_text().split() == ["crash"]  # ran once, not re-sent after the restart
            with pytest.raises(MCPError):  # the downstream SDK refuses to send it: its error passes on
                await c.call_tool("probe_malformed", {})
            assert runs.read_text().split() == ["crash", "malformed"]
            echoed = json.loads(text(await c.call_tool("probe_echo", {"x": 1})))
            assert echoed == {"tool": "echo", "x": 1}  # the server was started again and answers
            again = json.loads(text(await c.call_tool("probe_echo", {"x": 2})))
            assert again == {"tool": "echo", "x": 2}  # the malformed answer did not cost the restart

    anyio.run(main)


def test_a_storm_of_tools_list_changed_is_coalesced(tmp_path: Path) -> None:
    """Issue 27 item 10: 500 notifications from a downstream server cost a few re-listings (one
    running, at most one more queued), and the host is told a few times, not 500."""
    engine = _test_server_engine(tmp_path, "noisy", [{"name": "storm", "description": "notify many times"}])
    gateway = build_gateway(engine)
    link = gateway.contextsieve_gateway.links["noisy"]
    told: list[int] = []

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            told.append(1)

    async def main() -> None:
        async with Client(gateway, mode="legacy", message_handler=on_message) as c:
            await c.call_tool("noisy_storm", {"count": 500})
            for _ in range(50):  # let the last listing finish
                await anyio.sleep(0.1)
                if not link._relisting:
                    break

    anyio.run(main)
    assert 1 <= link.relists <= 20, link.relists
    assert len(told) <= 25, len(told)


def _test_server_engine(tmp_path: Path, server: str, tools: list[dict[str, str]]) -> Engine:
    """An engine whose agent has one stdio server, ``tests/data/mcp_test_server.py`` serving ``tools``
    (from ``tmp_path/tools.json``, all ``always``), connected once."""
    (tmp_path / "tools.json").write_text(json.dumps(tools))
    server_py = Path(__file__).parents[1] / "data" / "mcp_test_server.py"
    doc = {
        "name": "gw",
        "mcpServers": {
            server: {
                "type": "stdio",
                "command": sys.executable,
                "args": [str(server_py), str(tmp_path / "tools.json")],
                "serverToolDefaults": {"include": "always"},
            }
        },
    }
    (tmp_path / "agent.yaml").write_text(yaml.safe_dump(doc))
    engine = Engine.from_file(tmp_path / "agent.yaml", embedder=FakeEmbedder(), cache_dir=tmp_path / "cache")
    engine.connect()
    return engine


def test_a_stable_offer_grows_and_list_changed_comes_only_with_a_change(agent_file: Path) -> None:
    """Issue 29: with a stable offer over the session (``--stable-offer``) each task adds its tools to the offer; the
    same task again sends no ``tools/list_changed`` (the list did not change), a task needing a new
    tool sends one and keeps the earlier tools."""
    from contextsieve.mcp_server.common import ServeConfig
    from contextsieve.session.offer import OfferConfig

    engine = Engine.from_file(agent_file, embedder=FakeEmbedder(), cache_dir=agent_file.parent / "cache3")
    engine.connect(listing=ListConfig(timeout=120))
    gateway = build_gateway(engine, config=ServeConfig(offer=OfferConfig(mode="stable", span="session")))
    changed: list[str] = []

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            changed.append("tools")

    async def main() -> None:
        async with Client(gateway, mode="legacy", message_handler=on_message) as c:
            first = json.loads(text(await c.call_tool("set_task", {"message": "time in tokyo convert time zone"})))
            await anyio.sleep(0.1)
            assert changed == ["tools"] and any(n.startswith("time_") for n in first["tools"])
            same = json.loads(text(await c.call_tool("set_task", {"message": "time in tokyo convert time zone"})))
            await anyio.sleep(0.1)
            assert same["tools"] == first["tools"] and changed == ["tools"]  # nothing new: no notification
            more = json.loads(text(await c.call_tool("set_task", {"message": "list directory read file notes"})))
            await anyio.sleep(0.1)
            assert set(first["tools"]) < set(more["tools"]) and changed == ["tools", "tools"]

    anyio.run(main)


def test_a_first_task_right_after_the_start_is_chosen_from_the_servers_tools(tmp_path: Path) -> None:
    """`contextsieve gateway` on a cold listing cache (no ``engine.connect()``): a host's first
    ``set_task`` used to come back with ``{"tools": []}`` because the servers were still starting; it
    now waits for their first start (bounded by the listing timeout) and offers the time tools."""
    doc = {
        "name": "cold",
        "mcpServers": {
            "time": {
                "type": "stdio",
                "command": server_command("mcp-server-time"),
                "serverToolDefaults": {"include": "agent"},
            }
        },
    }
    path = tmp_path / "agent.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    engine = Engine.from_file(path, embedder=FakeEmbedder(), cache_dir=tmp_path / "cache")
    assert engine.agent.tools == []  # nothing listed, nothing cached

    async def main() -> None:
        for mode in ("legacy", "auto"):  # the handshake era and the 2026-07-28 protocol
            async with Client(build_gateway(engine, listing=ListConfig(timeout=120)), mode=mode) as c:
                offered = json.loads(text(await c.call_tool("set_task", {"message": "What time is it in Tokyo?"})))
                assert "time_get_current_time" in offered["tools"], (mode, offered)

    anyio.run(main)
