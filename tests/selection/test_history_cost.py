"""What a long history costs a request, and that its shortcuts select what the plain paths select: a
request recorded for several tools is read, kept and scored once; the log reads only the newest records
each tool uses; an item's vectors are its rows of the chunk matrix; and a search with a history scores
only its candidate chunks, with the ranking a search of every chunk gives."""

from __future__ import annotations

import random
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from contextsieve.agent.agent import Agent, McpServer
from contextsieve.agent.example_records import ExampleRecords
from contextsieve.agent.items import IncludeMode, ItemKey, Tool
from contextsieve.agent.settings import MISS_SIMILARITY
from contextsieve.agent.stored_vectors import unit_vector
from contextsieve.agent.usage import UsageLog, example_hash
from contextsieve.errors import InputError, UsageLogWarning
from contextsieve.kernels.scoring import query_scores
from contextsieve.selection.chunk_plans import example_chunk_text
from contextsieve.selection.chunk_store import ChunkStore
from contextsieve.selection.chunk_terms import example_terms, outcome_penalty
from contextsieve.selection.ranking import RankRule, rank_chunks
from contextsieve.selection.recorded_requests import KeptVectors, NearRequests, RequestVectors, near_floor
from contextsieve.selection.search_rows import SearchRows
from contextsieve.session.session import Session
from tests.helpers.fake_embedder import FakeEmbedder

G = IncludeMode.AGENT
TOOLS = [Tool("s", f"t{i}", f"tool number {i} does thing {i} with widget {i % 3}") for i in range(8)]
KEYS = [t.key for t in TOOLS]


def _log(path: Path, records: int, seed: int = 0) -> UsageLog:
    """A log of ``records`` requests, each for 1-3 tools, as examples or misses (vectors of the
    test embedder, so the store's chunks and the records are comparable)."""
    log = UsageLog(path, model="fake")
    rng = random.Random(seed)
    texts = [f"request {n} widget {n % 3}" for n in range(records)]
    vecs = FakeEmbedder().embed(texts)
    for n, text in enumerate(texts):
        log.record("a", text, rng.sample(KEYS, rng.choice((1, 2, 3))), rng.choice(("examples", "misses")), vecs[n])
    return log


def test_the_log_reads_the_newest_records_of_each_tool_once_per_request(tmp_path: Path) -> None:
    log = _log(tmp_path / "h.sqlite", 300)
    for kind in ("examples", "misses"):
        got = log.records("a", 5, kind)
        everything = log.records("a", 1000, kind)  # the plain answer: every record, newest first
        assert {k: [e.hash for e in v] for k, v in got.items()} == {
            k: [e.hash for e in v[:5]] for k, v in everything.items()
        }
        by_hash: dict[str, np.ndarray] = {}
        for v in got.values():
            for e in v:
                assert e.vector is not None and e.vector.dtype == np.float16  # as the file keeps it
                if e.hash in by_hash:  # one request, several tools: one vector (a row of the read's matrix)
                    assert _address(e.vector) == _address(by_hash[e.hash]) and e.vector.base is by_hash[e.hash].base
                by_hash[e.hash] = e.vector


