"""The embedded stash's HNSW graph saved beside the store: reused when the store is opened again,
brought up to date with writes made after the save, and rebuilt (with a warning) when damaged."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("hnswlib")  # the `hnsw` extra is in `make setup`; without it this file has nothing to test

from contextsieve.errors import GraphFileWarning
from contextsieve.retrieval.chunks import IndexConfig
from contextsieve.retrieval.graphfile import graph_folder, load_graph, save_graph
from contextsieve.stash.backend import Filters
from contextsieve.stash.segment import SegmentType
from contextsieve.stash.sqlite import SqliteConfig
from contextsieve.stash.store import StashStore
from contextsieve.stash.vectors import TableRow, VectorTable
from tests.helpers.fake_embedder import FakeEmbedder

WORDS = [f"w{i}" for i in range(300)]


def fake() -> FakeEmbedder:
    e = FakeEmbedder()
    e.model_id = "fake/1"  # type: ignore[misc]
    return e


def hnsw(**kw: object) -> SqliteConfig:
    return SqliteConfig(index=IndexConfig(backend="hnsw", ef_search=256, exact_below=0.0, **kw))  # type: ignore[arg-type]


EXACT = SqliteConfig(index=IndexConfig(backend="exact"), save_graph=False)


def texts(seed: int, n: int) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=6)) for _ in range(n)]


def top(store: StashStore, query: str, k: int = 10) -> list[tuple[str, float]]:
    q = fake().embed([query])
    return [(h.id, h.score) for h in store.backend.dense(q, k, Filters(sessions=("s",)))]


def assert_same_as_exact(path: Path, store: StashStore, queries: list[str]) -> None:
    """Dense search through the graph equals exact search over the same file (scores; near-ties may swap)."""
    oracle = StashStore.open(path, fake(), backend_config=EXACT)
    try:
        for query in queries:
            got, want = top(store, query), top(oracle, query)
            assert len(got) == len(want) == 10
            assert np.allclose([s for _, s in got], [s for _, s in want], atol=0.02), query
            assert len({i for i, _ in got} & {i for i, _ in want}) >= 8
    finally:
        oracle.close()


def table(store: StashStore) -> VectorTable:
    return store.backend._sync()  # type: ignore[attr-defined, no-any-return]


def test_the_graph_is_saved_and_used_again(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    a = StashStore.open(path, fake(), backend_config=hnsw())
    ids = a.stash(texts(1, 400), session="s").segment_ids
    assert table(a).chunks.graph_built == 1
    folder = graph_folder(path)
    assert (folder / "state.npz").is_file() and len(list(folder.glob("graph-*.bin"))) == 1
    a.close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        b = StashStore.open(path, fake(), backend_config=hnsw())
        assert_same_as_exact(path, b, texts(2, 5))
    t = table(b)
    assert t.chunks.graph is not None and t.chunks.graph_built == 0  # loaded, not built
    assert t.chunks.graph_changes == 0
    assert len(ids) == len(set(ids)) == 400
    b.close()


def test_writes_after_the_last_save_are_brought_in(tmp_path: Path) -> None:
    """A process that stashes and deletes and is never closed (as if killed): the next open adds and
    removes exactly those segments on top of the saved graph."""
    path = tmp_path / "s.db"
    a = StashStore.open(path, fake(), backend_config=hnsw())
    first = a.stash(texts(3, 300), session="s").segment_ids
    assert table(a).chunks.graph_built == 1  # the first search builds the graph and saves it
    a.stash(texts(4, 60), session="s")
    a.delete(first[:40], session="s")
    top(a, "w4")
    assert table(a).chunks.graph_changes > 0  # a's graph has them, the saved one not
    b = StashStore.open(path, fake(), backend_config=hnsw())
    assert_same_as_exact(path, b, texts(5, 5))
    t = table(b)
    assert t.chunks.graph_built == 0 and t.chunks.graph_changes > 0
    assert not set(first[:40]) & {i for q in texts(6, 20) for i, _ in top(b, q, 50)}
    b.close()  # saves the brought-in graph
    c = StashStore.open(path, fake(), backend_config=hnsw())
    top(c, "w1")
    assert table(c).chunks.graph_built == 0 and table(c).chunks.graph_changes == 0
    c.close()
    a.backend._db.close()  # type: ignore[attr-defined]


def test_a_damaged_graph_is_rebuilt_with_a_warning(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    a = StashStore.open(path, fake(), backend_config=hnsw())
    a.stash(texts(7, 300), session="s")
    top(a, "w1")  # the table and its graph are made by the first search
    a.close()
    graph = next(graph_folder(path).glob("graph-*.bin"))
    data = bytearray(graph.read_bytes())
    data[len(data) // 2] ^= 0xFF
    graph.write_bytes(bytes(data))
    with pytest.warns(GraphFileWarning, match="sha256"):
        b = StashStore.open(path, fake(), backend_config=hnsw())
        assert_same_as_exact(path, b, texts(8, 3))
    assert table(b).chunks.graph_built == 1
    b.close()
    with warnings.catch_warnings():  # the rebuilt graph was saved in its place
        warnings.simplefilter("error")
        c = StashStore.open(path, fake(), backend_config=hnsw())
        top(c, "w2")
        assert table(c).chunks.graph_built == 0
        c.close()
    (graph_folder(path) / "state.npz").write_bytes(b"CSGRAPH1" + b"\0" * 40)
    with pytest.warns(GraphFileWarning, match="sha256"):
        d = StashStore.open(path, fake(), backend_config=hnsw())
        top(d, "w3")
    d.close()
    with pytest.warns(GraphFileWarning, match="other settings"):
        e = StashStore.open(path, fake(), backend_config=hnsw(hnsw_m=8))
        assert_same_as_exact(path, e, texts(9, 2))
    assert table(e).chunks.graph_built == 1
    e.close()


def test_no_graph_is_saved_when_asked_not_to(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    cfg = SqliteConfig(index=IndexConfig(backend="hnsw"), save_graph=False)
    a = StashStore.open(path, fake(), backend_config=cfg)
    a.stash(texts(10, 50), session="s")
    top(a, "w1")
    a.close()
    assert not graph_folder(path).exists()


def _rows(rng: np.random.Generator, rows: range, dim: int) -> list[TableRow]:
    out = []
    for row in rows:
        v = rng.standard_normal((1 + row % 3, dim)).astype(np.float32)
        v /= np.linalg.norm(v, axis=1, keepdims=True)
        out.append(
            TableRow(row, f"id{row}", "s", SegmentType.MESSAGE, None, "", 0.0, None, False, v, digest=v.tobytes()[:16])
        )
    return out


def test_a_loaded_graph_follows_changed_rows(tmp_path: Path) -> None:
    """Table level: a segment stored again with fewer chunks and other vectors, one removed, one new;
    the loaded graph then answers as a numpy oracle over the new table."""
    rng = np.random.default_rng(5)
    dim, cfg = 16, IndexConfig(backend="hnsw", ef_search=400, exact_below=0.0)
    rows = _rows(rng, range(1, 501), dim)
    t1 = VectorTable(dim, cfg)
    t1.add_many(rows)
    save_graph(t1.chunks, tmp_path / "g")
    shrunk = rows[10]  # row 11: 3 chunks
    assert shrunk.vectors.shape[0] == 3
    v = rng.standard_normal((1, dim)).astype(np.float32)
    v /= np.linalg.norm(v)
    changed = TableRow(11, "id11", "s", SegmentType.MESSAGE, None, "", 0.0, None, False, v, digest=b"new-vectors-1234")
    new = _rows(rng, range(501, 502), dim)
    later = [changed if r.row == 11 else r for r in rows if r.row != 40] + new
    t2 = VectorTable(dim, cfg)
    t2.chunks.defer_hnsw = True
    t2.add_many(later)
    assert load_graph(t2.chunks, tmp_path / "g") == 3
    t2.chunks.finish_loading()
    assert t2.chunks.graph_built == 0
    vecs = {r.row: r.vectors for r in later}
    for _ in range(20):
        q = rng.standard_normal((1, dim)).astype(np.float32)
        q /= np.linalg.norm(q)
        truth = sorted(((float((vecs[r] @ q.T).max()), r) for r in vecs), reverse=True)[:10]
        got = t2.search(q, 10, Filters())
        assert np.allclose([s for s, _ in truth], [s for _, s in got], atol=0.03)
        assert all(t2.ids[s] != "id40" for s, _ in got)
    # the old vectors of row 11's 2nd and 3rd chunks are never found
    for c in range(1, 3):
        q = shrunk.vectors[c : c + 1]
        found = {t2.ids[s]: x for s, x in t2.search(q, 3, Filters())}
        assert found.get("id11", -1.0) < 0.99


def test_a_segment_stored_again_takes_its_labels_back() -> None:
    """A row removed and added again (other vectors) in a table with a graph: the graph finds the new
    vectors under that segment and never the old ones."""
    rng = np.random.default_rng(8)
    dim = 16
    t = VectorTable(dim, IndexConfig(backend="hnsw", ef_search=400, exact_below=0.0))
    rows = _rows(rng, range(1, 301), dim)
    t.add_many(rows)
    old = rows[6].vectors  # row 7: 2 chunks
    v = rng.standard_normal((1, dim)).astype(np.float32)
    v /= np.linalg.norm(v)
    t.remove(7)
    t.add(TableRow(7, "id7", "s", SegmentType.MESSAGE, None, "", 0.0, None, False, v, digest=b"again-1234567890"))
    best = t.search(v, 1, Filters())
    assert t.ids[best[0][0]] == "id7" and best[0][1] > 0.98
    for c in range(old.shape[0]):
        found = dict((t.ids[s], x) for s, x in t.search(old[c : c + 1], 3, Filters()))
        assert found.get("id7", -1.0) < 0.98


def test_leftovers_of_a_killed_save_are_harmless_and_cleared(tmp_path: Path) -> None:
    """A saver killed after writing its graph file but before its state file (an orphan graph, a temp
    file): the old pair still loads; the next save removes the leftovers."""
    path = tmp_path / "s.db"
    a = StashStore.open(path, fake(), backend_config=hnsw())
    a.stash(texts(11, 200), session="s")
    top(a, "w1")
    a.close()
    folder = graph_folder(path)
    (folder / "graph-0123456789abcdef.bin").write_bytes(b"half a graph")
    (folder / ".graph-999999-abcd.tmp").write_bytes(b"partial")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        b = StashStore.open(path, fake(), backend_config=hnsw())
        assert_same_as_exact(path, b, texts(12, 2))
    assert table(b).chunks.graph_built == 0
    b.stash(texts(13, 5), session="s")
    top(b, "w2")
    b.close()  # saves (the graph changed): leftovers go
    assert sorted(p.name for p in folder.iterdir() if p.name != "lock")[1:] == ["state.npz"]
    assert len(list(folder.glob("graph-*.bin"))) == 1 and not list(folder.glob(".graph-*"))
