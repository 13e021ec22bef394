"""Session.build_request with per-request settings and Session.search_tools: what the MCP server and
the gateway call instead of swapping settings or searching on their own."""

from __future__ import annotations

import threading

import pytest

from contextsieve.agent.items import ItemKind
from contextsieve.errors import InputError
from contextsieve.selection.chunk_store import ChunkStore
from contextsieve.session.requests import ToolMatch
from contextsieve.session.session import Session
from tests.helpers.agents import make_agent
from tests.helpers.fake_embedder import FakeEmbedder


def session() -> Session:
    return Session(make_agent(), ChunkStore(FakeEmbedder()))


def test_overrides_apply_to_one_request_and_leave_the_session_alone() -> None:
    s = session()
    own = s.settings
    narrow = s.build_request("refund for my parcel", context_top_n=1)
    assert s.settings is own
    assert narrow.context.settings["top_n"] == 1  # recorded with the request
    plain = s.build_request("refund for my parcel")
    assert plain.context.settings["top_n"] == own.context_top_n != 1
    assert s.build_request("refund", preset="reference").context.settings["top_n"] == 5
    assert s.settings is own


def test_bad_overrides_raise_and_change_nothing() -> None:
    s = session()
    own, history = s.settings, len(s.history)
    with pytest.raises(InputError):
        s.build_request("refund", context_top_n=-3)
    with pytest.raises(InputError):
        s.build_request("refund", no_such_setting=1)
    with pytest.raises(InputError):
        s.build_request("refund", preset="no-such-preset")
    assert s.settings is own and len(s.history) == history


def test_concurrent_requests_with_and_without_overrides_see_their_own_settings() -> None:
    s = session()
    seen: list[tuple[str, int]] = []
    errors: list[BaseException] = []

    def run(kind: str) -> None:
        try:
            for _ in range(20):
                if kind == "narrow":
                    req = s.build_request("refund for my parcel", context_top_n=1)
                else:
                    req = s.build_request("refund for my parcel")
                seen.append((kind, int(req.context.settings["top_n"])))
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(k,)) for k in ("narrow", "plain", "narrow", "plain")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    default = s.settings.context_top_n
    assert all(n == (1 if kind == "narrow" else default) for kind, n in seen) and len(seen) == 80


def test_search_tools_ranks_the_usable_tools_and_adds_nothing() -> None:
    s = session()
    found = s.search_tools("fetch the web page at this url", limit=2)
    assert found and all(isinstance(m, ToolMatch) for m in found) and len(found) <= 2
    assert found[0].tool.name == "fetch"  # an always tool is found too: search covers every tool
    assert all(m.tool.kind is ItemKind.TOOL for m in found)
    assert [m.score for m in found] == sorted((m.score for m in found), reverse=True)
    before = s.items()
    s.search_tools("read a file", limit=3)
    assert s.items() == before  # nothing was added to the session
    assert len(s.search_tools("write to a file on disk", limit=50)) == 3
    with pytest.raises(InputError, match="limit"):
        s.search_tools("x", limit=0)
    with pytest.raises(InputError, match="query must be a str"):
        s.search_tools(None)  # type: ignore[arg-type]


def test_an_embedder_without_a_model_id_still_serves_requests() -> None:
    """model_id is optional in practice (benchmarks wrap embedders): a session without a stash never
    asks for it."""

    class Bare:
        def __init__(self) -> None:
            self.inner = FakeEmbedder()

        def embed(self, texts: list[str], *, show_progress: bool = False):  # noqa: ANN201
            return self.inner.embed(texts)

        def count_tokens(self, texts: list[str]) -> list[int]:
            return self.inner.count_tokens(texts)

    s = Session(make_agent(), ChunkStore(Bare()))  # type: ignore[arg-type]
    assert s.build_request("refund for my parcel").context.entries