def test_a_logs_vectors_are_rows_of_one_matrix_each_request_once_and_gathered_as_one_by_one(tmp_path: Path) -> None:
    """A file's vectors, both kinds read together, are rows of one float16 matrix; a request kept as an
    example of one tool and a miss of another has one vector; the search's gather of any of them (with
    vectors of no matrix among them, as an engine that embedded a record adds) equals converting each
    vector alone."""
    log = _log(tmp_path / "h.sqlite", 300)
    both = FakeEmbedder().embed(["called one, offered another"])[0]
    log.record("a", "called one, offered another", [KEYS[0]], "examples", both)
    log.record("a", "called one, offered another", [KEYS[1]], "misses", both)
    got = log.all_records("a", 1000)
    assert {k: [e.hash for e in v] for k, v in got["misses"].items()} == {
        k: [e.hash for e in v] for k, v in log.records("a", 1000, "misses").items()
    }
    kept = [e.vector for kind in got.values() for v in kind.values() for e in v]
    assert all(v is not None and v.dtype == np.float16 for v in kept)
    assert len({id(v.base) for v in kept if v is not None}) == 1  # one matrix
    with pytest.raises(ValueError, match="read-only"):  # shared by a request's records, as the file's bytes were
        kept[0][:] = 0  # type: ignore[index]
    twice = log.all_records("a", 1000, kinds=("misses", "misses"))  # each kind once
    assert list(twice) == ["misses"]
    assert {k: [e.hash for e in v] for k, v in twice["misses"].items()} == {
        k: [e.hash for e in v] for k, v in log.records("a", 1000, "misses").items()
    }
    with pytest.raises(InputError):
        log.all_records("a", 5, kinds="misses")  # type: ignore[arg-type]
    asked = got["examples"][KEYS[0]][0].hash
    shared = [e.vector for kind in got.values() for v in kind.values() for e in v if e.hash == asked]
    assert len(shared) == 2 and _address(shared[0]) == _address(shared[1])  # one row
    hashes = [e.hash for kind in got.values() for v in kind.values() for e in v if e.hash == asked]
    assert len(hashes) == 2 and hashes[0] is hashes[1]  # one copy of a request's hash, whatever its kinds
    distinct = list({_address(v): v for v in kept if v is not None}.values())
    rng = np.random.default_rng(4)
    loose = [unit_vector(rng.standard_normal(distinct[0].size).astype(np.float32)) for _ in range(5)]
    for vectors in (distinct, distinct[:40] + loose + distinct[40:]):
        requests = RequestVectors.of(vectors)
        # the rows of the log's matrix are kept as their places in it, no view each; the others as they are
        assert isinstance(requests.vectors, KeptVectors) and len(requests.vectors) == len(vectors)
        assert sorted(requests.vectors.loose) == ([] if vectors is distinct else list(range(40, 45)))
        for j in (0, 39, 40, 44, 45, len(vectors) - 1, -1):
            got_j = requests.vectors[j]
            assert got_j.dtype == vectors[j].dtype and _address(got_j) == _address(vectors[j])
        with pytest.raises(IndexError):
            requests.vectors[len(vectors)]
        for which in (np.arange(len(vectors)), np.sort(rng.choice(len(vectors), 37, replace=False)), np.zeros(0, int)):
            dim = distinct[0].size
            want = np.array([np.asarray(vectors[j], np.float32) for j in which.tolist()], np.float32).reshape(-1, dim)
            np.testing.assert_array_equal(requests.rows.gather(vectors, which, dim), want)


def test_a_read_keeps_its_records_as_columns_not_an_object_each(tmp_path: Path) -> None:
    """A year of history is tens of thousands of records: a read keeps them as columns (each tool's a
    range of them) and makes a record's :class:`Example` when it is read; what the read keeps beside
    the vectors' matrix is a few tens of bytes a record (an Example, its time and a view each were
    about 180), and each read of a record gives the same values."""
    log = UsageLog(tmp_path / "h.sqlite")
    keys = [ItemKey.parse(f"tool:s:t{i}") for i in range(40)]
    rng = np.random.default_rng(11)
    vectors = rng.standard_normal((400, 384)).astype(np.float32)
    for n in range(400):  # each request recorded for 8 tools: 3,200 records of 400 requests
        log.record("a", f"request {n}", [keys[(n + j * 5) % 40] for j in range(8)], "examples", vectors[n])
    tracemalloc.start()
    try:
        got = log.all_records("a", 1000)
        kept = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    records = [v for kind in got.values() for v in kind.values()]
    assert all(isinstance(v, ExampleRecords) for v in records)
    n = sum(len(v) for v in records)
    assert n == 3200
    columns = records[0].columns
    assert all(v.columns is columns for v in records)  # one read, one set of columns
    matrix = columns.vectors.matrix
    assert matrix is not None and columns.vectors.filled == 400  # each request's vector once
    hashes = sum(len(h) + 49 for h in columns.hashes)  # each request's hash once
    per_record = (kept - matrix.nbytes - hashes) / n
    assert per_record < 50, per_record
    for v in records[:5]:
        first, again = list(v), list(v)
        assert [(e.hash, e.text, e.at) for e in first] == [(e.hash, e.text, e.at) for e in again]
        assert [e.at for e in first] == sorted((e.at for e in first), reverse=True)  # newest first
        for e, f in zip(first, again):
            assert e.vector is not None and f.vector is not None
            assert _address(e.vector) == _address(f.vector) and not e.vector.flags.writeable
    by_hash = {e.hash: e.vector for v in records for e in v}
    for n_request in (0, 17, 399):
        want = unit_vector(vectors[n_request]).astype("<f2")
        np.testing.assert_array_equal(by_hash[example_hash(f"request {n_request}")], want)
    # equal as the tuples of a log in memory are: field by field, the vectors bit for bit
    assert records[0] == tuple(records[0]) and records[0][1] in records[0] and records[0].index(records[0][1]) == 1
    assert records[0][0] == records[0][0] and hash(records[0][0]) == hash(records[0][0])
    assert records[0] != records[1] and records[0][0] != records[0][1]
    tail = records[0][2:]  # a slice of a tool's records is a range of the same columns
    assert isinstance(tail, ExampleRecords) and [e.hash for e in tail] == [e.hash for e in list(records[0])[2:]]
    assert records[0][-1].hash == list(records[0])[-1].hash
    with pytest.raises(IndexError):
        records[0][len(records[0])]


