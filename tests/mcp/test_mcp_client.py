"""contextsieve as an MCP client: real servers over stdio (the PyPI and npm reference servers and a
test server whose tool list the test changes), streamable HTTP on 127.0.0.1, an in-process SDK
server, and servers that fail in each way the issue names."""

from __future__ import annotations

import builtins
import json
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
import yaml

from contextsieve.agent.agent import McpServer
from contextsieve.agent.agentfile import load_agent, save_agent
from contextsieve.agent.items import IncludeMode
from contextsieve.engine import Engine
from contextsieve.errors import MissingExtraError
from contextsieve.mcp_client.client import ListConfig, list_tools_sync, list_via
from tests.helpers.agents import make_agent
from tests.helpers.fake_embedder import FakeEmbedder

SERVER = Path(__file__).parents[1] / "data" / "mcp_test_server.py"


def tools_file(folder: Path, tools: list[dict]) -> Path:
    path = folder / "tools.json"
    path.write_text(json.dumps(tools, ensure_ascii=False), encoding="utf-8")
    return path


def write_agent(folder: Path, servers: dict) -> Path:
    doc = {"name": "live", "systemPrompt": "You help.", "mcpServers": servers}
    path = folder / "agent.yaml"
    path.write_text(yaml.safe_dump(doc, allow_unicode=True, sort_keys=False), encoding="utf-8")
    return path


def processes_with(marker: str) -> list[str]:
    out = subprocess.run(["ps", "-ww", "-eo", "pid,args"], capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if marker in line and "ps -eo" not in line]


TOOLS = [
    {"name": "create_issue", "description": "Open an issue in the tracker with a title and body"},
    {"name": "no_description"},
    {"name": "天気", "description": "今日の天気を調べる (weather today)"},
    {
        "name": "merge_pr",
        "description": "Merge a pull request",
        "inputSchema": {
            "type": "object",
            "properties": {"number": {"type": "integer", "description": "the pull request number"}},
        },
    },
    {"name": "t5", "description": "five"},
    {"name": "t6", "description": "six"},
    {"name": "t7", "description": "seven"},
    {"name": "t8", "description": "eight"},
    {"name": "t9", "description": "nine"},
]


def test_in_process_server_pages_unicode_and_missing_descriptions() -> None:
    sys.path.insert(0, str(SERVER.parent))
    try:
        from mcp_test_server import make_server
    finally:
        sys.path.remove(str(SERVER.parent))
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = tools_file(Path(tmp), TOOLS)
        listing = anyio.run(list_via, "mem", make_server(path))
        assert listing.error is None
        assert [t["name"] for t in listing.tools] == [t["name"] for t in TOOLS]  # 3 pages of 4
        by = {t["name"]: t for t in listing.tools}
        assert by["no_description"]["description"] == "" and by["天気"]["description"].startswith("今日")
        assert by["merge_pr"]["inputSchema"]["properties"]["number"]["type"] == "integer"
        small = anyio.run(list_via, "mem", make_server(path), ListConfig(max_pages=2))
        assert small.tools is None and "more than 2 pages" in small.error


