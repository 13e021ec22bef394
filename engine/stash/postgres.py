"""The shared stash backend: PostgreSQL with pgvector, for stores used by many agents and machines.

Tables (created on first use, in the connection's default schema): ``stash_meta``,
``stash_segments`` (fields, a ``tsvector`` of the index terms), ``stash_chunks`` (one ``vector(dim)``
row per chunk, HNSW index with inner-product ops), ``stash_refs``, ``stash_terms`` (document
frequencies for BM25). Every write is one transaction; filters are SQL conditions evaluated inside
the vector search (pgvector's iterative index scan keeps looking until enough rows pass).

Keyword scores are Okapi BM25 with SQLite FTS5's formula (:func:`~contextsieve.stash.backend.bm25`),
so both backends rank alike, computed in one SQL statement: the ``tsvector`` GIN index finds the
segments holding a query term, each term's count comes from the tsvector's positions, document
frequencies and the store's segment and term counts from ``stash_terms`` (kept in the transaction of
every write).

Needs the ``postgres`` extra (``psycopg``); the server needs the ``vector`` extension (``CREATE
EXTENSION vector`` is run when missing, which needs the right to create it).
"""

from __future__ import annotations

import math
import re
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from contextsieve.errors import InputError, MissingExtraError, StashError
from contextsieve.stash.backend import (
    FORMAT,
    Filters,
    Hit,
    SegmentRow,
    StoreMeta,
    from_epoch,
    index_terms,
    to_epoch,
    vector_digest,
)
from contextsieve.stash.segment import ContextSegment, SegmentType

__all__ = ["PostgresConfig", "PostgresBackend"]

_T = TypeVar("_T")
_SCHEMA = [
    "CREATE EXTENSION IF NOT EXISTS vector",
    "CREATE TABLE IF NOT EXISTS stash_meta (key text PRIMARY KEY, value text NOT NULL)",
    """CREATE TABLE IF NOT EXISTS stash_segments (
        row bigserial PRIMARY KEY, id text NOT NULL UNIQUE, session text NOT NULL, text text NOT NULL,
        type text NOT NULL, created double precision NOT NULL, stashed double precision NOT NULL,
        tokens integer NOT NULL, topic text, source text NOT NULL, sha256 text NOT NULL, model text NOT NULL,
        expires double precision, protected boolean NOT NULL, chunks integer NOT NULL, digest bytea NOT NULL,
        terms tsvector NOT NULL, nterms integer NOT NULL)""",
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
                               / (u.tf + 1.2 * (0.25 + 0.75 * s.nterms / greatest(c.total / greatest(c.n, 1), 1e-9))))
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
_COLUMNS = "id, session, text, type, created, stashed, tokens, topic, source, sha256, model, expires, protected, chunks"
_URI_PASSWORD = re.compile(r"(://[^:/@]*:)[^@]*@")


@dataclass(frozen=True)
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


def _one(cursor: Any) -> tuple[Any, ...]:
    row = cursor.fetchone()
    if row is None:  # an aggregate always returns a row
        raise StashError("the server returned no row for an aggregate")
    return tuple(row)


def _vec(v: np.ndarray) -> str:
    return "[" + ",".join(repr(float(x)) for x in v) + "]"


def _where(f: Filters, alias: str = "") -> tuple[str, list[Any]]:
    p = alias
    conds: list[str] = []
    args: list[Any] = []
    for column, values in (
        ("session", f.sessions),
        ("type", None if f.types is None else [t.value for t in f.types]),
        ("topic", f.topics),
        ("source", f.sources),
    ):
        if values is not None:
            conds.append(f"{p}{column} = ANY(%s)")
            args.append(list(values))
    if f.since is not None:
        conds.append(f"{p}created >= %s")
        args.append(f.since)
    if f.until is not None:
        conds.append(f"{p}created <= %s")
        args.append(f.until)
    if f.protected is not None:
        conds.append(f"{p}protected = %s")
        args.append(f.protected)
    if f.alive_at is not None:
        conds.append(f"({p}expires IS NULL OR {p}expires > %s OR {p}protected)")
        args.append(f.alive_at)
    return (" AND ".join(conds) or "TRUE"), args