def test_two_stored_names_that_read_as_one_tool_keep_its_records_together_newest_first(tmp_path: Path) -> None:
    """A damaged byte in a tool's stored name is read replaced, and may then read as another stored
    name (``t1\ufffd``): SQLite orders the two apart (and may put another tool between them), the
    read gives the tool its records of both, newest first, as a log in memory would."""
    import sqlite3

    path = tmp_path / "h.sqlite"
    log = UsageLog(path, keep_text=True)
    vecs = FakeEmbedder().embed([f"message {i}" for i in range(4)])
    for i in range(4):
        log.record("a", f"message {i}", [ItemKey.parse("tool:srv:t1")], vector=vecs[i])
    db = sqlite3.connect(path)
    db.execute("UPDATE examples SET at = 100 + CAST(substr(message, 9) AS INTEGER)")  # message i at 100 + i
    db.execute("UPDATE examples SET tool = 't1' || char(65533) WHERE message IN ('message 1', 'message 3')")
    db.execute("UPDATE examples SET tool = CAST(x'7431ff' AS TEXT) WHERE message IN ('message 0', 'message 2')")
    db.execute(  # a tool whose stored name sorts between the two
        "INSERT INTO examples SELECT agent, server, 't1' || char(128512), hash, message, at, vector, model "
        "FROM examples WHERE message = 'message 0'"
    )
    db.commit()
    db.close()
    damaged = ItemKey.parse("tool:srv:t1\ufffd")
    for per_tool, want in ((100, [3, 2, 1, 0]), (2, [3, 1])):  # at most per_tool, the first read of each name
        with pytest.warns(UsageLogWarning, match="damaged"):
            got = UsageLog(path, keep_text=True).records("a", per_tool)
        assert [e.text for e in got[damaged]] == [f"message {i}" for i in want]
        assert [e.text for e in got[ItemKey.parse("tool:srv:t1\U0001f600")]] == ["message 0"]


def _address(v: np.ndarray) -> int:
    """Where ``v``'s values are in memory (two views of one row have the same)."""
    return int(v.__array_interface__["data"][0])


def _store(path: Path) -> tuple[ChunkStore, Agent]:
    log = _log(path, 200)
    store = ChunkStore(FakeEmbedder(), usage_factory=lambda: log, usage_scope="a")
    agent = Agent(servers={"s": McpServer("s", default_include=G)}, tools=list(TOOLS))
    return store, agent


def _every_chunk(store: ChunkStore, order: list[ItemKey]) -> np.ndarray:
    """The plain layout the store no longer keeps: a row per chunk of every item, the own chunks' rows
    of the matrix, each example chunk its request's unit vector."""
    chunks, _ = store.matrix(order)
    layout = store.layout(order)
    recorded = store.recorded_requests(order)
    assert recorded is not None
    every = np.zeros((layout.owner.size, chunks.shape[1]), np.float32)
    every[layout.base] = chunks
    for row, request in zip(recorded.example_rows.tolist(), recorded.example_request.tolist()):
        every[row] = unit_vector(recorded.requests.vectors[request])
    return every


