"""Two ``serve --transport http`` processes on one real PostgreSQL stash (a host
behind a load balancer, the case the stateless protocol exists for). Any process answers any call:
the agent's default namespace and the stateless handles live in the store, not in a process. Also
the registry itself: signed handles, session items kept in the store, eviction that loses nothing."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from mcp import Client

from contextsieve.engine import Engine
from contextsieve.mcp_server.common import STATELESS, ServeConfig, SessionRegistry
from contextsieve.stash.store import StashStore
from tests.helpers.mcp_results import refused, result
from tests.helpers.servers import http_server

TOKEN = "t0ken-for-the-test"


def client(url: str) -> Client:
    from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

    http = create_mcp_http_client(headers={"Authorization": f"Bearer {TOKEN}"})
    return Client(streamable_http_client(url, http_client=http), read_timeout_seconds=120)  # stateless


def test_two_server_processes_on_one_postgres_answer_each_others_calls(
    model_cache: Path,
    int8,
    postgres_uri: str,  # noqa: ANN001
) -> None:
    """Before: what one process stashed was invisible to the other with a handle ("unknown or expired
    session handle": handles lived in one process's memory)."""
    note = {"text": "The invoice export runs nightly at 02:00 and writes to the finance bucket.", "topic": "ops"}
    own = {"text": "Deploy freezes start every Thursday at 18:00 until Monday.", "topic": "ops"}
    with http_server(model_cache, "--stash", postgres_uri) as a, http_server(model_cache, "--stash", postgres_uri) as b:

        async def main() -> None:
            async with client(a) as ca, client(b) as cb:
                # the default namespace: stashed through a, found through b, no handle anywhere
                put = result(await ca.call_tool("stash_context", {"segments": [note]}))
                got = result(
                    await cb.call_tool("retrieve_stashed_context", {"query": "when does the invoice export run"})
                )
                assert [s["segment_id"] for s in got["segments"]] == put["segment_ids"]
                # a handle made by a, used on b and a alternately: one session, one namespace
                handle = result(await ca.call_tool("select_context", {"message": "hello"}))["session"]
                put2 = result(await cb.call_tool("stash_context", {"segments": [own], "session": handle}))
                assert put2["session"] == handle
                for c in (ca, cb, ca):
                    found = result(
                        await c.call_tool("retrieve_stashed_context", {"query": "deploy freeze", "session": handle})
                    )
                    assert [s["segment_id"] for s in found["segments"]] == put2["segment_ids"]
                # session items follow the handle from process to process
                added = result(
                    await ca.call_tool("add_to_session", {"item": "reference:return-policy", "session": handle})
                )
                assert {"item": "reference:return-policy", "includeMode": "manual"} in added["items"]
                ctx = result(await cb.call_tool("select_context", {"message": "hello", "session": handle}))
                assert ctx["session"] == handle
                assert any(i["name"] == "return-policy" and i["includeMode"] == "manual" for i in ctx["items"])
                await cb.call_tool("remove_from_session", {"item": "reference:return-policy", "session": handle})
                ctx = result(await ca.call_tool("select_context", {"message": "hello", "session": handle}))
                assert not any(i["name"] == "return-policy" and i["includeMode"] == "manual" for i in ctx["items"])
                # a made-up or altered handle is still refused by both
                for bad in (handle[:-2] + ("AA" if not handle.endswith("AA") else "BB"), "cs-made-up"):
                    for c in (ca, cb):
                        await refused(
                            c.call_tool("select_context", {"message": "hi", "session": bad}),
                            "unknown or expired session handle",
                        )

        anyio.run(main)


@pytest.fixture
def engine(int8, tmp_path: Path) -> Engine:  # noqa: ANN001
    from contextsieve.agent.agentfile import example_agent_path

    return Engine.from_file(example_agent_path(), embedder=int8, cache_dir=tmp_path / "cache")


def test_signed_handles_survive_eviction_and_another_registry(engine: Engine, tmp_path: Path) -> None:
    stash = StashStore.open(tmp_path / "s.db", embedder=engine.embedder)
    try:
        first = SessionRegistry(engine, ServeConfig(max_sessions=2), stash)
        second = SessionRegistry(engine, ServeConfig(), stash)  # another process on the same store
        handle, s = first.new(STATELESS)
        first.change_items(handle, s, lambda: s.add("reference:return-policy"))
        for _ in range(3):  # the limit is 2: the handle's session is evicted
            first.new(STATELESS)
        for reg in (first, second):
            again = reg.get(handle, STATELESS)
            assert again is not None and again.stash_session == handle
            assert ("reference:return-policy", "manual") in [(str(k), m.value) for k, m in again.items()]
        assert first.get(handle, "connection:x") is None  # a stateless handle is not a connection's
        assert first.get(handle + "x", STATELESS) is None and first.get("cs-" + "A" * 22, STATELESS) is None
        shared_handle, shared = first.new(STATELESS, shared=True)
        assert shared.stash_session == first.default_namespace()
        assert first.get(shared_handle, STATELESS).stash_session == shared_handle  # its own from now on
    finally:
        stash.close()
    other = StashStore.open(tmp_path / "other.db", embedder=engine.embedder)
    try:  # another store has another key: the handle means nothing there
        assert SessionRegistry(engine, ServeConfig(), other).get(handle, STATELESS) is None
    finally:
        other.close()


def test_session_items_are_unchanged_when_the_store_refuses_them(engine: Engine, tmp_path: Path) -> None:
    stash = StashStore.open(tmp_path / "s.db", embedder=engine.embedder)
    reg = SessionRegistry(engine, ServeConfig(), stash)
    handle, s = reg.new(STATELESS)
    before = s.items()
    stash.close()  # every write now fails
    with pytest.raises(Exception) as e:
        reg.change_items(handle, s, lambda: s.add("reference:return-policy"))
    assert "closed" in str(e.value).lower() or "stash" in str(e.value).lower()
    assert s.items() == before


def test_without_a_stash_an_evicted_stateless_handle_still_works(engine: Engine) -> None:
    reg = SessionRegistry(engine, ServeConfig(max_sessions=1))
    handle, _ = reg.new(STATELESS)
    reg.new(STATELESS)
    reg.new(STATELESS)
    assert reg.get(handle, STATELESS) is not None  # the same handle: never "unknown" after an eviction
