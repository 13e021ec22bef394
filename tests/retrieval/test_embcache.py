"""The persistent embedding cache and the Engine around it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from contextsieve.agent.items import IncludeMode, Rule
from contextsieve.engine import Engine
from contextsieve.retrieval.cache import EmbeddingCache, text_key
from tests.helpers.agents import make_agent
from tests.helpers.fake_embedder import FakeEmbedder


class NamedFake(FakeEmbedder):
    def __init__(self, model_id: str = "fake/1") -> None:
        super().__init__()
        self.model_id = model_id


def test_restart_reembeds_nothing_and_edits_only_changed_chunks(tmp_path: Path) -> None:
    first = NamedFake()
    e1 = Engine(make_agent(), embedder=first, cache_dir=tmp_path)
    stats = e1.index()
    assert stats.embedded == stats.chunks > 0 and first.calls == 1
    restarted = NamedFake()
    e2 = Engine(make_agent(), embedder=restarted, cache_dir=tmp_path)
    assert e2.index().embedded == 0 and restarted.calls == 0
    np.testing.assert_array_equal(
        e2.store.matrix([i.key for i in e2.agent.all_items()])[0],
        e1.store.matrix([i.key for i in e1.agent.all_items()])[0],
    )
    e2.agent.upsert(Rule("refunds", "Refunds take five days now.", "refund policy", 500, IncludeMode.AGENT))
    assert e2.index().embedded == 1  # the header chunk is unchanged and comes from the cache
    other_model = NamedFake("fake/2")
    assert Engine(make_agent(), embedder=other_model, cache_dir=tmp_path).index().embedded == stats.chunks


class CountingFake(NamedFake):
    """Counts the texts whose tokens were counted (cutting items into chunks)."""

    def __init__(self, model_id: str = "fake/1") -> None:
        super().__init__(model_id)
        self.counted = 0

    def count_tokens(self, texts):  # noqa: ANN001, ANN201
        self.counted += len(texts)
        return super().count_tokens(texts)


def test_a_restart_reads_chunk_plans_instead_of_cutting_items_again(tmp_path: Path) -> None:
    from contextsieve.selection.chunking import ChunkConfig

    first = CountingFake()
    e1 = Engine(make_agent(), embedder=first, cache_dir=tmp_path)
    e1.index()
    assert first.counted > 0
    again = CountingFake()
    e2 = Engine(make_agent(), embedder=again, cache_dir=tmp_path)
    e2.index()
    assert again.counted == 0 and again.calls == 0
    keys = [i.key for i in e1.agent.all_items()]
    assert [e2.store.chunks_of(k).chunks for k in keys] == [e1.store.chunks_of(k).chunks for k in keys]
    # an edited item is cut again (and only it); another chunk config never reads these plans
    e2.agent.upsert(Rule("refunds", "Refunds take five days now.", "refund policy", 500, IncludeMode.AGENT))
    e2.index()
    assert 0 < again.counted
    other = CountingFake()
    Engine(make_agent(), embedder=other, cache_dir=tmp_path, chunking=ChunkConfig(max_tokens=64)).index()
    assert other.counted > 0


def test_a_tampered_chunk_plan_is_cut_again(tmp_path: Path) -> None:
    import sqlite3
    import warnings

    from contextsieve.errors import CacheIntegrityWarning

    e1 = Engine(make_agent(), embedder=CountingFake(), cache_dir=tmp_path)
    e1.index()
    con = sqlite3.connect(tmp_path / "embeddings.sqlite")
    key, blob = con.execute("SELECT key, plan FROM plans LIMIT 1").fetchone()
    bad = bytearray(blob)
    bad[2] ^= 0x20  # a letter of the first chunk's text changes case: the digest no longer matches
    with con:
        con.execute("UPDATE plans SET plan = ? WHERE key = ?", [bytes(bad), key])
    again = CountingFake()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        e2 = Engine(make_agent(), embedder=again, cache_dir=tmp_path)
        e2.index()
    assert [w.category for w in seen] == [CacheIntegrityWarning] and again.counted > 0
    keys = [i.key for i in e1.agent.all_items()]
    assert [e2.store.chunks_of(k).chunks for k in keys] == [e1.store.chunks_of(k).chunks for k in keys]


def test_memory_only_and_unnamed_embedders_skip_the_disk(tmp_path: Path) -> None:
    Engine(make_agent(), embedder=NamedFake(), cache_dir=False).index()
    Engine(make_agent(), embedder=FakeEmbedder(), cache_dir=tmp_path).index()  # no model id: no shared cache
    assert not list(tmp_path.iterdir())


def _unit(n: int, dim: int, seed: int = 0) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def test_cache_get_put_prune(tmp_path: Path) -> None:
    c = EmbeddingCache(tmp_path / "e.sqlite", "m1")
    v = _unit(3, 4)
    c.put(["a", "b", "c"], v)
    got = c.get(["x", "b", "a"])
    assert sorted(got) == [1, 2] and np.array_equal(got[1], v[1]) and len(c) == 3
    other = EmbeddingCache(tmp_path / "e.sqlite", "m2")
    assert other.get(["a"]) == {} and other.prune() == 3 and len(c) == 0


WRITER = """
import sys, numpy as np
from contextsieve.retrieval.cache import EmbeddingCache, text_key
c = EmbeddingCache(sys.argv[1], "m")
rng = np.random.default_rng(int(sys.argv[2]))
for batch in range(20):
    texts = [f"{sys.argv[2]}-{batch}-{i}" for i in range(50)]
    c.put(texts, np.full((50, 4), 0.5 * (-1) ** int(sys.argv[2]), dtype=np.float32))