def test_misses_and_examples_score_each_request_once_as_the_plain_path_does(tmp_path: Path) -> None:
    store, agent = _store(tmp_path / "h.sqlite")
    session = Session(agent, store)
    session.build_request("tool number 3 does thing")  # syncs the store
    table = agent.table()
    order = table.keys
    recorded = store.recorded_requests(order)
    assert recorded is not None
    requests = recorded.requests
    # each request once: examples and misses of one request share a row
    n_requests = len(
        {example_chunk_text(e) for kept in (store.examples, store.misses) for v in kept.values() for e in v}
    )
    assert len(requests) == n_requests < recorded.miss_request.size + recorded.example_rows.size
    qvec = FakeEmbedder().embed(["request 7", "widget 1"])
    scores = requests.near(qvec).best(len(requests), qvec.shape[0])
    mask = np.ones(len(order), dtype=bool)
    chunks, chunk_owner = store.matrix(order)
    got = outcome_penalty((recorded, scores), mask, chunk_owner, 0.2)
    # the plain path: one row per (tool, miss), as the misses were recorded
    per_item = np.zeros(len(order), np.float32)
    for k, kept in store.misses.items():
        for e in kept:
            cos = float((qvec @ unit_vector(e.vector)).max())
            closeness = min(max((cos - MISS_SIMILARITY) / (1 - MISS_SIMILARITY), 0.0), 1.0)
            per_item[order.index(k)] = max(per_item[order.index(k)], closeness)
    want = None if not per_item.any() else (np.float32(-0.2) * per_item)[chunk_owner]
    assert (got is None) == (want is None)
    if want is not None:
        np.testing.assert_allclose(got, want, atol=1e-5)
    # the examples as rows of every chunk, against the plain path: each example row scored itself
    examples, _ = store.example_rows(order)
    every = _every_chunk(store, order)
    per_row = np.full(examples.size, -np.inf, dtype=np.float32)
    per_row[examples] = recorded.example_scores(scores, np.flatnonzero(examples))
    exclude = np.zeros(examples.size, dtype=bool)
    fast = example_terms(examples, every, exclude, qvec, per_row)
    plain = example_terms(examples, every, exclude, qvec)
    np.testing.assert_array_equal(fast[0], plain[0])
    assert (fast[1] is None) == (plain[1] is None)
    if plain[1] is not None:
        np.testing.assert_allclose(fast[1], plain[1], atol=1e-5)


def test_a_search_reads_every_own_chunk_and_the_close_examples_where_they_sit(tmp_path: Path) -> None:
    """The rows a search reads against every chunk of the items (own chunks, then each tool's examples
    as rows of their requests' unit vectors): the same vectors in the same order, the own chunks all,
    the examples exactly those whose request is at the example gate for a query vector."""
    from contextsieve.agent import settings as agent_settings

    store, agent = _store(tmp_path / "h.sqlite")
    Session(agent, store).build_request("widget")
    order = agent.table().keys
    chunks, _ = store.matrix(order)
    layout = store.layout(order)
    recorded = store.recorded_requests(order)
    assert recorded is not None
    every = _every_chunk(store, order)
    seen = 0
    for text in ["request 12 widget", "request 3. widget 0", "thing 7", "request 150 widget 2 and request 9"]:
        queries = FakeEmbedder().embed([p for p in text.split(". ")])
        rows = SearchRows.of(chunks, layout, recorded, recorded.requests.near(queries))
        best = (every[recorded.example_rows] @ queries.T).max(axis=1)
        close = recorded.example_rows[best >= agent_settings.EXAMPLE_SIMILARITY]
        assert rows.rows.tolist() == sorted([*layout.base.tolist(), *close.tolist()])
        np.testing.assert_allclose(rows.chunks, every[rows.rows], atol=1e-6)
        assert rows.owner.tolist() == layout.owner[rows.rows].tolist()
        np.testing.assert_array_equal(rows.chunks[rows.base], chunks)
        # the parts a request's trace keeps give the same bits, whole or some rows
        assert rows.parts.matrix is chunks and len(rows.parts) == rows.rows.size
        np.testing.assert_array_equal(rows.parts.rows(), rows.chunks)
        some = np.sort(np.random.default_rng(seen).choice(rows.rows.size, min(9, rows.rows.size), replace=False))
        np.testing.assert_array_equal(rows.parts.rows(some), rows.chunks[some])
        assert [rows.chunk_index(i) for i in range(rows.rows.size)] == (rows.rows - layout.first[rows.owner]).tolist()
        seen += close.size
    assert seen  # some requests were close to examples


