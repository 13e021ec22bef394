"""What belongs to an agent stays its own over time, checked with real ``serve`` and ``gateway`` processes
and the MCP SDK as the host: a rename of the agent file, a move of its folder, an edit of its name and a
copy of a project that keeps its own ``--stash`` file all find what the agent stashed; another agent
written at the same path does not; a tool listed later never takes a name the host holds; tools whose
names hold ``:`` keep their place (always tools across serve processes on one store)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from mcp import Client, StdioServerParameters

from tests.helpers.mcp_results import result
from tests.helpers.servers import http_server

DATA = Path(__file__).parents[1] / "data"
TEST_SERVER = DATA / "mcp_test_server.py"
SECRET = "The Lisbon office closes early on 24 December; the alarm code is 4471."
QUERY = "when does the Lisbon office close at Christmas"

RULES = [
    {"name": "fares", "text": "Quote fares in EUR with taxes included.", "include": "agent"},
    {"name": "visas", "text": "Remind travellers to check visa rules for their passport.", "include": "agent"},
    {"name": "tone", "text": "Answer in two sentences at most.", "include": "always"},
]


def write_agent(path: Path, name: str | None = "travel-desk", prompt: str = "You help travellers.") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    doc: dict[str, Any] = {"systemPrompt": prompt, "rules": RULES}
    if name is not None:
        doc = {"name": name, **doc}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def serve(agent: Path, env: dict[str, str], *args: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable, args=["-m", "contextsieve", "serve", str(agent), "--offline", *args], env=env
    )


def environment(model_cache: Path, data: Path) -> dict[str, str]:
    return {**os.environ, "CONTEXTSIEVE_CACHE": str(model_cache), "CONTEXTSIEVE_DATA": str(data)}


async def stash(params: StdioServerParameters) -> None:
    async with Client(params, read_timeout_seconds=120) as c:
        result(await c.call_tool("stash_context", {"segments": [{"text": SECRET}]}))


async def found(params: StdioServerParameters) -> list[str]:
    async with Client(params, read_timeout_seconds=120) as c:
        got = result(await c.call_tool("retrieve_stashed_context", {"query": QUERY}))
        return [s["text"] for s in got["segments"]]


def stderr_of(agent: Path, env: dict[str, str], *args: str) -> str:
    """What ``serve`` says on stderr when its host leaves at once."""
    done = subprocess.run(
        [sys.executable, "-m", "contextsieve", "serve", str(agent), "--offline", *args],
        input="",
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    return done.stderr


def test_rename_move_and_name_edit_find_the_stash(model_cache: Path, int8, tmp_path: Path) -> None:  # noqa: ANN001
    """Item 1: each of these opened an empty namespace without a word (the identity was the name plus a
    digest of the file's path)."""
    env = environment(model_cache, tmp_path / "data")
    agent = write_agent(tmp_path / "proj" / "agent.yaml")
    anyio.run(stash, serve(agent, env))
    renamed = agent.with_name("billing.yaml")
    agent.rename(renamed)
    assert anyio.run(found, serve(renamed, env)) == [SECRET]
    shutil.move(str(tmp_path / "proj"), str(tmp_path / "elsewhere"))
    moved = tmp_path / "elsewhere" / "billing.yaml"
    assert anyio.run(found, serve(moved, env)) == [SECRET]
    moved.write_text(moved.read_text().replace("name: travel-desk", "name: Travel Desk"))
    assert anyio.run(found, serve(moved, env)) == [SECRET]


def test_a_project_copy_with_its_own_store_finds_it(model_cache: Path, int8, tmp_path: Path) -> None:  # noqa: ANN001
    env = environment(model_cache, tmp_path / "data")
    agent = write_agent(tmp_path / "proj" / "agent.yaml")
    anyio.run(stash, serve(agent, env, "--stash", str(tmp_path / "proj" / "stash.db")))
    shutil.copytree(tmp_path / "proj", tmp_path / "copy")
    copy = tmp_path / "copy" / "agent.yaml"
    params = serve(copy, env, "--stash", str(tmp_path / "copy" / "stash.db"))
    assert anyio.run(found, params) == [SECRET]
    assert anyio.run(found, serve(agent, env, "--stash", str(tmp_path / "proj" / "stash.db"))) == [SECRET]


def test_a_copy_on_the_default_store_is_told_how_to_adopt(model_cache: Path, int8, tmp_path: Path) -> None:  # noqa: ANN001
    """A copy beside the original is another agent (it could become one): it starts empty, and serve
    names the original's store and namespace and the one command that adopts them; the command works."""
    env = environment(model_cache, tmp_path / "data")
    agent = write_agent(tmp_path / "a" / "agent.yaml")
    anyio.run(stash, serve(agent, env))
    copy = tmp_path / "b" / "agent.yaml"
    copy.parent.mkdir()
    shutil.copy(agent, copy)
    assert anyio.run(found, serve(copy, env)) == []
    said = stderr_of(copy, env)
    assert "stashed data that may be this agent's" in said and "1 segments" in said, said
    command = next(line for line in said.splitlines() if "contextsieve stash adopt" in line)
    argv = command.split("contextsieve stash adopt ", 1)[1].split()
    done = subprocess.run(
        [sys.executable, "-m", "contextsieve", "stash", "adopt", *argv], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr
    assert anyio.run(found, serve(copy, env)) == [SECRET]


def test_another_agent_at_the_same_path_sees_nothing(model_cache: Path, int8, tmp_path: Path) -> None:  # noqa: ANN001
    """Item 2: an unnamed /app/agent.yaml of two containers on one data volume shared one identity."""
    env = environment(model_cache, tmp_path / "data")
    path = tmp_path / "app" / "agent.yaml"
    write_agent(path, None, "You answer payroll questions for the HR team.")
    anyio.run(stash, serve(path, env))
    write_agent(path, None, "You plan trips for travellers.")
    path.write_text(path.read_text().replace("fares", "routes").replace("visas", "hotels"))
    assert anyio.run(found, serve(path, env)) == []
    shared = tmp_path / "shared.db"
    anyio.run(stash, serve(path, env, "--stash", str(shared)))
    write_agent(path, None, "You answer payroll questions for the HR team.")
    assert anyio.run(found, serve(path, env, "--stash", str(shared))) == []  # one shared store: its own only


# -- tool names --------------------------------------------------------------------------------------


def _test_server(tools: Path, entries: list[dict[str, Any]]) -> dict[str, Any]:
    tools.write_text(json.dumps(entries))
    return {
        "type": "stdio",
        "command": sys.executable,
        "args": [str(TEST_SERVER), str(tools)],
        "serverToolDefaults": {"include": "always", "permissionRequired": False},
    }


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_a_tool_listed_later_never_takes_a_name_the_host_holds(
    model_cache: Path,
    int8,  # noqa: ANN001
    tmp_path: Path,
    mode: str,
) -> None:
    """Item 3: server ``com.example``'s ``get forecast`` is offered under a hashed name; a tool another
    server lists later under exactly that name took it (the older tool moved to 12 hex digits) and the
    gateway forwarded the host's next call, with the forecast's arguments, to the newcomer."""
    servers = {
        "com.example": _test_server(tmp_path / "weather.json", [{"name": "get forecast", "description": "Forecast"}]),
        "com_example": _test_server(tmp_path / "other.json", [{"name": "add_tool", "description": "Add a tool"}]),
    }
    agent = tmp_path / "agent.yaml"
    agent.write_text(yaml.safe_dump({"name": "gw", "systemPrompt": "You help.", "mcpServers": servers}))
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "contextsieve", "gateway", str(agent)],
        env=environment(model_cache, tmp_path / "data"),
    )

    async def names(c: Client, wait_for: str = "Forecast") -> dict[str, str]:
        with anyio.fail_after(60):  # the downstream servers start with the gateway
            while True:
                listed = {t.name: t.description or "" for t in (await c.list_tools()).tools}
                if wait_for in listed.values():
                    return listed
                await anyio.sleep(0.1)

    async def first() -> tuple[str, str]:
        async with Client(params, mode=mode, read_timeout_seconds=120) as c:
            held = next(n for n, d in (await names(c)).items() if d == "Forecast")
            assert held.startswith("com_example_get_forecast_"), held
            claim = held[len("com_example_") :]
            result(await c.call_tool("com_example_add_tool", {"name": claim, "description": "Not the forecast"}))
            listed = await names(c, "Not the forecast")
            newcomer = next(n for n, d in listed.items() if d == "Not the forecast")
            assert listed[held] == "Forecast" and newcomer != held
            assert result(await c.call_tool(held, {"city": "Oslo"})) == {"tool": "get forecast", "city": "Oslo"}
            return held, newcomer

    held, newcomer = anyio.run(first)

    async def again() -> None:  # the next gateway process of the agent: the same names
        async with Client(params, mode=mode, read_timeout_seconds=120) as c:
            listed = await names(c)
            assert listed[held] == "Forecast" and listed[newcomer] == "Not the forecast"
            assert result(await c.call_tool(held, {"city": "Oslo"})) == {"tool": "get forecast", "city": "Oslo"}

    anyio.run(again)


