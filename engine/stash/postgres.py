"""The shared stash backend: PostgreSQL with pgvector, for stores used by many agents and machines.

Tables (created on first use, in the connection's default schema): ``stash_meta``,
``stash_segments`` (fields, a ``tsvector`` of the index terms), ``stash_chunks`` (one ``vector(dim)``
row per chunk, HNSW index with inner-product ops), ``stash_refs``, ``stash_terms`` (document
frequencies for BM25). Every write is one transaction; filters are SQL conditions evaluated inside
the vector search (pgvector's iterative index scan keeps looking until enough rows pass).

Keyword scores are Okapi BM25 with SQLite FTS5's formula (k1 1.2, b 0.75, idf floored at 1e-6), as
the embedded backend's term index (:mod:`contextsieve.retrieval.bm25`) computes them, so both backends
rank alike, computed in one SQL statement: the ``tsvector`` GIN index finds the segments holding a
query term, each term's count comes from the tsvector's positions, document frequencies and the
store's segment and term counts from ``stash_terms`` (kept in the transaction of every write).

The statements shared with the embedded backend are in :mod:`contextsieve.stash.sql` (reads) and
:mod:`contextsieve.stash.sql_writes` (writes).

Needs the ``postgres`` extra (``psycopg``); the server needs the ``vector`` extension (``CREATE
EXTENSION vector`` is run when missing, which needs the right to create it).
"""

from __future__ import annotations

import json
import math
import re
import threading
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from contextsieve.errors import InputError, MissingExtraError, StashError, StashNotFoundError
from contextsieve.stash.backend import FORMAT, OKAPI_B, Filters, Hit, SegmentRow, index_terms
from contextsieve.stash.dialect import Dialect
from contextsieve.stash.segment import ContextSegment
from contextsieve.stash.sql import SqlBackend, guarded, reads

__all__ = ["PostgresConfig", "PostgresBackend"]

_SCHEMA = [
    "CREATE EXTENSION IF NOT EXISTS vector",
    "CREATE TABLE IF NOT EXISTS stash_meta (key text PRIMARY KEY, value text NOT NULL)",
    """CREATE TABLE IF NOT EXISTS stash_segments (
        row bigserial PRIMARY KEY, id text NOT NULL UNIQUE, session text NOT NULL, text text NOT NULL,
        type text NOT NULL, created bigint NOT NULL, stashed bigint NOT NULL,
        tokens integer NOT NULL, topic text, source text NOT NULL, sha256 text NOT NULL, model text NOT NULL,
        expires bigint, protected boolean NOT NULL, chunks integer NOT NULL, digest bytea NOT NULL,
        terms tsvector NOT NULL, nterms integer NOT NULL, fields bytea NOT NULL, superseded_by text)""",
    "CREATE INDEX IF NOT EXISTS stash_segments_session_hash ON stash_segments (session, sha256)",
    "CREATE INDEX IF NOT EXISTS stash_segments_created ON stash_segments (created)",
    "CREATE INDEX IF NOT EXISTS stash_segments_terms ON stash_segments USING gin (terms)",
    """CREATE TABLE IF NOT EXISTS stash_refs (
        src text NOT NULL, dst text NOT NULL, pos integer NOT NULL, PRIMARY KEY (src, dst))""",
    "CREATE INDEX IF NOT EXISTS stash_refs_dst ON stash_refs (dst)",
    "CREATE TABLE IF NOT EXISTS stash_terms (term text PRIMARY KEY, df bigint NOT NULL)",
]
_LOCK_KEY = 0x6373_7461_7368  # advisory lock: one process creates the schema at a time
#: Rows of ``stash_terms`` that count the store's segments and their index terms (BM25's N and mean
#: length); index terms never hold a space, so these names never meet one.
_DOCS, _TERMS = " segments", " terms"
#: Okapi BM25 of every segment matching the query terms, as SQLite FTS5 computes it (k1 1.2, b 0.75,
#: idf floored at 1e-6), from the tsvector's positions (a term's count; PostgreSQL keeps at most 256
#: positions per term, far past where BM25 saturates): the ``limit`` best (flag false), then the scores
#: of the ids asked for (flag true). Parameters: terms, tsquery, filters, limit, ids.
_BM25 = """
WITH c AS (SELECT max(df) FILTER (WHERE term = ' segments')::float8 AS n,
                  max(df) FILTER (WHERE term = ' terms')::float8 AS total
           FROM stash_terms WHERE term IN (' segments', ' terms')),
     q AS (SELECT t.term, greatest(ln((c.n - t.df + 0.5) / (t.df + 0.5)), 1e-6) AS idf
           FROM stash_terms t, c WHERE t.term = ANY(%s)),
     scored AS MATERIALIZED (
       SELECT s.id, s.row, sum(q.idf * u.tf * 2.2
                               / (u.tf + 1.2 * (1 - %s::float8 + %s::float8 * s.nterms
                                                / greatest(c.total / greatest(c.n, 1), 1e-9))))
                           AS score
       FROM stash_segments s CROSS JOIN c
            CROSS JOIN LATERAL (SELECT lexeme, coalesce(array_length(positions, 1), 1) AS tf FROM unnest(s.terms)) u
            JOIN q ON q.term = u.lexeme
       WHERE s.terms @@ to_tsquery('simple', %s) AND {where}
       GROUP BY s.id, s.row)
(SELECT id, score, false FROM scored ORDER BY score DESC, row LIMIT %s)
UNION ALL
(SELECT id, score, true FROM scored WHERE id = ANY(%s))
"""
_URI_PASSWORD = re.compile(r"(://[^:/@]*:)[^@]*@")


