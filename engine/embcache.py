"""Persistent cache of chunk vectors, keyed by model id and the sha256 of the embedded text.

One SQLite file (WAL mode, 30 s busy timeout) that any number of processes may share: readers never
block, writers wait their turn, and a write is one transaction, so a crash leaves no half entry. The
model id (:attr:`contextsieve.Embedder.info`.model_id: model, variant, weights hash, builder version)
is part of the key, so vectors of another model or build are never returned.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from contextsieve.errors import ContextSieveError

__all__ = ["EmbeddingCache", "text_key"]


def text_key(text: str) -> str:
    """sha256 hex of the UTF-8 text."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class EmbeddingCache:
    """Vectors by (model id, text hash) in a SQLite file.

    Args:
        path: the database file (created with its folder).
        model_id: the embedder's identity; entries of other ids are ignored (see :meth:`prune`).
    """

    def __init__(self, path: str | Path, model_id: str) -> None:
        self.path = Path(path)
        self.model_id = model_id
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = sqlite3.connect(self.path, timeout=30.0, isolation_level=None, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS vectors (model TEXT NOT NULL, hash TEXT NOT NULL, vec BLOB NOT NULL, "
                "PRIMARY KEY (model, hash))"
            )
        except sqlite3.Error as e:
            raise ContextSieveError(f"cannot open the embedding cache {self.path}: {e}") from e

    def get(self, texts: Sequence[str]) -> dict[int, np.ndarray]:
        """Cached vectors of ``texts`` by their position in ``texts``."""
        keys = [text_key(t) for t in texts]
        found: dict[str, np.ndarray] = {}
        for start in range(0, len(keys), 500):
            part = keys[start : start + 500]
            rows = self._db.execute(
                f"SELECT hash, vec FROM vectors WHERE model = ? AND hash IN ({','.join('?' * len(part))})",
                [self.model_id, *part],
            ).fetchall()
            found.update((h, np.frombuffer(v, dtype=np.float32)) for h, v in rows)
        return {i: found[k] for i, k in enumerate(keys) if k in found}

    def put(self, texts: Sequence[str], vectors: np.ndarray) -> None:
        """Store vectors (one transaction)."""
        rows = [
            (self.model_id, text_key(t), np.ascontiguousarray(v, dtype=np.float32).tobytes())
            for t, v in zip(texts, vectors)
        ]
        with self._db:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.executemany("INSERT OR REPLACE INTO vectors VALUES (?, ?, ?)", rows)

    def __len__(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM vectors WHERE model = ?", [self.model_id]).fetchone()[0])

    def prune(self) -> int:
        """Delete the entries of every other model id; returns how many were deleted."""
        with self._db:
            cur = self._db.execute("DELETE FROM vectors WHERE model != ?", [self.model_id])
        return cur.rowcount

    def close(self) -> None:
        self._db.close()
