"""The stash's backends against plain oracles and each other: processes sharing a store, the in-memory
vector table, keyword scores against BM25, the combined ranking, old formats, batch loading and a
PostgreSQL connection that drops."""

from __future__ import annotations

import dataclasses
import itertools
import multiprocessing as mp
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from contextsieve.errors import StashError
from contextsieve.retrieval.chunks import IndexConfig
from contextsieve.stash.backend import Filters
from contextsieve.stash.ranking import RankConfig
from contextsieve.stash.segment import SegmentType
from contextsieve.stash.sqlite import SqliteBackend
from contextsieve.stash.store import StashStore
from contextsieve.stash.vectors import TableRow, VectorTable
from tests.helpers.stash_store import bm25, count, drop_connections, fake, spread_oracle


def _writer(path: str, n: int, worker: int, out: "mp.Queue[list[str]]") -> None:
    acked: list[str] = []
    with StashStore.open(path, fake()) as s:
        for i in range(n):
            r = s.stash([f"worker {worker} note {i} about topic {i % 7}"], session="shared")
            acked.extend(r.segment_ids)
            s.retrieve(f"topic {i % 7}", session="shared", top_k=3)
    out.put(acked)


def test_four_processes_write_and_read_one_store(location: str) -> None:
    path = location
    StashStore.open(path, fake()).close()
    ctx = mp.get_context("spawn")  # a forked child may inherit a busy Numba / ORT thread pool
    q: mp.Queue[list[str]] = ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(path, 40, w, q)) for w in range(4)]
    for p in procs:
        p.start()
    acked = [x for _ in procs for x in q.get(timeout=300)]
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    with StashStore.open(path, fake()) as s:
        assert count(s) == 160 and len(set(acked)) == 160
        assert len(s.get(acked, session="shared")) == 160
        hits = s.retrieve("worker 3 note 39 about topic 4", session="shared", top_k=1)
        assert hits[0].segment.text == "worker 3 note 39 about topic 4"
        if isinstance(s.backend, SqliteBackend):
            assert s.backend.integrity_check() == "ok"


def test_a_second_process_sees_new_writes(location: str) -> None:
    path = location
    reader = StashStore.open(path, fake())
    writer = StashStore.open(path, fake())
    assert reader.retrieve("fresh words", session="s") == []
    writer.stash(["fresh words here"], session="s")
    assert reader.retrieve("fresh words", session="s")[0].segment.text == "fresh words here"
    writer.delete([reader.list(session="s")[0].id], session="s")
    assert reader.retrieve("fresh words", session="s") == []
    reader.close()
    writer.close()


def test_a_read_scope_sees_one_state_of_the_store(tmp_path: Path) -> None:
    """What one retrieve sees (``backend.reading()``): the embedded store checks for other
    processes' writes once, at the scope's start; a write of its own inside ends the pin."""
    from contextsieve.stash.backend import index_terms

    path = tmp_path / "s.db"
    reader, writer = StashStore.open(path, fake()), StashStore.open(path, fake())
    reader.stash(["alpha words"], session="s")
    be = reader.backend

    def hits() -> int:
        return len(be.keyword(index_terms("alpha"), 10, Filters(sessions=("s",))))

    with be.reading():
        writer.stash(["alpha words again here"], session="s")
        assert hits() == 1  # the other handle's write is not seen inside the scope
        with be.reading():
            assert hits() == 1
        reader.stash(["alpha third one"], session="s")
        assert hits() == 3
    writer.stash(["alpha fourth one"], session="s")
    assert hits() == 4
    assert len(reader.retrieve("alpha", session="s", top_k=10)) == 4
    reader.close()
    writer.close()


# -- the in-memory table against a plain oracle ---------------------------------------------------


