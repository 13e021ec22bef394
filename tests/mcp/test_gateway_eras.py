"""The gateway between hosts and servers of both protocol eras (issue 38, items 3-6), against real
processes: the SDK client as the host in both modes (in process, and over stdio to the CLI), a server
of the 2026-07-28 protocol only, a one-request-at-a-time server of the handshake era that answers
ping with -32601 (tests/data/mcp_raw_server.py), mcp-server-time from PyPI (both eras), the SDK test
server in its modern-only mode, and a child that ignores stdin EOF and SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from mcp import Client, MCPError, StdioServerParameters, types
from mcp.client.stdio import stdio_client
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from contextsieve.engine import Engine
from contextsieve.mcp_client.client import ListConfig
from contextsieve.mcp_server.gateway import build_gateway
from tests.helpers.fake_embedder import FakeEmbedder

DATA = Path(__file__).parents[1] / "data"
RAW = DATA / "mcp_raw_server.py"
TEST_SERVER = DATA / "mcp_test_server.py"


def time_command() -> str:
    local = Path(sys.executable).parent / "mcp-server-time"
    return str(local) if local.exists() else "mcp-server-time"


def raw(log: Path, era: str, *extra: str, include: str = "always") -> dict[str, Any]:
    """A ``mcp_raw_server.py`` server entry of the agent file (requests logged to ``log``)."""
    return {
        "type": "stdio",
        "command": sys.executable,
        "args": [str(RAW), str(log), "--era", era, *extra],
        "serverToolDefaults": {"include": include},
    }


def write_agent(folder: Path, servers: dict[str, Any]) -> Path:
    path = folder / "agent.yaml"
    path.write_text(yaml.safe_dump({"name": "eras", "systemPrompt": "You help.", "mcpServers": servers}))
    return path


def requests(log: Path) -> list[dict[str, Any]]:
    """What a raw server was sent, in order."""
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def text(result: Any) -> Any:
    assert not result.is_error, result.content
    return json.loads(result.content[0].text)


async def until(check: Callable[[], bool], seconds: float = 20.0) -> None:
    with anyio.fail_after(seconds):
        while not check():
            await anyio.sleep(0.05)


def all_up(gw: Any) -> Callable[[], bool]:
    return lambda: all(link.state == "up" for link in gw.links.values())


async def names(c: Client) -> set[str]:
    return {t.name for t in (await c.list_tools()).tools}


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_hosts_of_both_eras_call_servers_of_both_eras_without_ping(tmp_path: Path, mode: str) -> None:
    """Item 3 (and the ping of item 4): a server of the 2026-07-28 protocol only, a handshake-only
    server that answers ping with -32601, and mcp-server-time, through the gateway to a host on
    either protocol: every tool is listed and every call answers; each link speaks the server's era;
    nothing is pinged and no deprecation warning is raised. The old gateway's links were hard-coded
    to the handshake, so every call of the new server failed; and it pinged before each call, so the
    server answering -32601 was declared dead."""
    new_log, old_log = tmp_path / "new.jsonl", tmp_path / "old.jsonl"
    servers = {
        "new": raw(new_log, "modern"),
        "old": raw(old_log, "legacy"),
        "time": {"type": "stdio", "command": time_command(), "serverToolDefaults": {"include": "always"}},
    }
    engine = Engine.from_file(write_agent(tmp_path, servers), embedder=FakeEmbedder(), cache_dir=tmp_path / "cache")
    catalog = engine.connect(listing=ListConfig(timeout=60))  # the listing side speaks both eras too
    assert catalog.ok, catalog.summary()
    assert {"new:echo", "old:echo", "time:get_current_time"} <= {f"{t.server}:{t.name}" for t in engine.agent.tools}
    gateway = build_gateway(engine, listing=ListConfig(timeout=60))
    gw = gateway.contextsieve_gateway

    async def main() -> None:
        async with Client(gateway, mode=mode) as c:
            await until(all_up(gw), 60)
            assert {"new_echo", "old_echo", "time_get_current_time"} <= await names(c)
            assert text(await c.call_tool("new_echo", {"x": 1})) == {"tool": "echo", "x": 1}
            assert text(await c.call_tool("old_echo", {"x": 2})) == {"tool": "echo", "x": 2}
            now = text(await c.call_tool("time_get_current_time", {"timezone": "Asia/Tokyo"}))
            assert now["timezone"] == "Asia/Tokyo"
            assert text(await c.call_tool("new_echo", {"x": 3})) == {"tool": "echo", "x": 3}

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        anyio.run(main)
    assert [str(w.message) for w in caught if "Deprecation" in type(w.category).__name__] == []
    assert gw.links["new"].era == "2026-07-28" and gw.links["time"].era == "2026-07-28"
    assert gw.links["old"].era in HANDSHAKE_PROTOCOL_VERSIONS
    assert all(link.starts == 1 for link in gw.links.values()), {n: link.starts for n, link in gw.links.items()}
    for log in (new_log, old_log):
        assert "ping" not in [r["method"] for r in requests(log)]
    calls = [r for r in requests(new_log) if r["method"] == "tools/call"]
    assert [c["name"] for c in calls] == ["echo", "echo"] and {c["era"] for c in calls} == {"modern"}


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_a_slow_call_on_a_one_request_at_a_time_server_is_not_cut_or_probed(tmp_path: Path, mode: str) -> None:
    """Items 4 and 6: a 3 s call on a server that handles one request at a time, with a start-up
    limit of 1.5 s: it is not cut by that limit and its progress reaches the host; a second call sent
    meanwhile waits for the server and answers; the server is never probed, dropped or restarted,
    and each call ran once. The old gateway pinged before each call (-32601: declared dead, so no call
    got through) and cut every call at the start-up limit."""
    log = tmp_path / "old.jsonl"
    engine = Engine.from_file(
        write_agent(tmp_path, {"old": raw(log, "legacy")}), embedder=FakeEmbedder(), cache_dir=tmp_path / "cache"
    )
    engine.connect()
    gateway = build_gateway(engine, listing=ListConfig(timeout=1.5))
    gw = gateway.contextsieve_gateway
    steps: list[float] = []
    got: dict[str, Any] = {}

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        steps.append(progress)

    async def main() -> None:
        async with Client(gateway, mode=mode) as c:
            await until(all_up(gw))

            async def slow() -> None:
                got["slow"] = text(await c.call_tool("old_slow", {"seconds": 3}, progress_callback=on_progress))

            async with anyio.create_task_group() as tg:
                tg.start_soon(slow)
                await anyio.sleep(0.5)  # the server is busy with the slow call now
                t0 = time.monotonic()
                got["echo"] = text(await c.call_tool("old_echo", {"n": 1}))
                got["waited"] = time.monotonic() - t0

    anyio.run(main)
    assert got["slow"] == {"slept": 3.0} and got["echo"] == {"tool": "echo", "n": 1}
    assert got["waited"] > 1.5  # it waited for the slow call, which outlasted the start-up limit
    assert steps == [1, 2, 3, 4, 5, 6]  # progress every half second passed through
    assert gw.links["old"].starts == 1
    sent = requests(log)
    assert "ping" not in [r["method"] for r in sent]
    assert [r["name"] for r in sent if r["method"] == "tools/call"] == ["slow", "echo"]


def test_a_call_over_its_limit_fails_alone_and_the_server_stays(tmp_path: Path) -> None:
    """Item 6: with ``ListConfig(call_timeout=2)`` a 3 s call fails naming the limit (it is cancelled
    downstream and not sent again) while the connection stays: the next call answers on it (once this
    one-request-at-a-time server is done with the slow one, which it does not cancel)."""
    log = tmp_path / "old.jsonl"
    engine = Engine.from_file(
        write_agent(tmp_path, {"old": raw(log, "both")}), embedder=FakeEmbedder(), cache_dir=tmp_path / "cache"
    )
    engine.connect()
    gateway = build_gateway(engine, listing=ListConfig(timeout=5, call_timeout=2))
    gw = gateway.contextsieve_gateway

    async def main() -> None:
        async with Client(gateway, mode="auto") as c:
            await until(all_up(gw))
            t0 = time.monotonic()
            with pytest.raises(MCPError, match="call limit of 2 s"):
                await c.call_tool("old_slow", {"seconds": 3})
            assert time.monotonic() - t0 < 2.9
            assert text(await c.call_tool("old_echo", {"n": 2})) == {"tool": "echo", "n": 2}

    anyio.run(main)
    assert gw.links["old"].starts == 1
    assert [r["name"] for r in requests(log) if r["method"] == "tools/call"] == ["slow", "echo"]


def test_a_server_that_does_not_answer_the_probe_gets_the_handshake(tmp_path: Path) -> None:
    """Item 3: a handshake server that leaves ``server/discover`` unanswered (no error, nothing) makes
    the first start run out of its limit; the restart opens with the handshake at once, and calls go
    through. The start-up limit is 1.5 s here."""
    log = tmp_path / "old.jsonl"
    engine = Engine.from_file(
        write_agent(tmp_path, {"old": raw(log, "legacy", "--silent")}),
        embedder=FakeEmbedder(),
        cache_dir=tmp_path / "cache",
    )
    gateway = build_gateway(engine, listing=ListConfig(timeout=1.5))
    gw = gateway.contextsieve_gateway

    async def main() -> None:
        async with Client(gateway, mode="auto") as c:
            await until(all_up(gw))
            assert text(await c.call_tool("old_echo", {"n": 1})) == {"tool": "echo", "n": 1}

    anyio.run(main)
    link = gw.links["old"]
    assert (link.starts, link.mode) == (2, "legacy") and link.era in HANDSHAKE_PROTOCOL_VERSIONS
    assert [r["method"] for r in requests(log)][:2] == ["server/discover", "initialize"]


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_every_change_of_the_offer_is_announced(tmp_path: Path, mode: str) -> None:
    """Item 5: a host on either protocol hears of each change of its offer (the handshake:
    notifications/tools/list_changed; 2026-07-28: an event on its subscriptions/listen stream; both
    declare listChanged): a task, a search, a server's own list change (a 2026 server announcing on
    its listen stream, a handshake server by notification), a server going down (its tools leave the
    offer and a call of one names the real reason) and coming back on a later task. tools/list carries
    ttlMs/cacheScope on 2026-07-28. The old gateway declared listChanged false to 2026 hosts, answered
    subscriptions/listen with -32601 and took a down server's tools out silently."""
    fail = tmp_path / "new.fail"
    (tmp_path / "tools.json").write_text(json.dumps([{"name": "add_tool", "description": "add a tool"}]))
    servers = {
        "new": raw(tmp_path / "new.jsonl", "modern", "--fail-if", str(fail)),
        "sdk": {
            "type": "stdio",
            "command": sys.executable,
            "args": [str(TEST_SERVER), str(tmp_path / "tools.json"), "--modern-only"],
            "serverToolDefaults": {"include": "always"},
        },
        "old": {**raw(tmp_path / "old.jsonl", "legacy"), "tools": {"add_tool": {"include": "agent"}}},
        "time": {"type": "stdio", "command": time_command(), "serverToolDefaults": {"include": "agent"}},
    }
    engine = Engine.from_file(write_agent(tmp_path, servers), embedder=FakeEmbedder(), cache_dir=tmp_path / "cache")
    assert engine.connect(listing=ListConfig(timeout=60)).ok
    gateway = build_gateway(engine, listing=ListConfig(timeout=60))
    gw = gateway.contextsieve_gateway
    heard: list[str] = []

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            heard.append("list_changed")

    async def main() -> None:
        async with Client(gateway, mode=mode, message_handler=on_message) as c:
            await until(all_up(gw), 60)
            assert c.server_capabilities.tools is not None and c.server_capabilities.tools.list_changed
            listed = await c.list_tools()
            if mode == "auto":
                assert (listed.ttl_ms, listed.cache_scope) == (0, "private")
            async with anyio.create_task_group() as tg:
                if mode == "auto":
                    async with c.listen(tools_list_changed=True) as events:

                        async def follow() -> None:
                            async for event in events:
                                heard.append(type(event).__name__)

                        tg.start_soon(follow)
                        await steps(c)
                        tg.cancel_scope.cancel()
                else:
                    await steps(c)

    async def changed(before: int) -> None:
        await until(lambda: len(heard) > before, 10)

    async def steps(c: Client) -> None:
        n = len(heard)
        offer = json.loads(
            (await c.call_tool("set_task", {"message": "time in tokyo convert time zone"})).content[0].text
        )
        assert any(t.startswith("time_") for t in offer["tools"])
        await changed(n)
        n = len(heard)
        assert "old_add_tool" not in await names(c)  # an agent-mode tool the task did not select
        found = json.loads((await c.call_tool("search_tools", {"query": "Add a tool to this server."})).content[0].text)
        assert "old_add_tool" in [t["name"] for t in found["tools"]]
        await changed(n)
        for server in ("sdk", "new", "old"):  # a server's own list change, each era
            n = len(heard)
            await c.call_tool(f"{server}_add_tool", {"name": "fresh", "description": "a fresh tool"})
            await changed(n)
            await until(lambda: gw.links[server].relists >= 1, 10)
            assert f"{server}_fresh" in await names(c)
            assert text(await c.call_tool(f"{server}_fresh", {"k": 1}))["k"] == 1
        # the new server goes down: its process exits mid-call and cannot start again
        fail.write_text("x")
        n = len(heard)
        with pytest.raises(MCPError, match="may have run"):
            await c.call_tool("new_exit", {})
        await until(lambda: gw.links["new"].state == "down", 20)
        await changed(n)
        assert not any(name.startswith("new_") for name in await names(c))
        with pytest.raises(MCPError, match=r"new_echo.*unavailable.*--fail-if file exists") as refused:
            await c.call_tool("new_echo", {})
        assert "not offered" not in str(refused.value)
        # ... and back: a later task starts it again
        fail.unlink()
        gw.retry_seconds = 0
        n = len(heard)
        await c.call_tool("set_task", {"message": "time in tokyo convert time zone"})
        await until(lambda: gw.links["new"].state == "up", 20)
        await changed(n)
        assert "new_echo" in await names(c)
        assert text(await c.call_tool("new_echo", {"back": True})) == {"tool": "echo", "back": True}

    anyio.run(main)
    assert gw.links["new"].starts == 3  # the first start, the restart at once (failed), the retry