def test_a_kept_request_holds_no_copy_of_the_chunk_matrix_and_the_gateway_keeps_no_trace(tmp_path: Path) -> None:
    """With history, a search's rows are the store's matrix with the close examples among it: a copy
    (about 2 MB a request for a 500-tool agent with a year of history). A request's trace keeps the
    store's matrix and the close examples' vectors instead, and reads them as the search did; the
    gateway keeps each conversation's latest request without its traces (it records the request's
    outcome at the next task and never explains it), for up to ``max_sessions`` conversations."""
    from contextsieve.engine import Engine
    from contextsieve.mcp_client.client import ListConfig
    from contextsieve.mcp_server.common import ServeConfig
    from contextsieve.mcp_server.gateway_state import Conversation, Gateway

    store, agent = _store(tmp_path / "h.sqlite")
    session = Session(agent, store)
    request = session.build_request("request 12 widget")
    trace = request.trace
    assert trace is not None
    order = agent.table().keys
    own, _ = store.matrix(order)
    assert trace.rows.matrix is own and trace.rows.close.size  # close examples among the rows
    recorded = store.recorded_requests(order)
    assert recorded is not None
    # the close requests' vectors, not the matrix again
    assert trace.rows.pick.size == trace.rows.close.size
    assert trace.rows.vectors.shape[0] == recorded.requests.near(trace.queries).rows.size
    every = SearchRows.of(own, store.layout(order), recorded, recorded.requests.near(trace.queries))
    np.testing.assert_array_equal(trace.chunks, every.chunks)  # what the search read, bit for bit
    key = request.context.entries[0].key
    facts = trace.facts(key)
    assert facts is not None and round(facts.similarity, 6) == request.context.entries[0].score

    engine = Engine(agent, embedder=FakeEmbedder(), cache_dir=False, history=False)
    gateway = Gateway(engine, ListConfig(), ServeConfig())
    conv = Conversation("c", engine.session())
    got = gateway.task(conv, "widget 3 for request 12")
    assert got.trace is not None  # the host's answer is built from the whole request
    assert conv.request is not None and conv.request.trace is None and conv.request.stash_trace is None
    assert conv.request.context == got.context and conv.request.message == got.message
    gateway.task(conv, "thing 7")  # the last task's outcome is recorded from the kept request
    assert conv.request.message == "thing 7"


def test_the_outcome_penalty_reads_the_misses_of_close_requests_only_as_the_plain_path_reads_every_miss(
    tmp_path: Path,
) -> None:
    """The penalty looks up the misses of the requests past the miss gate (by request); the plain path
    walks every recorded miss. Several requests, each tool set of a random mask; some must weigh."""
    store, agent = _store(tmp_path / "h.sqlite")
    Session(agent, store).build_request("tool number 3 does thing")
    order = agent.table().keys
    recorded = store.recorded_requests(order)
    assert recorded is not None
    _, chunk_owner = store.matrix(order)
    rng = np.random.default_rng(8)
    weighed = 0
    for n in range(0, 200, 7):
        qvec = FakeEmbedder().embed([f"request {n} widget {n % 3}", f"request {n + 1}"][: 1 + n % 2])
        scores = recorded.requests.near(qvec).best(len(recorded.requests), qvec.shape[0])
        for mask in (np.ones(len(order), bool), rng.random(len(order)) < 0.5):
            got = outcome_penalty((recorded, scores), mask, chunk_owner, 0.3)
            closeness = np.clip((scores[recorded.miss_request] - MISS_SIMILARITY) / (1 - MISS_SIMILARITY), 0, 1)
            per_item = np.zeros(len(order), np.float32)
            for item, c, kept in zip(recorded.miss_item.tolist(), closeness.tolist(), mask[recorded.miss_item]):
                if kept:
                    per_item[item] = max(per_item[item], c)
            want = None if not per_item.any() else (np.float32(-0.3) * per_item)[chunk_owner]
            assert (got is None) == (want is None)
            if want is not None:
                weighed += 1
                np.testing.assert_array_equal(got, want)
    assert weighed
    for requests in (np.arange(len(recorded.requests)), rng.integers(0, len(recorded.requests), 30), np.zeros(0, int)):
        want_misses = [i for r in requests.tolist() for i in np.flatnonzero(recorded.miss_request == r).tolist()]
        assert recorded.misses_of(requests).tolist() == want_misses


