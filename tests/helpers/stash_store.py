"""What the stash's tests share: a fake embedder under a model name, the segment count, and plain
oracles for BM25 and for a signal's spread."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from datetime import datetime, timezone

from contextsieve.stash.store import StashStore
from tests.helpers.fake_embedder import FakeEmbedder

UTC = timezone.utc
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def fake(model: str = "fake/1") -> FakeEmbedder:
    e = FakeEmbedder()
    e.model_id = model  # type: ignore[misc]
    return e


def count(store: StashStore) -> int:
    return int(str(store.stats()["segments"]))


def bm25(
    tf: Sequence[int], df: Sequence[int], n: int, length: int, avgdl: float, k1: float = 1.2, b: float = 0.75
) -> float:
    """The keyword oracle: Okapi BM25 of one document for distinct query terms, as SQLite FTS5's
    ``bm25()`` computes it: ``sum idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * length / avgdl))`` with
    ``idf = ln((n - df + 0.5) / (df + 0.5))``, floored at 1e-6 (a term in over half the documents
    still counts a little).

    Args:
        tf / df: per query term, its count in the document and the documents holding it.
        n: documents in the store. length: terms in the document. avgdl: mean terms per document.
    """
    score = 0.0
    norm = k1 * (1.0 - b + b * length / max(avgdl, 1e-9))
    for f, d in zip(tf, df):
        if f <= 0:
            continue
        idf = math.log((n - d + 0.5) / (d + 0.5)) if n > 0 else 0.0
        score += max(idf, 1e-6) * f * (k1 + 1.0) / (f + norm)
    return score


# -- stash and get --------------------------------------------------------------------------------


def spread_oracle(values: list[float], top: int, power: float) -> float:
    """How far a scaled signal's best stands out, written out plainly (0 when nothing matched)."""
    best = sorted(values, reverse=True)[:top]
    return (1.0 - sum(best) / len(best)) ** power if best and best[0] == 1.0 else 0.0


def drop_connections(uri: str, *, allow: bool | None = None) -> None:
    """From another connection: optionally allow or refuse new connections to the store's database,
    then end every other connection to it (what clients see when the server restarts)."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    db = str(conninfo_to_dict(uri)["dbname"])
    with psycopg.connect(make_conninfo(uri, dbname="postgres"), autocommit=True) as c:
        if allow is not None:
            c.execute(f'ALTER DATABASE "{db}" ALLOW_CONNECTIONS {"true" if allow else "false"}')
        c.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            (db,),
        )
        for _ in range(100):  # termination is asynchronous: wait until they are gone
            left = c.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()", (db,)
            ).fetchone()
            if left is not None and left[0] == 0:
                break
            time.sleep(0.05)
