"""``contextsieve serve`` and ``contextsieve gateway`` start their transport at once and
load the model in the background. Real processes over stdio with the SDK client, every cache in a temp
dir (``$CONTEXTSIEVE_CACHE``, ``$NUMBA_CACHE_DIR``, ``$CONTEXTSIEVE_DATA`` empty at the start).

The model load is held back by a real means, not by timing: on an empty cache the server must build
the model's graph, which it does under the model cache's build lock (``ModelCache.build_lock``, an
``flock`` on ``<entry>.lock``); the test holds that lock, so the server's load waits until the test lets
go. While it is held, ``initialize``, ``tools/list``, the listings and (gateway) a forwarded call of a
downstream tool must answer, and a call that needs the model must wait, sending progress notifications
to a caller that asked for them; once the lock is released, the call completes. A failed load (the
cache's ``models`` folder is a file) is every such call's error result, with its cause, and logged on
stderr; the server goes on answering.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from contextsieve.agent.agentfile import example_agent_path
from tests.helpers.mcp_results import refused, result

MESSAGE = "How do I get a refund for a damaged parcel?"
STARTED = "loading the model in the background"
READY = "the model is ready"
WAITING = "waiting for the embedding model to load"


def _env(tmp: Path) -> dict[str, str]:
    return {
        **os.environ,
        "CONTEXTSIEVE_CACHE": str(tmp / "cache"),
        "NUMBA_CACHE_DIR": str(tmp / "numba"),
        "CONTEXTSIEVE_DATA": str(tmp / "data"),
    }


def _params(tmp: Path, *args: str) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, args=["-m", "contextsieve", *args], env=_env(tmp))


def graph_entries(cache: Path, scratch: Path) -> list[Path]:
    """The model cache entries a first model load in ``cache`` builds: the graphs of the variants the
    CPU's features choose for batches and queries (``graph_entry``). ``scratch``: another folder for
    the plan's weights hash, so ``cache`` stays empty."""
    from contextsieve.models.cache import ModelCache
    from contextsieve.models.embedder import graph_entry, plan_model

    plan = plan_model(cache_dir=scratch)
    out = []
    for variant in dict.fromkeys([plan.variant, plan.query_variant]):
        out.append(graph_entry(ModelCache(cache), plan.name, plan.weights_sha, variant))
    return out


@contextmanager
def model_load_held(tmp: Path) -> Iterator[tuple[ExitStack, list[Path]]]:
    """Hold the build locks of the graphs the server's first model load builds (the same ``flock`` the
    server takes); yields the stack (``close()`` lets the load go on) and the entries."""
    from contextsieve.models.cache import ModelCache

    entries = graph_entries(tmp / "cache", tmp / "scratch")
    with ExitStack() as held:
        for entry in entries:
            held.enter_context(ModelCache(tmp / "cache").build_lock(entry, timeout=5))
        yield held, entries


async def _wait_held(c: Client, tool: str, arguments: dict[str, Any], held: ExitStack) -> tuple[Any, list[Any]]:
    """Call ``tool`` with a progress token while the model load is held: it must send progress
    notifications and not end; then let the load go on and return (its result, the notifications)."""
    progress: list[tuple[float, float | None, str | None]] = []
    done: dict[str, Any] = {}

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, total, message))

    async def call() -> None:
        done["result"] = await c.call_tool(tool, arguments, progress_callback=on_progress)

    async with anyio.create_task_group() as tg:
        tg.start_soon(call)
        with anyio.fail_after(60):
            while len(progress) < 3:
                await anyio.sleep(0.05)
        assert "result" not in done, "the call ended while the model load was held"
        held.close()  # the model load goes on
    return done["result"], progress


def _check_progress(progress: list[tuple[float, float | None, str | None]]) -> None:
    values = [p[0] for p in progress]
    assert values == sorted(values) and len(set(values)) == len(values), values  # increasing
    assert all(message and WAITING in message for _, _, message in progress), progress


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_serve_answers_before_the_model_loads_and_a_call_waits_with_progress(tmp_path: Path, mode: str) -> None:
    """Before: no note on stderr while the model loaded, and a call waiting for it sent no progress
    notification (the model loaded inside the first call, silently)."""
    errors = tmp_path / "serve.stderr"
    params = _params(tmp_path, "serve", str(example_agent_path()))

    async def main() -> None:
        with model_load_held(tmp_path) as (held, entries), errors.open("w") as errlog:
            async with Client(stdio_client(params, errlog=errlog), mode=mode, read_timeout_seconds=120) as c:
                names = {t.name for t in (await c.list_tools()).tools}
                assert {"select_context", "search_tools", "stash_context", "list_stashed_context"} <= names
                assert (await c.list_resources()).resources and (await c.list_prompts()).prompts
                # a stash tool that needs no model answers too
                assert result(await c.call_tool("list_stashed_context", {}))["segments"] == []
                log = errors.read_text()
                assert STARTED in log and READY not in log, log
                got, progress = await _wait_held(c, "select_context", {"message": MESSAGE}, held)
                assert any(i["name"] == "return-policy" for i in result(got)["items"]), got
                _check_progress(progress)
                assert any(e.exists() for e in entries), "the test held the lock of a graph the server did not build"
                again = result(await c.call_tool("search_tools", {"query": "refund an order"}))  # no wait now
                assert again["tools"]
        log = errors.read_text()
        assert log.index(STARTED) < log.index("select_context waits for the embedding model") < log.index(READY), log

    anyio.run(main)