def test_the_int8_scan_scores_as_every_request_scored_exactly() -> None:
    """The recorded requests' scores against the plain oracle: each request's unit vector scored in
    float32, ``-inf`` below the floor. Random float16 vectors, requests near the queries and far; the
    last trials are large enough for the Numba kernel (:func:`~contextsieve.kernels.scoring.use_numba`)."""
    rng = np.random.default_rng(11)
    for trial in range(64):
        d = int(rng.choice([8, 64, 384])) if trial < 60 else 384
        n, m = int(rng.integers(1, 400)) if trial < 60 else 12_000, int(rng.integers(1, 5))
        base = rng.standard_normal((n, d)).astype(np.float32)
        queries = base[rng.integers(0, n, m)] + rng.uniform(0.05, 1.5) * rng.standard_normal((m, d)).astype(np.float32)
        queries /= np.linalg.norm(queries, axis=1, keepdims=True)
        if trial % 3 == 0:
            queries *= np.float32(0.8)  # a composed query vector is shorter than a unit one
        kept = [v.astype(np.float16) if trial % 2 else v / np.linalg.norm(v) for v in base]
        requests = RequestVectors.of(kept)
        floor = float(rng.choice([near_floor(), 0.3, 0.9]))
        got = requests.near(queries, floor).best(n, m, floor)
        plain = np.stack([unit_vector(v) for v in kept]) @ queries.T
        best = plain.max(axis=1)
        want = np.where(best >= floor, best, -np.inf)
        np.testing.assert_array_equal(np.isfinite(got), np.isfinite(want))
        np.testing.assert_allclose(got[np.isfinite(got)], want[np.isfinite(want)], atol=2e-6)
    assert not RequestVectors.of([]).near(queries).rows.size


def test_the_band_below_the_narrow_gate_keeps_its_closest_requests_only() -> None:
    """``NearRequests.capped`` keeps every request at or past ``strong`` and, of those under it, the
    ``keep`` closest (ties: the earlier request), each row as it was: against a plain sort."""
    rng = np.random.default_rng(5)
    for trial in range(40):
        k, m = int(rng.integers(0, 60)), int(rng.integers(1, 4))
        scores = np.round(rng.uniform(0.3, 0.9, (k, m)), 1 if trial % 2 else 3).astype(np.float32)  # ties
        rows = np.sort(rng.choice(1000, k, replace=False)).astype(np.int64)
        near = NearRequests(rows, scores, rng.standard_normal((k, 8)).astype(np.float32))
        strong, keep = 0.5, int(rng.integers(0, 20))
        got = near.capped(strong, keep)
        best = scores.max(axis=1) if k else np.zeros(0)
        weak = sorted((i for i in range(k) if best[i] < strong), key=lambda i: (-best[i], rows[i]))
        want = sorted([i for i in range(k) if best[i] >= strong] + weak[:keep])
        np.testing.assert_array_equal(got.rows, rows[want])
        np.testing.assert_array_equal(got.scores, scores[want])
        np.testing.assert_array_equal(got.vectors, near.vectors[want])
        if len(weak) <= keep:
            assert got is near