print("ok")
"""


def test_two_processes_share_one_cache(tmp_path: Path) -> None:
    db = tmp_path / "shared.sqlite"
    EmbeddingCache(db, "m").close()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(db), str(k)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for k in (1, 2)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1] for o in outs]
    c = EmbeddingCache(db, "m")
    assert len(c) == 2000
    got = c.get([f"{k}-{b}-{i}" for k in (1, 2) for b in range(20) for i in range(50)])
    assert len(got) == 2000 and all(float(v[0]) in (0.5, -0.5) for v in got.values())


def test_engine_select_is_a_one_off_request(tmp_path: Path) -> None:
    e = Engine(make_agent(), embedder=NamedFake(), cache_dir=tmp_path)
    req = e.select("how many days until refunds after the parcel arrives", context_top_n=1, tool_domain="shared")
    assert [str(x.key) for x in req.context.entries][-1] == "rule:refunds"
    from contextsieve.errors import InputError

    with pytest.raises(InputError, match="unknown settings"):
        e.select("x", no_such_setting=1)


def test_every_flipped_byte_of_a_row_is_detected_and_reembedded_once(tmp_path: Path) -> None:
    import sqlite3
    import warnings

    from contextsieve.errors import CacheIntegrityWarning

    db = tmp_path / "e.sqlite"
    v = _unit(2, 8, seed=3)
    EmbeddingCache(db, "m").put(["a", "b"], v)
    con = sqlite3.connect(db)
    (blob,) = con.execute("SELECT vec FROM vectors WHERE hash = ?", [text_key("a")]).fetchone()
    for pos in range(len(blob)):
        for bit in (0, 7):
            bad = bytearray(blob)
            bad[pos] ^= 1 << bit
            with con:
                con.execute("UPDATE vectors SET vec = ? WHERE hash = ?", [bytes(bad), text_key("a")])
            c = EmbeddingCache(db, "m")
            with warnings.catch_warnings(record=True) as seen:
                warnings.simplefilter("always")
                got = c.get(["a", "b"])
                c.get(["a"])  # a second miss is counted, not warned again
            assert sorted(got) == [1] and np.array_equal(got[1], v[1]), (pos, bit)
            assert c.rejected == 2 and [w.category for w in seen] == [CacheIntegrityWarning]
            c.close()
    # old-format rows (no digest), wrong lengths and non-unit vectors are rejected the same way
    for blob2 in (v[0].tobytes(), b"", b"\x00" * 20, np.full(8, 3.0, np.float32).tobytes()):
        with con:
            con.execute("UPDATE vectors SET vec = ? WHERE hash = ?", [blob2, text_key("a")])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert sorted(EmbeddingCache(db, "m").get(["a", "b"])) == [1]
    with pytest.warns(CacheIntegrityWarning):
        assert EmbeddingCache(db, "m").get(["b"], dim=4) == {}  # wrong dimension for the caller


def test_put_refuses_vectors_that_are_not_finite_unit_vectors(tmp_path: Path) -> None:
    from contextsieve.errors import InputError

    c = EmbeddingCache(tmp_path / "e.sqlite", "m")
    for bad in (np.array([[np.nan, 0, 0, 0]], np.float32), np.ones((1, 4), np.float32)):
        with pytest.raises(InputError, match="nothing was written"):
            c.put(["a"], bad)
    with pytest.raises(InputError, match="one vector per text"):
        c.put(["a", "b"], _unit(1, 4))
    assert len(c) == 0


def _picked(e: Engine, message: str) -> list[tuple[str, float | None]]:
    return [(str(x.key), None if x.score is None else round(x.score, 6)) for x in e.select(message).context.entries]


def test_a_tampered_cache_changes_no_selection(tmp_path: Path) -> None:
    import sqlite3
    import warnings

    first = Engine(make_agent(), embedder=NamedFake(), cache_dir=tmp_path)
    want = _picked(first, "refunds after the parcel arrives")
    db = next(tmp_path.rglob("embeddings.sqlite"))
    con = sqlite3.connect(db)
    rows = con.execute("SELECT rowid, vec FROM vectors").fetchall()
    with con:
        for rowid, blob in rows:  # a large exponent in the first float of every row
            bad = bytearray(blob)
            bad[3] ^= 0x40
            con.execute("UPDATE vectors SET vec = ? WHERE rowid = ?", [bytes(bad), rowid])
    con.close()
    again = NamedFake()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        e = Engine(make_agent(), embedder=again, cache_dir=tmp_path)
        got = _picked(e, "refunds after the parcel arrives")
    assert got == want and again.texts >= len(rows) and len(seen) == 1
    # the fresh vectors replaced the bad rows: the next start embeds nothing
    third = NamedFake()
    Engine(make_agent(), embedder=third, cache_dir=tmp_path).index()
    assert third.texts == 0


class _Bad(FakeEmbedder):
    def __init__(self, mode: str) -> None:
        super().__init__()
        self.mode = mode

    def embed(self, texts, *, show_progress=False):  # type: ignore[no-untyped-def]
        v = super().embed(texts)
        if self.mode == "nan":
            v[0, 0] = np.nan
        elif self.mode == "scaled":
            v *= 2
        elif self.mode == "short":
            v = v[1:]
        return v


@pytest.mark.parametrize("mode", ["nan", "scaled", "short"])
def test_bad_embedder_output_is_a_typed_error_and_nothing_is_cached(tmp_path: Path, mode: str) -> None:
    from contextsieve.errors import EmbedderOutputError

    bad = _Bad(mode)
    bad.model_id = "bad/1"  # type: ignore[misc]
    e = Engine(make_agent(), embedder=bad, cache_dir=tmp_path)
    with pytest.raises(EmbedderOutputError):
        e.index()
    with pytest.raises(EmbedderOutputError):
        e.store.embed_query(["a", "b"])
    assert all(len(EmbeddingCache(db, "bad/1")) == 0 for db in tmp_path.rglob("embeddings.sqlite"))


def test_an_interrupted_indexing_keeps_the_parts_it_finished(tmp_path) -> None:  # noqa: ANN001
    """Issue 27 item 17: chunk vectors go into the cache part by part, so Ctrl-C (here: the embedder
    interrupted on its third call) loses only the part under way; the next run embeds the rest."""
    from contextsieve.agent.agent import Agent
    from contextsieve.agent.items import IncludeMode, Reference
    from contextsieve.engine import Engine
    from contextsieve.selection.chunk_vectors import EMBED_PART
    from tests.helpers.fake_embedder import FakeEmbedder

    class Interrupted(FakeEmbedder):
        model_id = "fake/interrupt"

        def __init__(self, stop_at: int | None) -> None:
            super().__init__()
            self.stop_at = stop_at

        def embed(self, texts, *, show_progress=False):  # noqa: ANN001, ANN201
            if self.stop_at is not None and self.calls + 1 == self.stop_at:
                raise KeyboardInterrupt
            return super().embed(texts)

    refs = [
        Reference(f"r{i}", f"document number {i} about topic {i % 7}", "", 0, IncludeMode.AGENT) for i in range(600)
    ]
    agent = Agent(name="big", references=refs)
    first = Interrupted(stop_at=3)
    with pytest.raises(KeyboardInterrupt):
        Engine(agent, embedder=first, cache_dir=tmp_path).index()
    assert first.texts == 2 * EMBED_PART  # two parts done, the third interrupted
    again = Interrupted(stop_at=None)
    report = Engine(agent, embedder=again, cache_dir=tmp_path).index()
    assert report.chunks > 2 * EMBED_PART
    assert report.embedded == again.texts == report.chunks - 2 * EMBED_PART  # the finished parts: from the cache


def test_ctrl_c_ends_the_cli_with_one_line_and_130(monkeypatch, capsys) -> None:  # noqa: ANN001
    from contextsieve.cli import main as cli

    def interrupted(args):  # noqa: ANN001, ANN202
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "_run", interrupted)
    assert cli.main(["demo"]) == 130
    err = capsys.readouterr().err
    assert err.strip().splitlines() == ["contextsieve: interrupted (work finished so far is kept)"]


def test_a_row_whose_key_reads_back_as_bytes_is_rejected_not_raised(tmp_path: Path) -> None:
    """Found by ``benchmarks.robustness.tamper``: a flipped bit in a record header made the key column come back
    as a blob, and verification raised AttributeError ('bytes' has no 'encode') instead of rejecting."""
    cache = EmbeddingCache(tmp_path / "c.sqlite", "m/1")
    v = np.eye(4, dtype=np.float32)[:1]
    cache.put(["text"], v)
    key = text_key("text")
    blob = cache._db.execute("SELECT vec FROM vectors").fetchone()[0]
    assert cache._verified(key, blob, 4) is not None
    assert cache._verified(key.encode(), blob, 4) is None and cache._verified(key, key, 4) is None
    cache.close()