@pytest.mark.parametrize("backend", ["exact", "hnsw"])
def test_vector_table_matches_a_numpy_oracle(backend: str) -> None:
    rng = np.random.default_rng(7)
    dim, n = 32, 3000
    t = VectorTable(dim, IndexConfig(backend=backend, ef_search=400, exact_below=0.0))
    vecs, meta = [], []
    for row in range(n):
        chunks = 1 + int(rng.integers(0, 3))
        v = rng.standard_normal((chunks, dim)).astype(np.float32)
        v /= np.linalg.norm(v, axis=1, keepdims=True)
        kind = list(SegmentType)[row % 3]
        sess = f"s{row % 4}"
        t.add(TableRow(row, f"id{row}", sess, kind, None, "", float(row), None, row % 5 == 0, v))
        vecs.append(v)
        meta.append((sess, kind, row % 5 == 0))
    for row in range(0, n, 10):
        t.remove(row)
    q = rng.standard_normal((2, dim)).astype(np.float32)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    for f in (
        Filters(),
        Filters(sessions=("s1",)),
        Filters(types=(SegmentType.MESSAGE,), protected=False),
        Filters(since=100.0, until=2000.0),
    ):
        ok = t.allowed(f)
        oracle = []
        for row in range(n):
            if ok[row]:
                oracle.append((float((vecs[row] @ q.T).max()), row))
        assert sum(ok) == len(oracle)
        expect = [r for _, r in sorted(oracle, key=lambda x: (-x[0], x[1]))[:10]]
        got = [s for s, _ in t.search(q, 10, f)]
        true = {r: sc for sc, r in oracle}
        tenth = true[expect[-1]]
        assert got[0] == expect[0] and len(got) == 10
        assert all(true[r] >= tenth - 0.01 for r in got)  # int8 rounding may swap near-ties
        assert len(set(got) & set(expect)) >= 9
        removed = {r for r in range(0, n, 10)}
        assert not removed & set(got)
    some = [5, 1, 2999, 7, 1234]  # one kernel call for many segments of 1-3 chunks each, in the order asked
    expect_scores = [float((vecs[r] @ q.T).max()) for r in some]
    assert np.allclose(t.scores(q, some), expect_scores, atol=0.02)
    assert t.scores(q, []) == []
    assert t.backend == backend


@pytest.mark.parametrize("backend", ["exact", "hnsw"])
def test_expiry_masks_follow_the_retrieval_time(backend: str) -> None:
    """Segments with expiry times, some protected: the masks at several times (one remembered base
    mask, the expiry applied after) equal a plain oracle, for keyword and dense search alike."""
    rng = np.random.default_rng(17)
    dim, n = 16, 400
    t = VectorTable(dim, IndexConfig(backend=backend, ef_search=400, exact_below=0.0))
    expires: list[float | None] = []
    protected = []
    vecs = []
    for row in range(n):
        e = None if row % 3 == 0 else float(rng.integers(0, 100))
        v = rng.standard_normal((1 + row % 2, dim)).astype(np.float32)
        v /= np.linalg.norm(v, axis=1, keepdims=True)
        t.add(TableRow(row, f"id{row}", "s", SegmentType.MESSAGE, None, "", 0.0, e, row % 7 == 0, v, ["common"]))
        expires.append(e)
        protected.append(row % 7 == 0)
        vecs.append(v)
    t.remove(5)
    q = rng.standard_normal((1, dim)).astype(np.float32)
    for at in (None, 0.0, 30.0, 30.0, 99.0, 1000.0, 30.0):
        alive = [
            r != 5 and (at is None or expires[r] is None or expires[r] > at or protected[r])  # type: ignore[operator]
            for r in range(n)
        ]
        f = Filters(sessions=("s",), alive_at=at)
        assert t.allowed(f).tolist() == alive
        got = {s for s, _ in t.keyword(["common"], n, f)}
        assert got == {r for r in range(n) if alive[r]}
        dense = [s for s, _ in t.search(q, 20, f)]
        scores = sorted(((float((vecs[r] @ q.T).max()), r) for r in range(n) if alive[r]), reverse=True)[:20]
        assert all(alive[s] for s in dense) and dense[0] == scores[0][1]


def test_keyword_scores_equal_a_bm25_oracle(store: StashStore) -> None:
    """Both backends' BM25 (in memory for SQLite, in SQL for PostgreSQL) against ``bm25()`` computed
    here over every stored segment, after batches that share terms, a delete and another session, at
    Okapi's length normalisation and at the weaker ones :class:`RankConfig` may set."""
    from collections import Counter

    from contextsieve.stash.backend import index_terms

    rng = np.random.default_rng(4)
    words = ["deploy", "vault", "timeout", "checkout", "rollback"] + [f"w{i}" for i in range(40)]
    texts = sorted({" ".join(rng.choice(words, size=int(rng.integers(2, 25)))) for _ in range(120)})
    ids = store.stash(texts[:60], session="a").segment_ids + store.stash(texts[60:], session="a").segment_ids
    store.stash(["deploy vault vault elsewhere"], session="b")
    store.delete(list(ids[:10]), session="a")
    live = dict(zip(ids[10:], texts[10:]))
    everyone = [*texts[10:], "deploy vault vault elsewhere"]
    docs = [Counter(index_terms(t)) for t in everyone]
    avgdl = sum(sum(d.values()) for d in docs) / len(docs)
    for query, b in itertools.product(("deploy vault", "timeout w3 w3 rollback", "checkout"), (0.75, 0.3, 0.0)):
        terms = list(dict.fromkeys(index_terms(query)))
        df = [sum(1 for d in docs if t in d) for t in terms]
        oracle = {}
        for i, text in live.items():
            tf = Counter(index_terms(text))
            x = bm25([tf.get(t, 0) for t in terms], df, len(docs), sum(tf.values()), avgdl, b=b)
            if x > 0:
                oracle[i] = x
        got = store.backend.keyword(terms, 500, Filters(sessions=("a",)), b=b)
        assert {h.id for h in got} == set(oracle), (query, b)
        assert np.allclose([h.score for h in got], [oracle[h.id] for h in got], rtol=1e-6), (query, b)
        assert [h.score for h in got] == sorted((h.score for h in got), reverse=True)