def test_tools_named_with_colons_keep_their_always_tools_across_processes(
    model_cache: Path, int8, tmp_path: Path
) -> None:  # noqa: ANN001
    """Item 4: a server key ``github:enterprise`` and a proxy's tool ``issues:create``: one add_to_session in
    a serve process made every later process on that store drop the always tools (2 tools, then 0),
    because the stored session items could not be read back."""
    tool = {"description": "Open an issue", "inputSchema": {"type": "object"}, "include": "always"}
    doc = {
        "name": "proxy",
        "systemPrompt": "You help.",
        "rules": RULES,
        "mcpServers": {
            "github:enterprise": {
                "type": "stdio",
                "command": "unused-offline",
                "tools": {"issues:create": tool, "issues:list": {**tool, "description": "List issues"}},
            }
        },
    }
    agent = tmp_path / "agent.yaml"
    agent.write_text(yaml.safe_dump(doc))
    store = str(tmp_path / "stash.db")

    async def tools(url: str, change: bool) -> list[str]:
        async with Client(url, read_timeout_seconds=120) as c:
            if change:
                result(await c.call_tool("add_to_session", {"item": "rule:fares"}))
            ctx = result(await c.call_tool("select_context", {"message": "open an issue about the broken login"}))
            return sorted(t["name"] for t in ctx["tools"])

    async def explained(url: str) -> dict[str, Any]:
        async with Client(url, read_timeout_seconds=120) as c:
            key = "tool:github%3Aenterprise:issues%3Acreate"
            return result(await c.call_tool("explain", {"message": "open an issue", "item": key}))

    for change in (True, False):  # the second process reads the session items the first one stored
        with http_server(model_cache, "--stash", store, agent=agent, token=None) as url:
            listed = anyio.run(tools, url, change)
            assert len(listed) == 2 and all(n.startswith("github_enterprise_issues_") for n in listed), listed
    with http_server(model_cache, "--stash", store, agent=agent, token=None) as url:
        assert anyio.run(explained, url)["key"] == "tool:github%3Aenterprise:issues%3Acreate"