def test_stdio_server_tools_sync_by_content_with_file_overrides(tmp_path: Path) -> None:
    path = tools_file(tmp_path, TOOLS)
    agent_file = write_agent(
        tmp_path,
        {
            "tracker": {
                "type": "stdio",
                "command": sys.executable,
                "args": [str(SERVER), str(path)],
                "serverToolDefaults": {"include": "agent", "permissionRequired": False},
                "tools": {"merge_pr": {"include": "manual", "permissionRequired": True}},
            }
        },
    )
    cache = tmp_path / "cache"
    fake = FakeEmbedder()
    engine = Engine.from_file(agent_file, connect=True, embedder=fake, cache_dir=cache)
    report = engine.tool_catalog.servers[0]
    assert (report.source, report.found, len(report.added), report.error) == ("live", 9, 9, None)
    tools = {t.name: t for t in engine.agent.tools}
    assert engine.agent.include_mode(tools["create_issue"]) is IncludeMode.AGENT
    assert engine.agent.include_mode(tools["merge_pr"]) is IncludeMode.MANUAL
    assert engine.agent.permission_required(tools["merge_pr"]) and not engine.agent.permission_required(tools["t5"])
    picked = [str(e.key) for e in engine.select("please open an issue in the tracker").context.entries]
    assert "tool:tracker:create_issue" in picked and "tool:tracker:merge_pr" not in picked
    embedded = fake.texts

    # the server changes: one tool edited, one removed, one added
    changed = [dict(t) for t in TOOLS if t["name"] != "t9"] + [{"name": "close_issue", "description": "Close an issue"}]
    changed[0]["description"] = "Open a new issue in the tracker"
    tools_file(tmp_path, changed)
    cached = engine.connect()  # the cached listing: nothing changes, nothing is spawned
    assert cached.servers[0].source == "cache" and not cached.servers[0].added
    fresh = engine.connect(refresh=True)
    r = fresh.servers[0]
    assert (r.source, r.added, r.changed, r.removed) == ("live", ("close_issue",), ("create_issue",), ("t9",))
    engine.index()
    assert fake.texts - embedded == 2  # only the new and the edited tool are embedded
    assert "tool:tracker:t9" not in [str(t.key) for t in engine.agent.tools]

    # a restarted engine selects from the cached listing without starting the server
    tools_file(tmp_path, [])
    again = Engine.from_file(agent_file, connect=True, embedder=FakeEmbedder(), cache_dir=cache)
    assert again.tool_catalog.servers[0].source == "cache" and again.tool_catalog.servers[0].found == 9
    # live tools are not written into the agent file; its overrides are kept
    save_agent(again.agent, agent_file)
    doc = yaml.safe_load(agent_file.read_text(encoding="utf-8"))
    assert doc["mcpServers"]["tracker"]["tools"] == {"merge_pr": {"include": "manual", "permissionRequired": True}}
    assert len(load_agent(agent_file).tools) == 0