def test_a_wide_search_reads_the_capped_band_and_a_narrow_one_the_narrow_gate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rows a request's search reads: every recorded request past the narrow gate and, for a wide
    offer, the ``WEAK_REQUESTS`` closest of the band under it (here 2, so that the cap binds)."""
    import contextsieve.selection.search as search_module
    from contextsieve.agent import settings as agent_settings

    monkeypatch.setattr(search_module, "WEAK_REQUESTS", 2)
    store, agent = _store(tmp_path / "h.sqlite")
    order = agent.table().keys
    narrow = agent_settings.NARROW_EXAMPLE_SIMILARITY
    for top_n in (10, 5):  # a wide offer, a narrow one
        request = Session(agent, store, tool_top_n=top_n).build_request("request 12 widget")
        trace = request.trace
        assert trace is not None
        recorded = store.recorded_requests(order)
        assert recorded is not None
        every = recorded.requests.near(trace.queries)  # from the request gate, uncapped
        best = every.scores.max(axis=1)
        assert (best < narrow).sum() > 2  # the band holds more than the cap
        want = every.capped(narrow, 2)
        assert trace.rows.vectors.shape[0] == want.rows.size == (best >= narrow).sum() + 2
        rows = SearchRows.of(store.matrix(order)[0], store.layout(order), recorded, want)
        np.testing.assert_array_equal(trace.chunks, rows.chunks)  # what the search read, bit for bit
        if top_n < agent_settings.WIDE_OFFER:  # read, and not counted: the narrow gate
            close = (trace.rows.vectors @ trace.queries.T).max(axis=1)
            assert any(close < narrow)


def test_the_int8_scan_is_filled_in_place_not_copied_from_its_blocks() -> None:
    """Building the scan holds one block's temporaries beside it, not a second copy of the whole: its
    blocks concatenated left a hole of its size in the heap, which glibc kept resident after the load
    (``python -m benchmarks.speed.history_memory``). Measured with tracemalloc (numpy reports to it): the
    peak of the build is 1.4 times the int8 rows, and was 2.2 times with the concatenation."""
    kept = list(np.random.default_rng(5).standard_normal((20_000, 384)).astype(np.float16))
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        requests = RequestVectors.of(kept)
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    assert peak < 1.8 * requests.scan.q8.nbytes


def test_an_items_vectors_are_its_rows_of_the_chunk_matrix(tmp_path: Path) -> None:
    store, agent = _store(tmp_path / "h.sqlite")
    Session(agent, store).build_request("widget")
    mat, _ = store.matrix(agent.table().keys)
    assert all(np.shares_memory(store._items[k].vectors, mat) for k in agent.table().keys)  # kept once


def test_scoring_the_candidates_only_ranks_as_scoring_every_chunk() -> None:
    rng = np.random.default_rng(3)
    for _ in range(50):
        n, m = int(rng.integers(20, 200)), int(rng.integers(1, 4))
        chunks = rng.standard_normal((n, 16)).astype(np.float32)
        chunks /= np.linalg.norm(chunks, axis=1, keepdims=True)
        queries = chunks[rng.integers(0, n, m)] + 0.1 * rng.standard_normal((m, 16)).astype(np.float32)
        exclude = rng.random(n) < 0.7
        keyword = rng.random(n).astype(np.float32) * (rng.random(n) < 0.3)
        boost = (rng.random(n) < 0.1).astype(np.float32) * 0.2
        rule = RankRule(10, "max", 0.3)
        whole = rank_chunks(queries, chunks, exclude, rule, keyword=keyword, boost=boost)
        some = rank_chunks(queries, chunks, exclude, rule, keyword=keyword, rows=np.flatnonzero(~exclude), boost=boost)
        assert whole.hits.idx.tolist() == some.hits.idx.tolist()
        np.testing.assert_allclose(whole.hits.scores, some.hits.scores, atol=1e-6)
        np.testing.assert_allclose(some.by_query, query_scores(chunks[~exclude], queries), atol=1e-6)


def test_scoring_every_row_as_candidates_reads_the_matrix_without_a_copy() -> None:
    """A domain whose candidates are every row (a tools-only agent's search with a year of history: the
    own chunks and the close examples) is scored from the matrix itself, bit for bit as from its copy."""
    rng = np.random.default_rng(8)
    chunks = rng.standard_normal((20_000, 384)).astype(np.float32)
    queries = chunks[:2] + 0.1 * rng.standard_normal((2, 384)).astype(np.float32)
    exclude = np.zeros(chunks.shape[0], dtype=bool)
    keyword = rng.random(chunks.shape[0]).astype(np.float32)
    rule = RankRule(10, "max", 0.3)
    every = np.arange(chunks.shape[0])
    rank_chunks(queries, chunks, exclude, rule, keyword=keyword)  # the kernels loaded (not traced below)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        got = rank_chunks(queries, chunks, exclude, rule, keyword=keyword, rows=every)
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    assert peak < chunks.nbytes / 4  # was the matrix again (30 MB here)
    want = rank_chunks(queries, chunks, exclude, rule, keyword=keyword)  # every row, no candidates given
    np.testing.assert_array_equal(got.hits.idx, want.hits.idx)
    np.testing.assert_array_equal(got.hits.scores, want.hits.scores)
    np.testing.assert_array_equal(got.by_query, query_scores(chunks, queries))
    shuffled = rank_chunks(queries, chunks, exclude, rule, keyword=keyword, rows=np.roll(every, 1))
    assert shuffled.hits.idx.tolist() != [] and set(shuffled.hits.idx.tolist()) == set(want.hits.idx.tolist())


def test_a_search_with_history_selects_as_before(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Requests against a store with a history: the candidate-only ranking chooses what the ranking of
    every chunk chooses (the store's own search, with the shortcut and with it turned off)."""
    from contextsieve.selection import search as search_module

    store, agent = _store(tmp_path / "h.sqlite")
    messages = ["request 12 widget", "tool number 5 does thing 5", "request 40. widget 2 please", "thing 7"]
    requests = [Session(agent, store).build_request(m) for m in messages]
    tools = [d for r in requests for d in r.trace.domains if d.name == "tools"]
    assert sum(d.history is not None for d in tools) >= 2  # requests close to examples: the history counted
    assert all(d.path == "exact" for d in tools)
    assert any(d.ranked.ranking is None for d in tools)  # with close examples: scored its candidates only
    fast = [_chosen(r) for r in requests]
    monkeypatch.setattr(search_module, "_scored_rows", lambda rows, exclude, examples: rows)
    plain = [_chosen(Session(agent, store).build_request(m)) for m in messages]
    assert fast == plain