def test_a_damaged_registry_fails_open(model_cache: Path, int8, tmp_path: Path) -> None:  # noqa: ANN001
    """serve exited with 'the agent registry ... cannot be opened' for every new agent."""
    env = environment(model_cache, tmp_path / "data")
    (tmp_path / "data" / "agents.sqlite").mkdir(parents=True)  # a folder where the registry file should be
    agent = write_agent(tmp_path / "proj" / "agent.yaml")
    anyio.run(stash, serve(agent, env))
    assert anyio.run(found, serve(agent, env)) == [SECRET]  # under the identity of its path
    assert "contextsieve: warning: cannot open the agent registry" in stderr_of(agent, env)


def test_an_id_added_later_is_told_how_to_bring_its_data(model_cache: Path, int8, tmp_path: Path) -> None:  # noqa: ANN001
    """The printed command moved the segments within the old store, which the agent with its new id
    never opens: the data was stranded."""
    env = environment(model_cache, tmp_path / "data")
    agent = write_agent(tmp_path / "proj" / "agent.yaml")
    anyio.run(stash, serve(agent, env))
    agent.write_text("id: travel-desk-prod\n" + agent.read_text())
    said = stderr_of(agent, env)
    command = next(line for line in said.splitlines() if "contextsieve stash adopt" in line)
    assert "--from" in command, said
    argv = shlex.split(command.split("contextsieve stash adopt ", 1)[1])
    done = subprocess.run(
        [sys.executable, "-m", "contextsieve", "stash", "adopt", *argv], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr
    assert anyio.run(found, serve(agent, env)) == [SECRET]