def test_a_failed_model_load_is_the_calls_error_and_the_server_goes_on(tmp_path: Path) -> None:
    """The cache's ``models`` folder is a file: the graph cannot be read or built. Before: nothing on
    stderr said the load failed (each call tried to load the model again, and failed alike)."""
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "models").write_text("not a folder")
    errors = tmp_path / "serve.stderr"
    params = _params(tmp_path, "serve", str(example_agent_path()))

    async def main() -> None:
        with errors.open("w") as errlog:
            async with Client(stdio_client(params, errlog=errlog), mode="legacy", read_timeout_seconds=120) as c:
                for tool, args in (("select_context", {"message": MESSAGE}), ("search_tools", {"query": "refund"})):
                    text = await refused(c.call_tool(tool, args), "loading the embedding model failed")
                    assert "is a file, not a folder" in text and str(tmp_path / "cache" / "models") in text, text
                log = errors.read_text()
                assert log.count("loading the embedding model failed") == 1 and "is a file, not a folder" in log, log
                # the server goes on: listings, a tool without the model, and the same error again
                assert (await c.list_tools()).tools
                assert result(await c.call_tool("list_stashed_context", {}))["segments"] == []
                await refused(c.call_tool("select_context", {"message": "hello"}), "is a file, not a folder")
        assert errors.read_text().count("loading the embedding model failed") == 1  # one load, never retried

    anyio.run(main)


def _time_agent(tmp: Path, gate: Path | None = None) -> Path:
    """An agent of mcp-server-time (its tools ``always``); with ``gate``, the server starts only once
    that file exists (a real server whose start the test holds)."""
    local = Path(sys.executable).parent / "mcp-server-time"
    command = str(local) if local.exists() else "mcp-server-time"
    server: dict[str, Any] = {"type": "stdio", "command": command, "serverToolDefaults": {"include": "always"}}
    if gate is not None:
        server["command"] = "sh"
        server["args"] = ["-c", f'while [ ! -e "{gate}" ]; do sleep 0.05; done; exec "{command}"']
    doc = {
        "name": "clock",
        "systemPrompt": "You help.",
        "rules": [{"name": "tone", "text": "Be brief.", "description": "how to talk"}],
        "mcpServers": {"time": server},
    }
    path = tmp / "agent.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def test_serve_lists_the_agents_servers_in_the_background(tmp_path: Path) -> None:
    """``serve`` without ``--offline`` lists the agent's servers after its transport started: the time
    server starts only once the test creates ``go``, yet ``initialize`` and ``tools/list`` answer, and
    ``select_context`` waits (with progress) and then offers the listed tools. Before: the listing ran
    before the transport (the host waited for it) and timed out there, so the call had no time tools."""
    gate = tmp_path / "go"
    errors = tmp_path / "serve.stderr"
    params = _params(tmp_path, "serve", str(_time_agent(tmp_path, gate)))

    async def main() -> None:
        with errors.open("w") as errlog:
            async with Client(stdio_client(params, errlog=errlog), mode="legacy", read_timeout_seconds=120) as c:
                assert "select_context" in {t.name for t in (await c.list_tools()).tools}
                log = errors.read_text()
                assert "listing the agent's MCP servers and loading the model in the background" in log, log
                progress: list[str | None] = []
                done: dict[str, Any] = {}

                async def on_progress(value: float, total: float | None, message: str | None) -> None:
                    progress.append(message)

                async def call() -> None:
                    done["r"] = await c.call_tool("select_context", {"message": MESSAGE}, progress_callback=on_progress)

                async with anyio.create_task_group() as tg:
                    tg.start_soon(call)
                    with anyio.fail_after(60):
                        while len(progress) < 2:
                            await anyio.sleep(0.05)
                    assert "r" not in done and "waiting for the agent's MCP servers to be listed" in str(progress[0])
                    gate.touch()  # the time server may start now
                assert "time_get_current_time" in [t["name"] for t in result(done["r"])["tools"]], done["r"]
        assert "listed the agent's MCP servers" in errors.read_text()

    anyio.run(main)


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_gateway_lists_and_forwards_while_the_model_loads(tmp_path: Path, mode: str) -> None:
    """Before: the gateway's own tools waited for the model without a progress notification, and
    nothing on stderr said it loaded."""
    errors = tmp_path / "gateway.stderr"
    params = _params(tmp_path, "gateway", str(_time_agent(tmp_path)), "--timeout", "60")

    async def main() -> None:
        with model_load_held(tmp_path) as (held, _), errors.open("w") as errlog:
            async with Client(stdio_client(params, errlog=errlog), mode=mode, read_timeout_seconds=120) as c:
                names = {t.name for t in (await c.list_tools()).tools}
                assert {"set_task", "select_context", "search_tools"} <= names
                with anyio.fail_after(60):  # the time server's first start: its always tools join the offer
                    while "time_get_current_time" not in names:
                        await anyio.sleep(0.1)
                        names = {t.name for t in (await c.list_tools()).tools}
                now = await c.call_tool("time_get_current_time", {"timezone": "Asia/Tokyo"})
                assert not now.is_error and json.loads(now.content[0].text)["timezone"] == "Asia/Tokyo"
                log = errors.read_text()
                assert STARTED in log and READY not in log, log
                got, progress = await _wait_held(c, "set_task", {"message": "What time is it in Lisbon?"}, held)
                assert "time_get_current_time" in result(got)["tools"], got
                _check_progress(progress)
        log = errors.read_text()
        assert log.index(STARTED) < log.index("set_task waits for the embedding model") < log.index(READY), log

    anyio.run(main)