def _chosen(request: object) -> list[tuple[ItemKey, float]]:
    return [(e.key, round(e.score, 5)) for e in request.context.entries]  # type: ignore[attr-defined]


def test_an_hnsw_search_with_history_finds_the_close_examples_as_an_exact_one_does(tmp_path: Path) -> None:
    """A large agent's index holds the tools' own chunks only; a request close to a recorded example
    gets its tool through the HNSW path as through the exact scan (the index's candidates joined by
    the close examples), at the same score; the rest is the approximate search's (recording an example
    re-inserts its tool into the graph, which may move a weak neighbour of the tail)."""
    from contextsieve.retrieval.chunks import IndexConfig

    tools = [Tool("s", f"t{i}", f"tool number {i} does thing {i} with widget {i % 7}") for i in range(300)]
    agent = Agent(servers={"s": McpServer("s", default_include=G)}, tools=tools)
    sessions = []
    for backend in ("hnsw", "exact"):  # histories kept as vectors only: an example has no words to match
        log = UsageLog(tmp_path / f"{backend}.sqlite", model="fake")
        store = ChunkStore(FakeEmbedder(), index=IndexConfig(backend=backend), usage_factory=lambda log=log: log)
        sessions.append(Session(agent, store))
    hnsw, exact = sessions
    examples = {"quokka lemur narwhal ocelot": tools[17].key, "walrus heron ibis tapir": tools[250].key}
    for session in (hnsw, exact):
        for message, key in examples.items():
            session.record_tool_calls(message, [key])
    for message, key in [*examples.items(), ("tool number 40 does thing", None)]:
        fast, plain = hnsw.build_request(message), exact.build_request(message)
        assert [d.path for d in fast.trace.domains if d.name == "tools"] == ["hnsw"]
        got, want = _chosen(fast), _chosen(plain)
        assert got[0] == want[0] and len(set(got) ^ set(want)) <= 2  # the best the same, the tail near
        if key is not None:  # found through its example (score 1: the same request), nothing of its own
            assert got[0] == want[0] == (key, 1.0)