@dataclass(frozen=True, kw_only=True)
class PostgresConfig:
    """Settings of the PostgreSQL backend.

    Attributes:
        ef_search: pgvector ``hnsw.ef_search`` for searches (default 100).
        hnsw_m / ef_construction: the HNSW index's ``m`` and ``ef_construction`` (defaults 16 and 64,
            pgvector's), used when the index is created.
        connect_timeout: seconds to wait for the server (default 10).
    """

    ef_search: int = 100
    hnsw_m: int = 16
    ef_construction: int = 64
    connect_timeout: float = 10.0

    def __post_init__(self) -> None:
        for name in ("ef_search", "hnsw_m", "ef_construction"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise InputError(f"{name} must be a positive int, got {v!r}")


#: How PostgreSQL spells what differs from SQLite (see :class:`~contextsieve.stash.dialect.Dialect`).
DIALECT = Dialect(
    mark="%s",
    segments="stash_segments",
    refs="stash_refs",
    meta="stash_meta",
    true="TRUE",
    false="FALSE",
    arrays=True,
    returning=True,
    lock_row=" FOR UPDATE",
    ignore="INSERT INTO {table} VALUES ({values}) ON CONFLICT DO NOTHING",
    replace="INSERT INTO {table} VALUES ({values}) ON CONFLICT ({key}) DO UPDATE SET {value} = EXCLUDED.{value}",
    casts=(("terms", "to_tsvector('simple', %s)"),),
)


def _vec(v: np.ndarray) -> str:
    return "[" + ",".join(repr(float(x)) for x in v) + "]"


class PostgresBackend(SqlBackend):
    """A stash in a PostgreSQL database (``postgresql://user:password@host:port/db``). ``create``:
    make the stash's tables when the database has none (False: open an existing store only).

    Raises:
        MissingExtraError: psycopg is not installed (the ``postgres`` extra).
        StashNotFoundError: ``create`` is False and the database holds no stash tables (nothing created).
        StashError: the server cannot be reached, refuses the login, lacks pgvector, or holds a stash
            of another format.
    """

    kind = "postgres"
    read_only = False  # a role without write rights is an error at its first write
    dialect = DIALECT

    def __init__(self, uri: str, config: PostgresConfig | None = None, *, create: bool = True) -> None:
        try:
            import psycopg
        except ImportError as e:
            raise MissingExtraError("a PostgreSQL stash needs psycopg: pip install 'contextsieve[postgres]'") from e
        self._conflict = psycopg.errors.UniqueViolation
        self._failure = psycopg.Error
        self.config = config or PostgresConfig()
        self.location = _URI_PASSWORD.sub(r"\1***@", uri)
        self.lock = threading.RLock()
        self._closed = False
        self._uri = uri
        self._create = create
        self._db = self._connect()
        try:
            self._setup()
        except BaseException:
            self._db.close()
            raise

    def _connect(self) -> Any:
        import psycopg

        try:
            return psycopg.connect(
                self._uri, autocommit=True, connect_timeout=int(math.ceil(self.config.connect_timeout))
            )
        except psycopg.Error as e:
            raise StashError(f"cannot connect to the stash {self.location}: {e}") from e

    def _connection_lost(self) -> bool:
        return bool(self._db.closed or self._db.broken)

    def _reconnect_if_lost(self) -> None:
        """A connection that broke (the server restarted or dropped it) is replaced by a new one."""
        with self.lock:
            if self._connection_lost() and not self._closed:
                try:
                    self._db.close()
                except Exception:  # noqa: BLE001 - it is broken already
                    pass
                self._db = self._connect()

    @contextmanager
    def _tx(self) -> Iterator[Any]:
        with self.lock, self._db.transaction():
            yield self._db

    @guarded
    def _setup(self) -> None:
        with self._tx() as db:
            db.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
            if not self._create and db.execute("SELECT to_regclass('stash_meta')").fetchone()[0] is None:
                raise StashNotFoundError(
                    f"no stash store at {self.location} (the database has no stash tables); nothing was created "
                    "(a store is made by its first writer: serve, stash import or stash migrate)"
                )
            for statement in _SCHEMA:
                db.execute(statement)
            self._write_format(db, FORMAT)
            found = self._upgrade(db, self._format(db)[0])
            if found == FORMAT:  # (after an upgrade from format 3, which had no such column)
                db.execute(
                    "CREATE INDEX IF NOT EXISTS stash_segments_superseded ON stash_segments (superseded_by) "
                    "WHERE superseded_by IS NOT NULL"
                )
            counted = db.execute("SELECT 1 FROM stash_terms WHERE term = %s", (_DOCS,)).fetchone()
            if found == FORMAT and counted is None:
                # a store written before the store-wide counts existed (whose term counts also missed
                # terms shared by segments of one batch): count everything again, once
                db.execute("DELETE FROM stash_terms")
                db.execute(
                    "INSERT INTO stash_terms SELECT lexeme, count(*) FROM stash_segments, unnest(terms) GROUP BY lexeme"
                )
                db.execute(
                    "INSERT INTO stash_terms SELECT %s, count(*) FROM stash_segments UNION ALL "
                    "SELECT %s, coalesce(sum(nterms), 0) FROM stash_segments",
                    (_DOCS, _TERMS),
                )
        if found != FORMAT:
            raise StashError(f"{self.location} holds a stash of format {found!r}; this version reads {FORMAT!r}")

    def _integer_times(self, db: Any) -> None:
        """See :meth:`SqlBackend._integer_times` (indexes on the columns are rebuilt by PostgreSQL)."""
        us = "{0} TYPE bigint USING round({0} * 1000000)::bigint"
        db.execute(
            "ALTER TABLE stash_segments ALTER COLUMN "
            + ", ALTER COLUMN ".join(us.format(c) for c in ("created", "stashed", "expires"))
            + ", ADD COLUMN IF NOT EXISTS fields bytea, ADD COLUMN IF NOT EXISTS superseded_by text"
        )

    def _fields_required(self, db: Any) -> None:
        db.execute("ALTER TABLE stash_segments ALTER COLUMN fields SET NOT NULL")

    def close(self) -> None:
        with self.lock:
            self._closed = True
            self._db.close()

    @contextmanager
    def reading(self) -> Iterator[None]:
        """See :meth:`StashBackend.reading`: each read here is one statement, the scope adds nothing."""
        yield

    @guarded
    def put_setting(self, key: str, value: str, *, replace: bool = True) -> str:
        with self._tx() as db:
            return self._put_setting(db, key, value, replace)

    @guarded
    def set_meta(self, model: str | None, dim: int | None, rebuild_to: str | None) -> None:
        with self._tx() as db:
            self._write_meta(db, model, dim, rebuild_to)
            if dim is not None:
                c = self.config
                db.execute(
                    "CREATE TABLE IF NOT EXISTS stash_chunks (seg bigint NOT NULL REFERENCES stash_segments (row) "
                    f"ON DELETE CASCADE, n integer NOT NULL, embedding vector({int(dim)}) NOT NULL, "
                    "PRIMARY KEY (seg, n))"
                )
                db.execute(
                    "CREATE INDEX IF NOT EXISTS stash_chunks_hnsw ON stash_chunks USING hnsw (embedding "
                    f"vector_ip_ops) WITH (m = {c.hnsw_m}, ef_construction = {c.ef_construction})"
                )

    # -- reads (the shared ones are in SqlBackend) ----------------------------------------------

    def _search_stats(self) -> tuple[str, int]:
        return "hnsw (pgvector)", 0

    @reads
    def ranking_facts(self, ids: Sequence[str]) -> dict[str, tuple[int, int, str]]:
        with self.lock:
            q = "SELECT id, created, stashed, sha256 FROM stash_segments WHERE id = ANY(%s)"
            rows = self._db.execute(q, (list(ids),)).fetchall()
        return {i: (int(c), int(st), sha) for i, c, st, sha in rows}

    @reads
    def chunk_vectors(self, ids: Sequence[str]) -> dict[str, np.ndarray]:
        """See :meth:`StashBackend.chunk_vectors` (pgvector's text form, in chunk order)."""
        parts: dict[str, list[np.ndarray]] = {}
        if not self._has_chunks():
            return {}
        with self.lock:
            q = (
                "SELECT s.id, c.embedding::text FROM stash_chunks c JOIN stash_segments s ON c.seg = s.row "
                "WHERE s.id = ANY(%s) ORDER BY s.id, c.n"
            )
            for sid, text in self._db.execute(q, (list(ids),)).fetchall():
                parts.setdefault(sid, []).append(np.array(json.loads(text), dtype=np.float32))
        return {i: np.stack(v) for i, v in parts.items()}

    @reads
    def stale(self, model: str, limit: int) -> list[ContextSegment]:
        with self.lock:
            return self._stale(model, limit)

    def _has_chunks(self) -> bool:
        return self.meta().dim is not None

    @reads
    def dense(self, queries: np.ndarray, k: int, filters: Filters) -> list[Hit]:
        if k <= 0 or queries.shape[0] == 0 or not self._has_chunks():
            return []
        where, args = self._where(filters, "s.")
        best: dict[str, float] = {}
        with self._tx() as db:
            db.execute(f"SET LOCAL hnsw.ef_search = {max(self.config.ef_search, 2 * k)}")
            db.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
            for q in queries:
                v = _vec(q)
                rows = db.execute(
                    "SELECT s.id, -(c.embedding <#> %s::vector) FROM stash_chunks c JOIN stash_segments s "
                    f"ON s.row = c.seg WHERE {where} ORDER BY c.embedding <#> %s::vector LIMIT %s",
                    [v, *args, v, 3 * k],
                ).fetchall()
                for sid, score in rows:
                    if float(score) > best.get(sid, -math.inf):
                        best[sid] = float(score)
        ranked = sorted(best.items(), key=lambda kv: (-kv[1], kv[0]))[:k]
        return [Hit(i, s) for i, s in ranked]

    @reads
    def similarities(self, queries: np.ndarray, ids: Sequence[str]) -> dict[str, float]:
        if not ids or not self._has_chunks():
            return {}
        out: dict[str, float] = {}
        with self.lock:
            for q in queries:
                rows = self._db.execute(
                    "SELECT s.id, max(-(c.embedding <#> %s::vector)) FROM stash_chunks c JOIN stash_segments s "
                    "ON s.row = c.seg WHERE s.id = ANY(%s) GROUP BY s.id",
                    (_vec(q), list(ids)),
                ).fetchall()
                for sid, score in rows:
                    out[sid] = max(out.get(sid, -math.inf), float(score))
        return out

    @reads
    def keyword(
        self, terms: Sequence[str], k: int, filters: Filters, also: Sequence[str] = (), b: float = OKAPI_B
    ) -> list[Hit]:
        uniq = list(dict.fromkeys(terms))
        if not uniq or k <= 0:
            return []
        where, args = self._where(filters, "s.")  # BM25 in SQL over the GIN index's matches (see _BM25)
        with self.lock:
            found = self._db.execute(
                _BM25.format(where=where), [uniq, b, b, " | ".join(uniq), *args, k, list(dict.fromkeys(also))]
            ).fetchall()
        hits = [Hit(i, float(x)) for i, x, extra in found if not extra and x > 0]
        taken = {h.id for h in hits}
        scores = {i: float(x) for i, x, extra in found if extra and x > 0 and i not in taken}
        return hits + [Hit(i, scores[i]) for i in dict.fromkeys(also) if i in scores]

    # -- writes -----------------------------------------------------------------------------------

    def _count_terms(self, db: Any, terms: Counter[str], sign: int) -> None:
        """Add ``sign`` times each count to ``stash_terms`` (a term's count: the segments holding it)."""
        for term in sorted(terms):  # one order in every transaction: no deadlocks between writers
            n = sign * terms[term]
            db.execute(
                "INSERT INTO stash_terms VALUES (%s, %s) ON CONFLICT (term) DO UPDATE SET df = stash_terms.df + %s",
                (term, n, n),
            )

    def _stored_terms(self, terms: list[str]) -> dict[str, Any]:
        return {"terms": " ".join(terms), "nterms": len(terms)}  # terms: a tsvector (see DIALECT.casts)

    def _stored_chunks(self, db: Any, row: int) -> np.ndarray:
        found = db.execute("SELECT embedding::text FROM stash_chunks WHERE seg = %s ORDER BY n", (row,)).fetchall()
        return np.array([json.loads(r[0]) for r in found], dtype=np.float32)

    def _write_chunks(self, db: Any, row: int, v: np.ndarray, replace: bool) -> None:
        if replace:
            db.execute("DELETE FROM stash_chunks WHERE seg = %s", (row,))
        with db.cursor() as cur:
            cur.executemany(
                "INSERT INTO stash_chunks (seg, n, embedding) VALUES (%s, %s, %s::vector)",
                [(row, n, _vec(x)) for n, x in enumerate(v)],
            )

    @guarded
    def insert(
        self, rows: Sequence[SegmentRow], dedup: bool, supersede: Sequence[tuple[str, str]] = ()
    ) -> dict[int, str]:
        df: Counter[str] = Counter()
        with self._tx() as db:
            for name in sorted({r.segment.session for r in rows}):  # writers of one session take turns on dedup
                db.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (name,))
            skipped, added, _ = self._insert_rows(db, rows, dedup, supersede)
            for _, r in added:
                df.update(set(r.terms))
            df[_DOCS] += len(added)
            df[_TERMS] += sum(len(r.terms) for _, r in added)
            self._count_terms(db, df, 1)
        return skipped

    @guarded
    def delete(self, ids: Sequence[str]) -> int:
        with self._tx() as db:
            gone, _ = self._delete_rows(db, ids, "text, nterms")  # their chunks go by ON DELETE CASCADE
            df: Counter[str] = Counter()
            for text, _ in gone:
                df.update(set(index_terms(text)))
            df[_DOCS] += len(gone)
            df[_TERMS] += sum(int(n) for _, n in gone)
            self._count_terms(db, df, -1)
        return len(gone)

    @guarded
    def set_protected(self, ids: Sequence[str], protected: bool) -> int:
        with self._tx() as db:
            return len(self._set_protected(db, ids, protected))

    @guarded
    def rename_session(self, old: str, new: str) -> int:
        with self._tx() as db:
            for name in sorted({old, new}):  # as insert takes them: a stash into either waits, or is moved
                db.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (name,))
            return len(self._rename_session(db, old, new))

    @guarded
    def replace_vectors(self, rows: Sequence[SegmentRow]) -> None:
        with self._tx() as db:
            self._replace_vectors(db, rows)