def test_postgres_store_of_an_older_version_gets_its_term_counts_again(postgres_uri: str) -> None:
    """A PostgreSQL store written before the store-wide counts (and with the old per-batch term
    counts): opening it counts every term again, so BM25 equals that of a freshly written store."""
    import psycopg

    from contextsieve.stash.backend import index_terms

    texts = [f"deploy vault {i} note{i % 3}" for i in range(20)] + ["vault only", "checkout rollback"]
    s = StashStore.open(postgres_uri, fake())
    s.stash(texts, session="a")
    f = Filters(sessions=("a",))
    want = [(h.id, round(h.score, 9)) for h in s.backend.keyword(index_terms("deploy vault note1"), 50, f)]
    s.close()
    with psycopg.connect(postgres_uri, autocommit=True) as c:  # as an older version left it
        c.execute("DELETE FROM stash_terms WHERE term LIKE ' %'")
        c.execute("UPDATE stash_terms SET df = 1")
    again = StashStore.open(postgres_uri, fake())
    got = [(h.id, round(h.score, 9)) for h in again.backend.keyword(index_terms("deploy vault note1"), 50, f)]
    assert sorted(got) == sorted(want) and len(got) == 21  # equal scores may come in either order
    again.close()


def test_keyword_scores_of_dense_candidates_outside_the_top_k(store: StashStore) -> None:
    """``keyword(..., also=ids)``: after the k best, the segments among ``also`` that hold a term get
    the score a full keyword search gives them; those without a term, of another session or unknown
    get none."""
    from contextsieve.stash.backend import index_terms

    texts = [f"deploy {' '.join(['vault'] * (i % 5 + 1))} note{i}" for i in range(30)] + ["nothing in common"]
    ids = store.stash(texts, session="a").segment_ids
    other = store.stash(["deploy vault elsewhere"], session="b").segment_ids
    f = Filters(sessions=("a",))
    terms = index_terms("deploy vault")
    full = {h.id: h.score for h in store.backend.keyword(terms, 100, f)}
    assert len(full) == 30
    top = store.backend.keyword(terms, 3, f)
    below = [i for i in full if i not in {h.id for h in top}][-4:]
    got = store.backend.keyword(terms, 3, f, also=[ids[-1], *below, other[0], "seg_unknown", top[0].id])
    assert [h.id for h in got[:3]] == [h.id for h in top]
    assert [h.id for h in got[3:]] == below
    assert np.allclose([h.score for h in got[3:]], [full[i] for i in below], rtol=1e-6)