class PostgresBackend:
    """A stash in a PostgreSQL database (``postgresql://user:password@host:port/db``).

    Raises:
        MissingExtraError: psycopg is not installed (the ``postgres`` extra).
        StashError: the server cannot be reached, refuses the login, lacks pgvector, or holds a stash
            of another format.
    """

    kind = "postgres"

    def __init__(self, uri: str, config: PostgresConfig | None = None) -> None:
        try:
            import psycopg
        except ImportError as e:
            raise MissingExtraError("a PostgreSQL stash needs psycopg: pip install 'contextsieve[postgres]'") from e
        self._psycopg = psycopg
        self.config = config or PostgresConfig()
        self.location = _URI_PASSWORD.sub(r"\1***@", uri)
        self.lock = threading.RLock()
        try:
            self._db = psycopg.connect(
                uri, autocommit=True, connect_timeout=int(math.ceil(self.config.connect_timeout))
            )
        except psycopg.Error as e:
            raise StashError(f"cannot connect to the stash {self.location}: {e}") from e
        try:
            self._guard(self._setup)
        except BaseException:
            self._db.close()
            raise

    def _guard(self, fn: Callable[[], _T]) -> _T:
        psycopg = self._psycopg
        try:
            return fn()
        except psycopg.errors.UniqueViolation as e:
            raise InputError(f"the stash {self.location} refused the write: {e}") from e
        except psycopg.Error as e:
            raise StashError(f"stash {self.location}: {e}") from e

    @contextmanager
    def _tx(self) -> Iterator[Any]:
        with self.lock, self._db.transaction():
            yield self._db

    def _setup(self) -> None:
        with self._tx() as db:
            db.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
            for statement in _SCHEMA:
                db.execute(statement)
            db.execute("INSERT INTO stash_meta VALUES ('format', %s) ON CONFLICT DO NOTHING", (FORMAT,))
            found = db.execute("SELECT value FROM stash_meta WHERE key = 'format'").fetchone()[0]
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

    def close(self) -> None:
        with self.lock:
            self._db.close()

    # -- meta -------------------------------------------------------------------------------------

    def meta(self) -> StoreMeta:
        def run() -> StoreMeta:
            with self.lock:
                d: dict[str, str] = dict(self._db.execute("SELECT key, value FROM stash_meta").fetchall())
            return StoreMeta(d.get("model"), int(d["dim"]) if d.get("dim") else None, d.get("rebuild_to"))

        return self._guard(run)

    def set_meta(self, model: str | None, dim: int | None, rebuild_to: str | None) -> None:
        def run() -> None:
            with self._tx() as db:
                for key, value in (("model", model), ("dim", dim), ("rebuild_to", rebuild_to)):
                    if value is None:
                        db.execute("DELETE FROM stash_meta WHERE key = %s", (key,))
                    else:
                        db.execute(
                            "INSERT INTO stash_meta VALUES (%s, %s) "
                            "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                            (key, str(value)),
                        )
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

        self._guard(run)

    # -- reads ------------------------------------------------------------------------------------

    def sessions_of(self, ids: Sequence[str]) -> dict[str, str]:
        def run() -> dict[str, str]:
            with self.lock:
                rows = self._db.execute("SELECT id, session FROM stash_segments WHERE id = ANY(%s)", (list(ids),))
                return dict(rows.fetchall())

        return self._guard(run)

    def by_hash(self, session: str, hashes: Sequence[str]) -> dict[str, str]:
        def run() -> dict[str, str]:
            with self.lock:
                rows = self._db.execute(
                    "SELECT sha256, id FROM stash_segments WHERE session = %s AND sha256 = ANY(%s) ORDER BY row DESC",
                    (session, list(hashes)),
                ).fetchall()
            return dict(rows)  # the oldest row is written last, so it wins

        return self._guard(run)

    def _segments(self, where: str, args: Sequence[Any]) -> list[ContextSegment]:
        rows = self._db.execute(f"SELECT {_COLUMNS} FROM stash_segments WHERE {where}", list(args)).fetchall()
        ids = [r[0] for r in rows]
        refs: dict[str, list[str]] = {i: [] for i in ids}
        back: dict[str, list[str]] = {i: [] for i in ids}
        for src, dst in self._db.execute(
            "SELECT src, dst FROM stash_refs WHERE src = ANY(%s) ORDER BY src, pos", (ids,)
        ):
            refs[src].append(dst)
        for src, dst in self._db.execute("SELECT src, dst FROM stash_refs WHERE dst = ANY(%s)", (ids,)):
            back[dst].append(src)
        out = []
        for r in rows:
            sid, session, text, kind, created, stashed, tokens, topic, source, sha, model, expires, prot, nch = r
            out.append(
                ContextSegment(
                    id=sid,
                    session=session,
                    text=text,
                    type=SegmentType(kind),
                    timestamp=from_epoch(created),
                    stashed_at=from_epoch(stashed),
                    tokens=int(tokens),
                    topic=topic,
                    source=source,
                    references=tuple(refs[sid]),
                    referenced_by=tuple(sorted(back[sid])),
                    embedding_model=model,
                    chunks=int(nch),
                    expires_at=None if expires is None else from_epoch(expires),
                    protected=bool(prot),
                    sha256=sha,
                )
            )
        return out

    def ranking_facts(self, ids: Sequence[str]) -> dict[str, tuple[float, float, str]]:
        def run() -> dict[str, tuple[float, float, str]]:
            with self.lock:
                q = "SELECT id, created, stashed, sha256 FROM stash_segments WHERE id = ANY(%s)"
                rows = self._db.execute(q, (list(ids),)).fetchall()
            return {i: (float(c), float(st), sha) for i, c, st, sha in rows}

        return self._guard(run)

    @contextmanager
    def reading(self) -> Iterator[None]:
        """See :meth:`StashBackend.reading`: each read here is one statement, the scope adds nothing."""
        yield

    def get(self, ids: Sequence[str]) -> list[ContextSegment]:
        def run() -> list[ContextSegment]:
            with self.lock:
                found = {s.id: s for s in self._segments("id = ANY(%s)", [list(ids)])}
            return [found[i] for i in ids if i in found]

        return self._guard(run)

    def references(self, ids: Sequence[str]) -> dict[str, tuple[str, ...]]:
        def run() -> dict[str, tuple[str, ...]]:
            out: dict[str, list[str]] = {}
            with self.lock:
                q = "SELECT src, dst FROM stash_refs WHERE src = ANY(%s) ORDER BY src, pos"
                for src, dst in self._db.execute(q, (list(ids),)):
                    out.setdefault(src, []).append(dst)
            return {k: tuple(v) for k, v in out.items()}

        return self._guard(run)

    def select_ids(
        self,
        filters: Filters,
        *,
        expired_before: float | None = None,
        created_before: float | None = None,
        limit: int | None = None,
        offset: int = 0,
    ) -> list[str]:
        def run() -> list[str]:
            where, args = _where(filters)
            if expired_before is not None:
                where += " AND expires IS NOT NULL AND expires <= %s"
                args.append(expired_before)
            if created_before is not None:
                where += " AND created < %s"
                args.append(created_before)
            q = f"SELECT id FROM stash_segments WHERE {where} ORDER BY created DESC, row DESC"
            if limit is not None:
                q += " LIMIT %s OFFSET %s"
                args.extend([limit, offset])
            with self.lock:
                return [r[0] for r in self._db.execute(q, args)]

        return self._guard(run)

    def _has_chunks(self) -> bool:
        return self.meta().dim is not None

    def dense(self, queries: np.ndarray, k: int, filters: Filters) -> list[Hit]:
        if k <= 0 or queries.shape[0] == 0:
            return []

        def run() -> list[Hit]:
            if not self._has_chunks():
                return []
            where, args = _where(filters, "s.")
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

        return self._guard(run)

    def similarities(self, queries: np.ndarray, ids: Sequence[str]) -> dict[str, float]:
        def run() -> dict[str, float]:
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

        return self._guard(run)

    def keyword(self, terms: Sequence[str], k: int, filters: Filters, also: Sequence[str] = ()) -> list[Hit]:
        uniq = list(dict.fromkeys(terms))
        if not uniq or k <= 0:
            return []

        def run() -> list[Hit]:  # BM25 in SQL over the GIN index's matches (see _BM25)
            where, args = _where(filters, "s.")
            with self.lock:
                found = self._db.execute(
                    _BM25.format(where=where), [uniq, " | ".join(uniq), *args, k, list(dict.fromkeys(also))]
                ).fetchall()
            hits = [Hit(i, float(x)) for i, x, extra in found if not extra and x > 0]
            taken = {h.id for h in hits}
            scores = {i: float(x) for i, x, extra in found if extra and x > 0 and i not in taken}
            return hits + [Hit(i, scores[i]) for i in dict.fromkeys(also) if i in scores]

        return self._guard(run)

    def stats(self, filters: Filters) -> dict[str, object]:
        def run() -> dict[str, object]:
            where, args = _where(filters)
            with self.lock:
                n, tokens, prot, oldest, newest, chunks, sessions = _one(
                    self._db.execute(
                        "SELECT count(*), coalesce(sum(tokens), 0), count(*) FILTER (WHERE protected), min(created), "
                        "max(created), coalesce(sum(chunks), 0), count(DISTINCT session) FROM stash_segments "
                        f"WHERE {where}",
                        args,
                    )
                )
                by_type: dict[str, int] = dict(
                    self._db.execute(f"SELECT type, count(*) FROM stash_segments WHERE {where} GROUP BY type", args)
                )
            return {
                "segments": int(n),
                "tokens": int(tokens),
                "protected": int(prot),
                "sessions": int(sessions),
                "chunk_vectors": int(chunks),
                "by_type": {str(k): int(v) for k, v in sorted(by_type.items())},
                "oldest": from_epoch(oldest).isoformat() if oldest is not None else None,
                "newest": from_epoch(newest).isoformat() if newest is not None else None,
                "search": "hnsw (pgvector)",
                "failed_checksum": 0,
            }

        return self._guard(run)

    def stale(self, model: str, limit: int) -> list[ContextSegment]:
        def run() -> list[ContextSegment]:
            with self.lock:
                return self._segments("model <> %s ORDER BY row LIMIT %s", [model, limit])

        return self._guard(run)

    # -- writes -----------------------------------------------------------------------------------

    def _count_terms(self, db: Any, terms: Counter[str], sign: int) -> None:
        """Add ``sign`` times each count to ``stash_terms`` (a term's count: the segments holding it)."""
        for term in sorted(terms):  # one order in every transaction: no deadlocks between writers
            n = sign * terms[term]
            db.execute(
                "INSERT INTO stash_terms VALUES (%s, %s) ON CONFLICT (term) DO UPDATE SET df = stash_terms.df + %s",
                (term, n, n),
            )

    def _write_chunks(self, db: Any, row: int, vectors: np.ndarray) -> None:
        with db.cursor() as cur:
            cur.executemany(
                "INSERT INTO stash_chunks (seg, n, embedding) VALUES (%s, %s, %s::vector)",
                [(row, n, _vec(v)) for n, v in enumerate(vectors)],
            )

    def insert(self, rows: Sequence[SegmentRow], dedup: bool) -> dict[int, str]:
        def run() -> dict[int, str]:
            skipped: dict[int, str] = {}
            remap: dict[str, str] = {}
            df: Counter[str] = Counter()
            with self._tx() as db:
                sessions = sorted({r.segment.session for r in rows})
                for name in sessions:  # writers of one session take turns on the dedup check
                    db.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (name,))
                for pos, r in enumerate(rows):
                    s = r.segment
                    if dedup:
                        hit = db.execute(
                            "SELECT id FROM stash_segments WHERE session = %s AND sha256 = %s ORDER BY row LIMIT 1",
                            (s.session, s.sha256),
                        ).fetchone()
                        if hit is not None:
                            skipped[pos] = remap[s.id] = hit[0]
                            continue
                    v = np.ascontiguousarray(r.vectors, dtype=np.float32)
                    row = db.execute(
                        "INSERT INTO stash_segments (id, session, text, type, created, stashed, tokens, topic, source, "
                        "sha256, model, expires, protected, chunks, digest, terms, nterms) VALUES (%s, %s, %s, %s, %s, "
                        "%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, to_tsvector('simple', %s), %s) RETURNING row",
                        (
                            s.id,
                            s.session,
                            s.text,
                            s.type.value,
                            to_epoch(s.timestamp),
                            to_epoch(s.stashed_at),
                            s.tokens,
                            s.topic,
                            s.source,
                            s.sha256,
                            s.embedding_model,
                            None if s.expires_at is None else to_epoch(s.expires_at),
                            s.protected,
                            v.shape[0],
                            vector_digest(s.id, s.embedding_model, v),
                            " ".join(r.terms),
                            len(r.terms),
                        ),
                    ).fetchone()[0]
                    self._write_chunks(db, row, v)
                    df.update(set(r.terms))
                for pos, r in enumerate(rows):
                    s = r.segment
                    if pos in skipped:
                        continue
                    for n, dst in enumerate(dict.fromkeys(remap.get(d, d) for d in s.references)):
                        found = db.execute("SELECT session FROM stash_segments WHERE id = %s", (dst,)).fetchone()
                        if found is None or found[0] != s.session:
                            raise InputError(f"segment {s.id!r} refers to {dst!r}, which is not in its session")
                        db.execute("INSERT INTO stash_refs VALUES (%s, %s, %s) ON CONFLICT DO NOTHING", (s.id, dst, n))
                added = [r for pos, r in enumerate(rows) if pos not in skipped]
                df[_DOCS] += len(added)
                df[_TERMS] += sum(len(r.terms) for r in added)
                self._count_terms(db, df, 1)
            return skipped

        return self._guard(run)

    def delete(self, ids: Sequence[str]) -> int:
        def run() -> int:
            with self._tx() as db:
                gone = db.execute(
                    "DELETE FROM stash_segments WHERE id = ANY(%s) RETURNING text, nterms", (list(ids),)
                ).fetchall()
                db.execute("DELETE FROM stash_refs WHERE src = ANY(%s) OR dst = ANY(%s)", (list(ids), list(ids)))
                df: Counter[str] = Counter()
                for text, _ in gone:
                    df.update(set(index_terms(text)))
                df[_DOCS] += len(gone)
                df[_TERMS] += sum(int(n) for _, n in gone)
                self._count_terms(db, df, -1)
            return len(gone)

        return self._guard(run)

    def set_protected(self, ids: Sequence[str], protected: bool) -> int:
        def run() -> int:
            with self._tx() as db:
                cur = db.execute("UPDATE stash_segments SET protected = %s WHERE id = ANY(%s)", (protected, list(ids)))
                return int(cur.rowcount)

        return self._guard(run)

    def replace_vectors(self, rows: Sequence[SegmentRow]) -> None:
        def run() -> None:
            with self._tx() as db:
                for r in rows:
                    s = r.segment
                    v = np.ascontiguousarray(r.vectors, dtype=np.float32)
                    found = db.execute("SELECT row FROM stash_segments WHERE id = %s FOR UPDATE", (s.id,)).fetchone()
                    if found is None:
                        continue
                    db.execute(
                        "UPDATE stash_segments SET model = %s, chunks = %s, digest = %s WHERE row = %s",
                        (s.embedding_model, v.shape[0], vector_digest(s.id, s.embedding_model, v), found[0]),
                    )
                    db.execute("DELETE FROM stash_chunks WHERE seg = %s", (found[0],))
                    self._write_chunks(db, found[0], v)

        self._guard(run)