@pytest.fixture()
def http_server(tmp_path: Path) -> Iterator[tuple[str, str]]:
    path = tools_file(tmp_path, TOOLS[:5])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    token = "secret-token-do-not-log"
    proc = subprocess.Popen(
        [sys.executable, str(SERVER), str(path), "--http", str(port), "--token", token],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp", token
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_streamable_http_with_a_token_that_never_reaches_the_cache(http_server, tmp_path: Path) -> None:  # noqa: ANN001
    url, token = http_server
    agent_file = write_agent(
        tmp_path,
        {
            "web": {"type": "streamable-http", "url": url, "headers": {"Authorization": f"Bearer {token}"}},
            "locked": {"type": "streamable-http", "url": url, "headers": {"Authorization": "Bearer wrong"}},
        },
    )
    engine = Engine.from_file(agent_file, embedder=FakeEmbedder(), cache_dir=tmp_path / "cache")
    report = {r.server: r for r in engine.connect().servers}
    assert report["web"].found == 5 and report["web"].error is None
    assert report["locked"].error and report["locked"].found == 0
    for f in (tmp_path / "cache").rglob("*"):
        if f.is_file():
            assert token.encode() not in f.read_bytes()
    assert token not in json.dumps(engine.tool_catalog.to_dict())


def test_faults_are_reported_the_others_indexed_and_no_child_left(tmp_path: Path) -> None:
    marker = f"cs-fault-{tmp_path.name}"
    good = tools_file(tmp_path, TOOLS[:3])

    def py(code: str) -> dict:
        return {"type": "stdio", "command": sys.executable, "args": ["-c", f"# {marker}\n{code}"]}

    servers = {
        "good": {"type": "stdio", "command": sys.executable, "args": [str(SERVER), str(good), marker]},
        "missing": {"type": "stdio", "command": f"no-such-command-{marker}"},
        "exits": py("import sys; print('cannot start: no config', file=sys.stderr); sys.exit(2)"),
        "sleeps": py("import time; time.sleep(120)"),
        "garbage": py("import time; print('hello, I am not JSON-RPC', flush=True); time.sleep(120)"),
        "inside": {"type": "internal", "tool": "rules"},
    }
    engine = Engine.from_file(write_agent(tmp_path, servers), embedder=FakeEmbedder(), cache_dir=False)
    t0 = time.monotonic()
    catalog = engine.connect(listing=ListConfig(timeout=3))
    assert time.monotonic() - t0 < 20  # concurrently, each under its timeout
    r = {x.server: x for x in catalog.servers}
    assert r["good"].found == 3 and r["good"].error is None
    assert "command not found" in r["missing"].error
    assert r["exits"].error and "cannot start: no config" in r["exits"].stderr
    assert "no tool list within 3 s" in r["sleeps"].error
    assert "not JSON-RPC" in r["garbage"].error
    assert r["inside"].source == "skipped" and "internal" in r["inside"].note
    assert not catalog.ok and "cannot start: no config" in catalog.summary()
    assert [t.server for t in engine.agent.tools] == ["good"] * 3
    time.sleep(0.5)
    assert processes_with(marker) == []


def test_a_child_a_server_leaves_behind_ends_with_the_listing_and_both_eras_are_listed(tmp_path: Path) -> None:
    """Issue 38: a stdio server runs in a process group of its own that ends with its connection, so
    a process it started (here a sleeper that holds its stdout) goes too although the server itself
    exits on stdin EOF (the SDK's transport only ended the tree of a server that did not exit, so the
    sleeper lived on); and servers of either protocol era only are listed (the 2026-07-28 one by
    ``server/discover``, the handshake one by ``initialize``)."""
    marker = f"cs-left-{tmp_path.name}"
    tools = tools_file(tmp_path, TOOLS[:2])
    sleeper = f"{sys.executable} -c 'import time; time.sleep(120)' {marker}"
    raw = Path(__file__).parents[1] / "data" / "mcp_raw_server.py"
    servers = {
        "leaves": {
            "type": "stdio",
            "command": "sh",
            "args": ["-c", f"{sleeper} & exec {sys.executable} {SERVER} {tools}"],
        },
        "new": {
            "type": "stdio",
            "command": sys.executable,
            "args": [str(raw), str(tmp_path / "n.log"), "--era", "modern"],
        },
        "old": {
            "type": "stdio",
            "command": sys.executable,
            "args": [str(raw), str(tmp_path / "o.log"), "--era", "legacy"],
        },
    }
    engine = Engine.from_file(write_agent(tmp_path, servers), embedder=FakeEmbedder(), cache_dir=False)
    catalog = engine.connect(listing=ListConfig(timeout=20))
    assert catalog.ok, catalog.summary()
    found = {s: sorted(t.name for t in engine.agent.tools if t.server == s) for s in servers}
    assert found == {
        "leaves": ["create_issue", "no_description"],
        "new": ["add_tool", "echo", "exit", "slow"],
        "old": ["add_tool", "echo", "exit", "slow"],
    }
    sent = {
        s: [json.loads(x)["method"] for x in (tmp_path / f"{s[0]}.log").read_text().splitlines()]
        for s in ("new", "old")
    }
    assert sent["new"][0] == "server/discover" and "initialize" not in sent["new"]
    assert "initialize" in sent["old"]
    deadline = time.monotonic() + 5
    while processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_with(marker) == []


def test_reference_servers_from_pypi_and_npm(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    files = tmp_path / "files"
    files.mkdir()
    servers = {
        "time": {"type": "stdio", "command": "mcp-server-time", "args": []},
        "git": {"type": "stdio", "command": "mcp-server-git", "args": ["--repository", str(repo)]},
        "files": {
            "type": "stdio",
            "command": "npx",
            "args": ["-y", "@modelcontextprotocol/server-filesystem", str(files)],
        },
    }
    if shutil.which("mcp-server-time") is None:  # installed next to this Python by the test extra
        bindir = Path(sys.executable).parent
        servers["time"]["command"] = str(bindir / "mcp-server-time")
        servers["git"]["command"] = str(bindir / "mcp-server-git")
    fake = FakeEmbedder()
    engine = Engine.from_file(write_agent(tmp_path, servers), embedder=fake, cache_dir=tmp_path / "cache")
    catalog = engine.connect(listing=ListConfig(timeout=120))  # npx may fetch the package first
    assert catalog.ok, catalog.summary()
    names = {s: {t.name for t in engine.agent.tools if t.server == s} for s in servers}
    assert {"get_current_time", "convert_time"} <= names["time"]
    assert {"git_status", "git_diff_staged", "git_log", "git_commit"} <= names["git"]
    assert {"read_text_file", "write_file", "list_directory", "search_files"} <= names["files"]
    assert len(names["time"]) == 2 and len(names["git"]) >= 10 and len(names["files"]) >= 10
    assert all(t.input_schema.get("type") == "object" for t in engine.agent.tools)
    engine.index()
    before = fake.texts
    again = engine.connect(refresh=True, listing=ListConfig(timeout=120))
    assert all(r.source == "live" and not (r.added or r.changed or r.removed) for r in again.servers)
    engine.index()
    assert fake.texts == before  # the second run embeds nothing new


def test_missing_sdk_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    real = builtins.__import__

    def no_mcp(name, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        if name == "mcp" or name.startswith("mcp."):
            raise ImportError("No module named 'mcp'")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_mcp)
    with pytest.raises(MissingExtraError, match=r"^listing an agent's MCP servers needs .*contextsieve\[mcp\]"):
        list_tools_sync([McpServer("x", {"type": "stdio", "command": "x"})])
    # each entry point names itself (issue 40: the message was worded for listing servers from serve too)
    from contextsieve.mcp_server.gateway import build_gateway
    from contextsieve.mcp_server.server import build_server

    engine = Engine(make_agent(), embedder=FakeEmbedder(), cache_dir=False)
    for call, opening in (
        (engine.connect, "Engine.connect"),
        (lambda: build_server(engine), "contextsieve serve"),
        (lambda: build_gateway(engine), "contextsieve gateway"),
    ):
        with pytest.raises(MissingExtraError, match=rf"^{opening} .*needs the MCP Python SDK: .*contextsieve\[mcp\]"):
            call()


def test_inside_a_running_event_loop_connect_is_awaited_and_the_sync_call_says_so(tmp_path: Path) -> None:
    """Issue 27 item 18: inside asyncio.run, connect() and from_file(connect=True) raised an untyped
    RuntimeError from anyio ("Already running asyncio in this thread")."""
    import asyncio

    from contextsieve.errors import EventLoopError

    command = shutil.which("mcp-server-time") or str(Path(sys.executable).parent / "mcp-server-time")
    path = write_agent(tmp_path, {"time": {"type": "stdio", "command": command, "args": []}})

    async def host() -> tuple[set[str], set[str]]:
        with pytest.raises(EventLoopError, match="connect_async"):
            Engine.from_file(path, embedder=FakeEmbedder(), cache_dir=tmp_path / "cache", connect=True)
        engine = Engine.from_file(path, embedder=FakeEmbedder(), cache_dir=tmp_path / "cache")
        with pytest.raises(EventLoopError, match="connect_async"):
            engine.connect(refresh=True)
        assert not engine.agent.tools  # the refused call changed nothing
        catalog = await engine.connect_async(refresh=True, listing=ListConfig(timeout=60))
        assert catalog.ok, catalog.summary()
        live = {t.name for t in engine.agent.tools}
        other = Engine.from_file(path, embedder=FakeEmbedder(), cache_dir=tmp_path / "cache2")
        await asyncio.to_thread(other.connect, listing=ListConfig(timeout=60))  # the sync call from a worker thread
        return live, {t.name for t in other.agent.tools}

    live, threaded = asyncio.run(host())
    assert live == threaded == {"get_current_time", "convert_time"}