def test_combined_ranking_matches_an_oracle_and_not_the_candidate_count(tmp_path: Path) -> None:
    """retrieve's order equals the ranking formula computed over every segment by hand (weights moved
    by each signal's spread over its best five), and stays the same with fewer candidates fetched
    (each signal is scaled by its best candidate, not by the weakest one fetched, and its best five
    are fetched whatever the count)."""

    from contextsieve.stash.backend import index_terms

    rng = np.random.default_rng(21)
    words = [f"w{i}" for i in range(80)]
    texts = sorted({" ".join(rng.choice(words, size=int(rng.integers(3, 12)))) for _ in range(300)})
    s = StashStore.open(tmp_path / "r.db", fake())
    s.stash(texts, session="a")
    flat = dict(created_weight=0.0, stashed_weight=0.0)
    everything = Filters(sessions=("a",))
    for query in [" ".join(rng.choice(words, size=3)) for _ in range(20)]:
        qv = s.embed_query(query)
        sims = {h.id: h.score for h in s.backend.dense(qv, 1000, everything)}
        b = RankConfig().keyword_length_norm
        bm = {h.id: h.score for h in s.backend.keyword(index_terms(query), 1000, everything, b=b)}
        best_s, best_k = max(sims.values()), max(bm.values(), default=0.0)
        # this query's weights: each signal's spread over its best 5 (RankConfig.spread_power, spread_top)
        cs = spread_oracle([v / best_s for v in sims.values()], 5, 0.5)
        ck = spread_oracle([v / best_k for v in bm.values()] if best_k else [0.0], 5, 0.5)
        mean = (0.6 * cs + 0.2 * ck) / 0.8
        ws, wk = (0.6 * cs / mean, 0.2 * ck / mean) if mean > 0 else (0.6, 0.2)
        oracle = sorted(
            sims,
            key=lambda i: (-(ws * sims[i] / best_s + wk * (bm.get(i, 0.0) / best_k if best_k else 0.0)), -sims[i], i),
        )
        orders = []
        for cand in (300, 100):
            s.config = dataclasses.replace(s.config, rank=RankConfig(candidates=cand, **flat))
            orders.append([h.segment.id for h in s.retrieve(query, session="a", top_k=5, min_similarity=-1.0)])
        assert orders[0] == oracle[:5], query
        assert orders[1] == orders[0], (query, 100)
    s.close()


def test_in_memory_keyword_search_ranks_as_the_bm25_oracle(tmp_path: Path) -> None:
    """The embedded store's BM25 (an in-memory term index) against :func:`bm25` over the stored texts
    (every session counts for N, df and the mean length, as an FTS5 index over the store did), after
    deletes and from a second handle's view (which loads its table from the file)."""
    from collections import Counter

    from contextsieve.stash.backend import index_terms

    rng = np.random.default_rng(3)
    words = [f"w{i}" for i in range(60)] + ["deploy", "checkout", "timeout", "vault"]
    texts = sorted({" ".join(rng.choice(words, size=int(rng.integers(2, 30)))) for _ in range(400)})
    s = StashStore.open(tmp_path / "k.db", fake())
    ids = s.stash(texts, session="a").segment_ids
    s.stash(["deploy vault timeout elsewhere"], session="b")
    s.delete(list(ids[:40]), session="a")
    other = StashStore.open(tmp_path / "k.db", fake())  # loads the table from the file
    docs = [Counter(index_terms(t)) for t in [*texts[40:], "deploy vault timeout elsewhere"]]
    avgdl = sum(sum(d.values()) for d in docs) / len(docs)
    for query in ("deploy timeout", "w3 w7 w7 checkout", "vault", "nothing here"):
        terms = index_terms(query)
        uniq = list(dict.fromkeys(terms))
        df = [sum(1 for d in docs if t in d) for t in uniq]
        scored = [
            (bm25([d.get(t, 0) for t in uniq], df, len(docs), sum(d.values()), avgdl), pos, i)
            for pos, (i, d) in enumerate(zip(ids[40:], docs))  # pos: the row order breaks ties
            if any(t in d for t in uniq)
        ]
        oracle = [(i, x) for x, _, i in sorted(scored, key=lambda e: (-e[0], e[1]))][:20]
        for store in (s, other):
            got = store.backend.keyword(terms, 20, Filters(sessions=("a",)))
            assert [h.id for h in got][:10] == [i for i, _ in oracle][:10] or np.allclose(
                [h.score for h in got][:10], [x for _, x in oracle][:10], rtol=1e-6
            )
            assert np.allclose([h.score for h in got], [x for _, x in oracle if x > 0], rtol=1e-6)
            assert not {h.id for h in got} & set(ids[:40])
    s.close()
    other.close()


