"""The stash tools of ``contextsieve serve --stash`` through the official MCP SDK client: every tool,
bad arguments, sessions bound to connections, and the CLI over stdio."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters

from contextsieve.agent.agentfile import example_agent_path
from contextsieve.engine import Engine
from contextsieve.mcp_server.common import ServeConfig
from contextsieve.mcp_server.server import build_server
from contextsieve.stash.store import StashStore
from tests.helpers.mcp_results import refused, result

STASH_TOOLS = {
    "stash_context",
    "retrieve_stashed_context",
    "merge_stashed_context",
    "list_stashed_context",
    "delete_stashed_context",
    "protect_stashed_context",
}


@pytest.fixture(scope="module")
def engine(int8, tmp_path_factory: pytest.TempPathFactory) -> Engine:  # noqa: ANN001
    return Engine.from_file(example_agent_path(), embedder=int8, cache_dir=tmp_path_factory.mktemp("serve"))


@pytest.fixture
def stash(engine: Engine, tmp_path: Path):  # noqa: ANN201
    s = StashStore.open(tmp_path / "stash.db", engine.embedder)
    yield s
    s.close()


def test_every_stash_tool(engine: Engine, stash: StashStore) -> None:
    long_text = "Stack trace:\n" + "\n".join(f"  at frame{i} (app.js:{i})" for i in range(200))

    async def main() -> None:
        async with Client(build_server(engine, stash=stash), mode="legacy") as c:
            names = {t.name for t in (await c.list_tools()).tools}
            assert STASH_TOOLS <= names
            r = result(
                await c.call_tool(
                    "stash_context",
                    {
                        "segments": [
                            {"text": "The checkout service returns 502 after the deploy", "type": "error_log"},
                            {"text": long_text, "type": "debug_output", "topic": "checkout"},
                            {"text": "Decided to roll back the deploy and page the on-call", "type": "decision"},
                        ]
                    },
                )
            )
            ids = r["segment_ids"]
            assert len(ids) == 3 and r["stashed_count"] == 3 and r["tokens_stashed"] > 600
            again = result(await c.call_tool("stash_context", {"segments": [{"text": long_text}]}))
            assert again["segment_ids"] == [ids[1]] and again["duplicates"] == 1
            found = result(await c.call_tool("retrieve_stashed_context", {"query": "why does checkout fail with 502"}))
            segs = found["segments"]
            assert segs[0]["segment_id"] == ids[0] and found["total_found"] == len(segs) == 3
            assert all(len(s["text"]) <= 503 for s in segs) and segs[0]["type"] == "error_log"
            assert [s["score"] for s in segs] == sorted((s["score"] for s in segs), reverse=True)
            assert {"similarity", "timestamp", "score"} <= set(segs[0])
            only = result(
                await c.call_tool(
                    "retrieve_stashed_context", {"query": "deploy", "filters": {"type": ["decision"]}, "top_k": 5}
                )
            )
            assert [s["segment_id"] for s in only["segments"]] == [ids[2]]
            merged = result(await c.call_tool("merge_stashed_context", {"segment_ids": [ids[1], ids[0]]}))
            assert [s["text"] for s in merged["segments"]][0] == long_text
            ns = "agent:" + engine.agent.identity  # a call without a handle: the agent's namespace, either protocol
            assert merged["tokens_added"] == sum(s.tokens for s in stash.get([ids[0], ids[1]], session=ns))
            listed = result(await c.call_tool("list_stashed_context", {"limit": 10}))
            assert {s["segment_id"] for s in listed["segments"]} == set(ids)
            prot = result(await c.call_tool("protect_stashed_context", {"segment_ids": [ids[2]]}))
            assert prot["changed"] == 1 and stash.get([ids[2]], session=ns)[0].protected
            gone = result(await c.call_tool("delete_stashed_context", {"segment_ids": [ids[0]]}))
            assert gone["deleted"] == 1
            await refused(c.call_tool("merge_stashed_context", {"segment_ids": [ids[0]]}), "no segment")
            for bad in (
                {"segments": []},
                {"segments": [{"text": ""}]},
                {"segments": [{"text": "x", "type": "memo"}]},
                {"segments": [{"text": "x", "references": ["nope"]}]},
            ):
                await refused(c.call_tool("stash_context", bad), ".")
            await refused(c.call_tool("retrieve_stashed_context", {"query": "x", "filters": {"colour": 1}}), "filters")
            assert result(await c.call_tool("list_stashed_context", {}))["segments"]  # still serving

    anyio.run(main)


def test_connections_share_the_agents_stash_unless_per_connection(engine: Engine, stash: StashStore) -> None:
    """Issue 38 item 2: on the handshake protocol a call without a handle stashes into the agent's
    namespace, so another connection of the same agent (a host's next process) finds it; with
    ``stash_per_connection`` each connection keeps to its own, as before."""

    async def main() -> None:
        server = build_server(engine, stash=stash)
        async with Client(server, mode="legacy") as a, Client(server, mode="legacy") as b:
            ra = result(await a.call_tool("stash_context", {"segments": [{"text": "the deploy key is in the vault"}]}))
            found = result(await b.call_tool("retrieve_stashed_context", {"query": "deploy key vault"}))["segments"]
            assert [s["segment_id"] for s in found] == ra["segment_ids"]
            merged = result(await b.call_tool("merge_stashed_context", {"segment_ids": ra["segment_ids"]}))
            assert merged["merged_count"] == 1
        isolated = build_server(engine, ServeConfig(stash_per_connection=True), stash=stash)
        async with Client(isolated, mode="legacy") as a, Client(isolated, mode="legacy") as b:
            ra = result(await a.call_tool("stash_context", {"segments": [{"text": "alice's api key is in vault"}]}))
            assert result(await b.call_tool("retrieve_stashed_context", {"query": "api key vault"}))["segments"] == []
            await refused(b.call_tool("merge_stashed_context", {"segment_ids": ra["segment_ids"]}), "no segment")
            await refused(
                b.call_tool("retrieve_stashed_context", {"query": "api key", "session": "cs-guess"}),
                "unknown or expired session",
            )
            mine = result(await a.call_tool("retrieve_stashed_context", {"query": "api key vault"}))
            assert [s["segment_id"] for s in mine["segments"]] == ra["segment_ids"]

    anyio.run(main)


def test_a_fixed_stash_session_spans_connections(engine: Engine, stash: StashStore) -> None:
    server = build_server(engine, ServeConfig(stash_session="agent-1"), stash=stash)

    async def main() -> None:
        async with Client(server, mode="legacy") as a:
            await a.call_tool("stash_context", {"segments": [{"text": "the staging database is pg-stage-2"}]})
        async with Client(server, mode="legacy") as b:
            got = result(await b.call_tool("retrieve_stashed_context", {"query": "staging database"}))
            assert got["segments"][0]["text"] == "the staging database is pg-stage-2"

    anyio.run(main)
    assert stash.list(session="agent-1")[0].text == "the staging database is pg-stage-2"


def test_serve_with_a_stash_over_stdio(model_cache: Path, int8, tmp_path: Path) -> None:  # noqa: ANN001
    env = {**os.environ, "CONTEXTSIEVE_CACHE": str(model_cache), "CONTEXTSIEVE_DATA": str(model_cache / "data")}
    db = tmp_path / "served.db"
    args = ["-m", "contextsieve", "serve", str(example_agent_path()), "--offline", "--stash", str(db)]
    params = StdioServerParameters(command=sys.executable, args=[*args, "--stash-session", "main"], env=env)

    async def main() -> None:
        async with Client(params, read_timeout_seconds=120) as c:
            assert STASH_TOOLS <= {t.name for t in (await c.list_tools()).tools}
            await c.call_tool("stash_context", {"segments": [{"text": "remember: the release is on friday"}]})
            got = result(await c.call_tool("retrieve_stashed_context", {"query": "when is the release"}))
            assert got["segments"][0]["text"] == "remember: the release is on friday"

    anyio.run(main)
    with StashStore.open(db, int8) as s:
        assert [x.text for x in s.list(session="main")] == ["remember: the release is on friday"]


def test_select_context_brings_back_the_connections_stashed_segments(engine: Engine, stash: StashStore) -> None:
    async def main() -> None:
        async with Client(build_server(engine, stash=stash), mode="legacy") as c:
            r = result(
                await c.call_tool(
                    "stash_context",
                    {"segments": [{"text": "The refund for order 1042 was approved by Dana on Monday"}]},
                )
            )
            [sid] = r["segment_ids"]
            sel = result(await c.call_tool("select_context", {"message": "was the refund for order 1042 approved?"}))
            items = [i for i in sel["items"] if i["type"] == "stash"]
            assert [i["name"] for i in items] == [sid] and items[0]["includeMode"] == "stash"
            assert {
                "type": "stash",
                "name": sid,
                "text": "The refund for order 1042 was approved by Dana on Monday",
            } in sel["texts"]
            ex = result(
                await c.call_tool(
                    "explain", {"message": "was the refund for order 1042 approved?", "item": f"stash:{sid}"}
                )
            )
            assert ex["included"] and ex["mode"] == "stash"
        async with Client(build_server(engine, stash=stash), mode="legacy") as other:  # the host's next process
            sel = result(
                await other.call_tool("select_context", {"message": "was the refund for order 1042 approved?"})
            )
            assert [i["name"] for i in sel["items"] if i["type"] == "stash"] == [sid]
        isolated = build_server(engine, ServeConfig(stash_per_connection=True), stash=stash)
        async with Client(isolated, mode="legacy") as other:  # a connection that keeps to its own namespace
            sel = result(
                await other.call_tool("select_context", {"message": "was the refund for order 1042 approved?"})
            )
            assert not [i for i in sel["items"] if i["type"] == "stash"]
            await refused(
                other.call_tool("explain", {"message": "refund", "item": f"stash:{sid}"}), "no segment"
            )  # another connection's segment is unknown

    anyio.run(main)


def test_a_stateless_host_finds_what_it_stashed_without_a_handle(engine: Engine, stash: StashStore) -> None:
    """Issue 27 item 1: the SDK's default client (stateless) stashes and retrieves without threading a
    handle: both go to the agent's shared namespace, in the store (a new server process finds them);
    a handle still keeps its own segments apart, and select_context without a handle sees the shared
    ones."""

    async def main() -> None:
        async with Client(build_server(engine, stash=stash)) as c:  # the default protocol: stateless
            put = result(await c.call_tool("stash_context", {"segments": [{"text": "the api key is in vault"}]}))
            assert put["session"] is None and put["segment_ids"]
            got = result(await c.call_tool("retrieve_stashed_context", {"query": "api key vault"}))
            assert [s["segment_id"] for s in got["segments"]] == put["segment_ids"]
            handle = result(await c.call_tool("select_context", {"message": "hello"}))["session"]
            own = result(await c.call_tool("retrieve_stashed_context", {"query": "api key vault", "session": handle}))
            assert own["segments"] == []  # a handle's namespace is its own
            ctx = result(await c.call_tool("select_context", {"message": "where is the api key? vault?"}))
            assert any(i["type"] == "stash" for i in ctx["items"])
        async with Client(build_server(engine, stash=stash)) as c:  # another server process, same store
            again = result(await c.call_tool("retrieve_stashed_context", {"query": "api key vault"}))
            assert [s["segment_id"] for s in again["segments"]] == put["segment_ids"]

    anyio.run(main)


def test_an_evicted_connection_keeps_its_handle_and_its_stash(engine: Engine, stash: StashStore) -> None:
    """Issue 27 item 2: at the session limit the least recently used session is dropped, but a stateful
    connection is never moved to another session silently: it gets its handle back (so its stashed
    segments), and its next request says the session was started again."""
    server = build_server(engine, ServeConfig(max_sessions=1), stash=stash)

    async def main() -> None:
        async with Client(server, mode="legacy") as a, Client(server, mode="legacy") as b:
            put = result(await a.call_tool("stash_context", {"segments": [{"text": "alice's api key is in vault"}]}))
            first = put["session"]
            await b.call_tool("select_context", {"message": "hello"})  # the limit is 1: a's session goes
            again = result(await a.call_tool("retrieve_stashed_context", {"query": "api key vault"}))
            assert again["session"] == first  # the same handle, so the same stash namespace
            assert [s["segment_id"] for s in again["segments"]] == put["segment_ids"]
            ctx = result(await a.call_tool("select_context", {"message": "hello again"}))
            assert any("started again" in n for n in ctx["notes"])

    anyio.run(main)


def test_stashing_many_segments_reports_progress(engine: Engine, stash: StashStore) -> None:
    """Issue 27 item 20: a long stash_context sent no progress notifications, even when the client
    gave a progress token."""
    server = build_server(engine, ServeConfig(), stash)
    seen: list[tuple[float, float | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total))

    segments = [{"text": f"Note {i}: the deploy of service {i} needs the flag {i * 7}."} for i in range(150)]

    async def main() -> None:
        async with Client(server) as c:
            done = result(await c.call_tool("stash_context", {"segments": segments}, progress_callback=on_progress))
            assert done["stashed_count"] == 150
            assert (
                result(await c.call_tool("stash_context", {"segments": [{"text": "one more"}]}))["stashed_count"] == 1
            )

    anyio.run(main)
    assert seen == [(64.0, 150.0), (128.0, 150.0), (150.0, 150.0)]  # one per part of 64 texts, in order


def test_supersession_over_mcp(engine: Engine, stash: StashStore) -> None:
    """Issue 28: ``stash_context`` takes ``supersedes``; ``retrieve_stashed_context`` returns the newest
    of a chain (saying what it replaced) and, with ``include_superseded``, the old one with
    ``superseded_by`` (the default SDK client: one shared namespace, no handle)."""

    async def main() -> None:
        async with Client(build_server(engine, stash=stash)) as c:
            first = result(
                await c.call_tool("stash_context", {"segments": [{"text": "Deploys freeze on Friday", "id": "freeze"}]})
            )
            assert first["segment_ids"] == ["freeze"]
            later = {"text": "Deploys freeze on Thursday from now on", "supersedes": ["freeze"]}
            newer = result(await c.call_tool("stash_context", {"segments": [later]}))["segment_ids"][0]
            got = result(await c.call_tool("retrieve_stashed_context", {"query": "when do deploys freeze"}))
            ids = [s["segment_id"] for s in got["segments"]]
            assert ids[0] == newer and "freeze" not in ids
            assert got["segments"][0]["supersedes"] == ["freeze"]
            both = result(
                await c.call_tool(
                    "retrieve_stashed_context", {"query": "when do deploys freeze", "include_superseded": True}
                )
            )
            old = next(s for s in both["segments"] if s["segment_id"] == "freeze")
            assert old["superseded_by"] == newer
            await refused(
                c.call_tool("stash_context", {"segments": [{"text": "x", "supersedes": ["not-there"]}]}),
                "not in session",
            )

    anyio.run(main)