def test_a_tool_added_since_the_cached_listing_is_callable(tmp_path: Path) -> None:
    """Item 6: the gateway lists each server when it connects, so a tool the server added since the
    cached listing is offered and callable without ``contextsieve tools --refresh`` (and the cache is
    brought up to date). The old gateway refused it as not offered."""
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps([{"name": "first", "description": "the first tool"}]))
    server = {
        "type": "stdio",
        "command": sys.executable,
        "args": [str(TEST_SERVER), str(tools)],
        "serverToolDefaults": {"include": "always"},
    }
    path = write_agent(tmp_path, {"srv": server})
    Engine.from_file(path, embedder=FakeEmbedder(), cache_dir=tmp_path / "cache").connect()
    tools.write_text(json.dumps([{"name": "first", "description": "the first tool"}, {"name": "second"}]))
    engine = Engine.from_file(path, embedder=FakeEmbedder(), cache_dir=tmp_path / "cache")
    report = engine.connect()
    assert report.servers[0].source == "cache" and not engine.agent.has("tool:srv:second")
    gateway = build_gateway(engine)
    gw = gateway.contextsieve_gateway

    async def main() -> None:
        async with Client(gateway, mode="legacy") as c:
            await until(all_up(gw))
            assert "srv_second" in await names(c)
            assert text(await c.call_tool("srv_second", {"a": 1})) == {"tool": "second", "a": 1}

    anyio.run(main)
    again = Engine.from_file(path, embedder=FakeEmbedder(), cache_dir=tmp_path / "cache")
    assert again.connect().servers[0].source == "cache" and again.agent.has("tool:srv:second")


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie, dead but not reaped, does not count)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process states from /proc")
@pytest.mark.parametrize(("mode", "end"), [("auto", "eof"), ("legacy", "sigterm")])
def test_over_stdio_children_end_with_the_gateway(
    tmp_path: Path,
    model_cache: Path,
    int8: Any,  # noqa: ARG001 - builds the model in model_cache for the CLI
    mode: str,
    end: str,
) -> None:
    """Items 3, 5, 6 over real stdio: ``contextsieve gateway`` with the SDK client as the host on each
    protocol, a 2026-only server and a child that ignores stdin EOF and SIGTERM. Calls reach both;
    a 2026 host hears of the offer a task changed on its listen stream; nothing is written about deprecations; and the
    stubborn child ends with the gateway, whether the host just leaves (stdin EOF) or stops it with
    SIGTERM. The old gateway left the child running both ways."""
    pidfile = tmp_path / "child.pid"
    (tmp_path / "tools.json").write_text(json.dumps([{"name": "hello", "description": "say hello"}]))
    servers = {
        "new": raw(tmp_path / "new.jsonl", "modern", include="agent"),
        "stub": {
            "type": "stdio",
            "command": sys.executable,
            "args": [str(TEST_SERVER), str(tmp_path / "tools.json"), "--linger", str(pidfile)],
            "serverToolDefaults": {"include": "always"},
        },
    }
    path = write_agent(tmp_path, servers)
    env = {**os.environ, "CONTEXTSIEVE_CACHE": str(model_cache)}
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "contextsieve", "gateway", str(path), "--timeout", "60"], env=env
    )
    errors = tmp_path / "gateway.stderr"
    heard: list[Any] = []

    async def main() -> None:
        with errors.open("w") as errlog:
            async with Client(stdio_client(params, errlog=errlog), mode=mode, read_timeout_seconds=120) as c:
                assert c.server_capabilities.tools is not None and c.server_capabilities.tools.list_changed
                assert text(await c.call_tool("stub_hello", {})) == {"tool": "hello"}
                task = {"message": "Echo the arguments back."}
                if mode == "auto":
                    async with c.listen(tools_list_changed=True) as events:
                        await c.call_tool("set_task", task)
                        with anyio.fail_after(10):
                            async for event in events:
                                heard.append(event)
                                break
                else:
                    await c.call_tool("set_task", task)
                assert text(await c.call_tool("new_echo", {"x": 1})) == {"tool": "echo", "x": 1}
                if end == "sigterm":
                    gateway_pid = _gateway_pid(str(path))
                    os.kill(gateway_pid, signal.SIGTERM)
                    with anyio.fail_after(10):
                        while alive(gateway_pid):
                            await anyio.sleep(0.05)

    anyio.run(main)
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 10
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    if alive(child):
        os.kill(child, signal.SIGKILL)
        pytest.fail("the stubborn child outlived the gateway")
    assert "Deprecation" not in errors.read_text()
    if mode == "auto":
        assert heard, "no tools/list_changed event on the listen stream"


def _gateway_pid(agent: str) -> int:
    out = subprocess.run(["ps", "-ww", "-eo", "pid,ppid,args"], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines()[1:]:
        pid, _, args = line.split(None, 2)
        if "contextsieve gateway" in args and agent in args:
            return int(pid)
    raise AssertionError("no gateway process")
