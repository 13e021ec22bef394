"""The persistent embedding cache and the Engine around it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from contextsieve.embcache import EmbeddingCache
from contextsieve.engine import Engine
from contextsieve.items import IncludeMode, Rule

from .fake_embedder import FakeEmbedder
from .test_engine import make_agent


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


def test_memory_only_and_unnamed_embedders_skip_the_disk(tmp_path: Path) -> None:
    Engine(make_agent(), embedder=NamedFake(), cache_dir=False).index()
    Engine(make_agent(), embedder=FakeEmbedder(), cache_dir=tmp_path).index()  # no model id: no shared cache
    assert not list(tmp_path.iterdir())


def test_cache_get_put_prune(tmp_path: Path) -> None:
    c = EmbeddingCache(tmp_path / "e.sqlite", "m1")
    v = np.arange(12, dtype=np.float32).reshape(3, 4)
    c.put(["a", "b", "c"], v)
    got = c.get(["x", "b", "a"])
    assert sorted(got) == [1, 2] and np.array_equal(got[1], v[1]) and len(c) == 3
    other = EmbeddingCache(tmp_path / "e.sqlite", "m2")
    assert other.get(["a"]) == {} and other.prune() == 3 and len(c) == 0


WRITER = """
import sys, numpy as np
from contextsieve.embcache import EmbeddingCache
c = EmbeddingCache(sys.argv[1], "m")
rng = np.random.default_rng(int(sys.argv[2]))
for batch in range(20):
    texts = [f"{sys.argv[2]}-{batch}-{i}" for i in range(50)]
    c.put(texts, np.full((50, 8), float(sys.argv[2]), dtype=np.float32))
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
    assert len(got) == 2000 and all(float(v[0]) in (1.0, 2.0) for v in got.values())


def test_engine_select_is_a_one_off_request(tmp_path: Path) -> None:
    e = Engine(make_agent(), embedder=NamedFake(), cache_dir=tmp_path)
    req = e.select("how many days until refunds after the parcel arrives", context_top_n=1)
    assert [str(x.key) for x in req.context.entries][-1] == "rule:refunds"
    from contextsieve.errors import InputError

    with pytest.raises(InputError, match="unknown settings"):
        e.select("x", no_such_setting=1)