def test_a_store_with_the_old_fts5_table_opens_and_works(tmp_path: Path) -> None:
    """A store made when the schema had an FTS5 table (written on every insert and delete, never
    read): it opens, takes writes and deletes, searches, and its ``fts`` is left as it was."""
    from contextsieve.stash.backend import index_terms

    path = tmp_path / "old.db"
    with StashStore.open(path, fake()) as s:
        kept = s.stash(["deploy the vault", "rotate the keys"], session="s").segment_ids
    db = sqlite3.connect(path)
    db.execute(
        "CREATE VIRTUAL TABLE fts USING fts5 (terms, content='segments', content_rowid='row', "
        "tokenize='unicode61 remove_diacritics 0')"
    )
    db.execute("INSERT INTO fts (fts) VALUES ('rebuild')")
    db.commit()
    before = db.execute("SELECT count(*) FROM fts_docsize").fetchone()
    db.close()
    with StashStore.open(path, fake()) as s:
        new = s.stash(["deploy again tomorrow", "vault audit"], session="s").segment_ids
        assert s.delete([kept[1], new[1]], session="s") == 2
        hits = s.backend.keyword(index_terms("deploy vault"), 10, Filters(sessions=("s",)))
        assert {h.id for h in hits} == {kept[0], new[0]}
        assert [x.text for x in s.get([new[0], kept[0]], session="s")] == ["deploy again tomorrow", "deploy the vault"]
        assert count(s) == 2 and s.protect([new[0]], session="s") == 1
        assert isinstance(s.backend, SqliteBackend) and s.backend.integrity_check() == "ok"
    db = sqlite3.connect(path)
    assert db.execute("SELECT count(*) FROM fts_docsize").fetchone() == before  # neither written nor dropped
    db.close()
    fresh = sqlite3.connect(tmp_path / "new.db")
    StashStore.open(tmp_path / "new.db", fake()).close()
    names = {r[0] for r in fresh.execute("SELECT name FROM sqlite_master")}
    fresh.close()
    assert "fts" not in names and {"meta", "segments", "refs", "changes"} <= names


def test_batch_loading_equals_adding_one_by_one() -> None:
    from contextsieve.stash.segment import SegmentType

    rng = np.random.default_rng(11)
    rows = []
    for i in range(40):
        v = rng.standard_normal((1 + i % 3, 16)).astype(np.float32)
        v /= np.linalg.norm(v, axis=1, keepdims=True)
        kind = list(SegmentType)[i % len(SegmentType)]
        rows.append(
            TableRow(
                i,
                f"s{i}",
                f"sess{i % 2}",
                kind,
                f"t{i % 4}",
                "src",
                100 + i,
                None,
                i % 5 == 0,
                v,
                [f"w{i % 7}", "common"],
                200 + i,
                f"sha{i}",
            )
        )
    one, many = VectorTable(16), VectorTable(16)
    for r in rows:
        one.add(r)
    many.add_many(rows[:25])
    many.add_many(rows[25:] + [rows[3]])  # a row given again replaces the first one
    one.add(rows[3])
    q = rng.standard_normal((2, 16)).astype(np.float32)
    for f in (Filters(), Filters(sessions=("sess0",)), Filters(topics=("t1", "t2"), protected=False)):
        got = [(one.ids[s], round(x, 5)) for s, x in one.search(q, 8, f)]
        assert got == [(many.ids[s], round(x, 5)) for s, x in many.search(q, 8, f)]
        assert [one.ids[s] for s, _ in one.keyword(["w3", "common"], 5, f)] == [
            many.ids[s] for s, _ in many.keyword(["w3", "common"], 5, f)
        ]
    ids = [f"s{i}" for i in range(40)]
    assert one.facts(ids) == many.facts(ids) and one.facts(["s5"]) == {"s5": (105, 205, "sha5")}
    many.remove(5)
    assert "s5" not in many.facts(ids) and len(many) == 39


def test_postgres_store_reconnects_after_its_connection_is_dropped(postgres_uri: str) -> None:
    """Issue 27 item 3: reads run again on a fresh connection; a write reconnects when the loss is
    known before it is sent, else it is an error with nothing stored; the next write works; what is
    stored is exactly what was acknowledged."""
    with StashStore.open(postgres_uri, fake()) as s:
        first = s.stash(["the deploy key is in vault"]).segment_ids
        drop_connections(postgres_uri)
        assert [r.segment.id for r in s.retrieve("deploy key")] == list(first)  # the read reconnected
        acked = ["the deploy key is in vault"]
        for text in ("written while the connection was gone", "written after"):
            drop_connections(postgres_uri)
            try:  # a loss found before sending reconnects first; one found during the write is an error
                s.stash([text])
                acked.append(text)
            except StashError:
                pass
        s.stash(["written last"])  # whatever happened above, the next write works
        acked.append("written last")
        assert sorted(x.text for x in s.list()) == sorted(acked)  # exactly what was acknowledged, once each


def test_postgres_store_down_then_back(postgres_uri: str) -> None:
    with StashStore.open(postgres_uri, fake()) as s:
        s.stash(["the deploy key is in vault"])
        drop_connections(postgres_uri, allow=False)
        try:
            with pytest.raises(StashError, match="cannot connect"):
                s.retrieve("deploy key")
        finally:
            drop_connections(postgres_uri, allow=True)
        assert [r.segment.text for r in s.retrieve("deploy key")] == ["the deploy key is in vault"]
