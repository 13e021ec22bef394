"""The embedded stash backend: one SQLite file in WAL mode holding segments, their vectors, their
references and a full-text index; dense search in memory with the project's int8 kernels (HNSW
when large).

Several processes may read and write one file at once: writes are ``BEGIN IMMEDIATE`` transactions
(waiting up to ``busy_timeout`` seconds for another writer), every write appends to a change log,
and each process brings its in-memory table up to date from that log before it searches (SQLite's
``data_version`` says when another connection has committed). A killed writer leaves either its
whole transaction or none of it.
"""

from __future__ import annotations

import os
import sqlite3
import stat
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from contextsieve.errors import InputError, StashError
from contextsieve.stash.backend import (
    FORMAT,
    Filters,
    Hit,
    SegmentRow,
    StoreMeta,
    from_epoch,
    to_epoch,
    vector_digest,
)
from contextsieve.stash.graphfile import GraphFileWarning, graph_folder, load_graph, save_graph
from contextsieve.stash.segment import ContextSegment, SegmentType
from contextsieve.stash.vectors import TableRow, VectorConfig, VectorTable

__all__ = ["SqliteConfig", "SqliteBackend", "StashIntegrityWarning"]

_T = TypeVar("_T")
_BATCH = 500  # ids per IN (...) list
_HEADER = b"SQLite format 3\x00"
#: Change-log entries kept after a compaction (a reader further behind reloads everything).
_LOG_KEEP = 20_000
_LOAD_BATCH = 5_000  # segments quantised together while a store's table is loaded
_OP_ADD, _OP_DELETE, _OP_FLAGS = 1, 2, 3

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS segments (
    row INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    session TEXT NOT NULL,
    text TEXT NOT NULL,
    type TEXT NOT NULL,
    created REAL NOT NULL,
    stashed REAL NOT NULL,
    tokens INTEGER NOT NULL,
    topic TEXT,
    source TEXT NOT NULL,
    sha256 TEXT NOT NULL,
    model TEXT NOT NULL,
    expires REAL,
    protected INTEGER NOT NULL,
    chunks INTEGER NOT NULL,
    vectors BLOB NOT NULL,
    digest BLOB NOT NULL,
    terms TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS segments_session_hash ON segments (session, sha256);
CREATE INDEX IF NOT EXISTS segments_created ON segments (created);
CREATE INDEX IF NOT EXISTS segments_expires ON segments (expires) WHERE expires IS NOT NULL;
CREATE TABLE IF NOT EXISTS refs (
    src TEXT NOT NULL, dst TEXT NOT NULL, pos INTEGER NOT NULL, PRIMARY KEY (src, dst)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS refs_dst ON refs (dst);
CREATE TABLE IF NOT EXISTS changes (seq INTEGER PRIMARY KEY AUTOINCREMENT, row INTEGER NOT NULL, op INTEGER NOT NULL);
CREATE VIRTUAL TABLE IF NOT EXISTS fts USING fts5 (
    terms, content='segments', content_rowid='row', tokenize='unicode61 remove_diacritics 0'
);
"""

_COLUMNS = (
    "row, id, session, text, type, created, stashed, tokens, topic, source, sha256, model, expires, protected, chunks"
)


class StashIntegrityWarning(UserWarning):
    """Stored vectors failed their checksum (changed on disk); those segments are left out of dense
    search until ``contextsieve stash rebuild`` re-embeds them."""


@dataclass(frozen=True)
class SqliteConfig:
    """Settings of the embedded backend.

    Attributes:
        busy_timeout: seconds a write waits for another process's write to finish (default 30).
        synchronous: SQLite ``synchronous`` level, ``"FULL"`` (default: a commit survives power loss)
            or ``"NORMAL"`` (faster; a commit survives a process crash, maybe not power loss).
        vectors: :class:`~contextsieve.stash.vectors.VectorConfig` (exact / HNSW search).
        save_graph: keep the HNSW graph in a folder beside the store (``<store>.hnsw``; saved when
            built and when the store is closed, checked and brought up to date when opened) so an
            open does not build it again (default True; see :mod:`contextsieve.stash.graphfile`).
    """

    busy_timeout: float = 30.0
    synchronous: str = "FULL"
    vectors: VectorConfig = VectorConfig()
    save_graph: bool = True

    def __post_init__(self) -> None:
        if not (isinstance(self.busy_timeout, (int, float)) and 0 < self.busy_timeout < 86_400):
            raise InputError(f"busy_timeout must be seconds in (0, 86400), got {self.busy_timeout!r}")
        if self.synchronous not in ("FULL", "NORMAL"):
            raise InputError(f"synchronous must be 'FULL' or 'NORMAL', got {self.synchronous!r}")


def _where(f: Filters, alias: str = "") -> tuple[str, list[Any]]:
    """SQL conditions (ANDed) and parameters for ``f`` over the segments table."""
    p = alias
    conds: list[str] = []
    args: list[Any] = []

    def any_of(column: str, values: Sequence[Any]) -> None:
        if not values:
            conds.append("0")
            return
        conds.append(f"{p}{column} IN ({','.join('?' * len(values))})")
        args.extend(values)

    if f.sessions is not None:
        any_of("session", list(f.sessions))
    if f.types is not None:
        any_of("type", [t.value for t in f.types])
    if f.topics is not None:
        any_of("topic", list(f.topics))
    if f.sources is not None:
        any_of("source", list(f.sources))
    if f.since is not None:
        conds.append(f"{p}created >= ?")
        args.append(f.since)
    if f.until is not None:
        conds.append(f"{p}created <= ?")
        args.append(f.until)
    if f.protected is not None:
        conds.append(f"{p}protected = ?")
        args.append(int(f.protected))
    if f.alive_at is not None:
        conds.append(f"({p}expires IS NULL OR {p}expires > ? OR {p}protected = 1)")
        args.append(f.alive_at)
    return (" AND ".join(conds) or "1"), args


def _chunks(ids: Sequence[_T]) -> Iterator[Sequence[_T]]:
    for i in range(0, len(ids), _BATCH):
        yield ids[i : i + _BATCH]


class SqliteBackend:
    """A stash in one SQLite file (created with its folder when missing).

    Args:
        path: the database file. config: :class:`SqliteConfig`.

    Raises:
        StashError: the path is a folder, FIFO or other non-file, not a SQLite database, a database
            of something else, or cannot be opened.
    """

    kind = "sqlite"

    def __init__(self, path: str | os.PathLike[str], config: SqliteConfig | None = None) -> None:
        self.config = config or SqliteConfig()
        self.path = Path(path)
        self.location = str(self.path)
        self.lock = threading.RLock()
        self._pinned: VectorTable | None = None  # the table of the open reading() scope
        self._warned = False
        self.corrupt: set[str] = set()
        self._check_path()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(
                str(self.path), timeout=self.config.busy_timeout, isolation_level=None, check_same_thread=False
            )
        except (sqlite3.Error, OSError) as e:
            raise StashError(f"cannot open the stash {self.location}: {e}") from e
        try:
            self._setup()
        except BaseException:
            self._db.close()
            raise
        self._table: VectorTable | None = None
        self._seq = 0
        self._version = -1
        self._graph_saved = -1  # the table's graph_built count at the last save

    # -- opening ----------------------------------------------------------------------------------

    def _check_path(self) -> None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return
        except OSError as e:
            raise StashError(f"cannot open the stash {self.location}: {e}") from e
        if not stat.S_ISREG(st.st_mode):
            raise StashError(f"the stash {self.location} is not a regular file")
        if st.st_size:
            try:
                with open(self.path, "rb") as fh:
                    head = fh.read(len(_HEADER))
            except OSError as e:
                raise StashError(f"cannot read the stash {self.location}: {e}") from e
            if head != _HEADER:
                raise StashError(f"{self.location} is not a SQLite database (so not a contextsieve stash)")

    def _setup(self) -> None:
        def run() -> None:
            db = self._db
            db.execute(f"PRAGMA busy_timeout = {int(self.config.busy_timeout * 1000)}")
            mode = db.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise StashError(f"the stash {self.location} cannot use WAL mode (got {mode})")
            db.execute(f"PRAGMA synchronous = {self.config.synchronous}")
            tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if "meta" not in tables:
                if tables - {"sqlite_sequence"}:
                    raise StashError(f"{self.location} is a SQLite database of something else, not a stash")
                with self._write():
                    for statement in _SCHEMA.split(";"):
                        if statement.strip():
                            db.execute(statement)
                    db.execute("INSERT OR IGNORE INTO meta VALUES ('format', ?)", (FORMAT,))
            fmt = db.execute("SELECT value FROM meta WHERE key = 'format'").fetchone()
            if fmt is None or fmt[0] != FORMAT:
                found = fmt[0] if fmt else "none"
                raise StashError(f"{self.location} is a stash of format {found!r}; this version reads {FORMAT!r}")

        self._guard(run)

    def _guard(self, fn: Callable[[], _T]) -> _T:
        try:
            return fn()
        except sqlite3.IntegrityError as e:
            raise InputError(f"the stash {self.location} refused the write: {e}") from e
        except sqlite3.Error as e:
            raise StashError(f"stash {self.location}: {e}") from e

    @contextmanager
    def reading(self) -> Iterator[None]:
        """See :meth:`StashBackend.reading`: the in-memory table is brought up to date once and used
        until the scope ends (the lock is held throughout; a write inside ends the pin)."""
        with self.lock:
            if self._pinned is not None:  # nested: the outer scope's table
                yield
                return
            self._pinned = self._guard(self._sync)
            try:
                yield
            finally:
                self._pinned = None

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction (``BEGIN IMMEDIATE``), rolled back on any error."""
        with self.lock:
            self._pinned = None  # a reading() scope sees the write: its next read syncs again
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def close(self) -> None:
        """Close the database; a graph changed since it was saved is saved first."""
        with self.lock:
            table = self._table
            if table is not None and table.graph is not None and table.graph_changes:
                self._save_graph()
            self._db.close()

    def meta(self) -> StoreMeta:
        def run() -> StoreMeta:
            with self.lock:
                d = dict(self._db.execute("SELECT key, value FROM meta").fetchall())
            return StoreMeta(d.get("model"), int(d["dim"]) if d.get("dim") else None, d.get("rebuild_to"))

        return self._guard(run)

    def set_meta(self, model: str | None, dim: int | None, rebuild_to: str | None) -> None:
        def run() -> None:
            with self._write() as db:
                for key, value in (("model", model), ("dim", dim), ("rebuild_to", rebuild_to)):
                    if value is None:
                        db.execute("DELETE FROM meta WHERE key = ?", (key,))
                    else:
                        db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, str(value)))

        self._guard(run)

    # -- the in-memory table ----------------------------------------------------------------------

    def _vectors_of(self, r: sqlite3.Row | tuple[Any, ...], dim: int) -> np.ndarray | None:
        """A row's vectors if they match their digest; else None (and the id is marked corrupt)."""
        row_id, seg_id, model, chunks, blob, digest = r
        v = np.frombuffer(blob, dtype=np.float32) if isinstance(blob, bytes) else np.zeros(0, np.float32)
        if v.size == chunks * dim and chunks > 0:
            v = v.reshape(chunks, dim)
            if vector_digest(seg_id, model, v) == digest and bool(np.isfinite(v).all()):
                self.corrupt.discard(seg_id)
                return v
        self.corrupt.add(seg_id)
        if not self._warned:
            self._warned = True
            warnings.warn(
                f"stash {self.location}: segment {seg_id!r} has vectors that fail their checksum; such segments "
                "are left out of dense search until `contextsieve stash rebuild` re-embeds them",
                StashIntegrityWarning,
                stacklevel=5,
            )
        return None

    def _load_rows(self, table: VectorTable, rows: Sequence[int] | None) -> None:
        meta = self.meta()
        dim = meta.dim or table.dim
        sql = (
            "SELECT row, id, session, type, topic, source, created, expires, protected, model, chunks, vectors, "
            "digest, terms, stashed, sha256 FROM segments"
        )
        batches: list[Sequence[int] | None] = [None] if rows is None else list(_chunks(list(rows)))
        pending: list[TableRow] = []  # added in batches: one quantisation call per batch
        for batch in batches:
            if batch is None:
                cur = self._db.execute(sql + " ORDER BY row")
            else:
                cur = self._db.execute(sql + f" WHERE row IN ({','.join('?' * len(batch))})", list(batch))
            for r in cur:
                (
                    row,
                    sid,
                    session,
                    kind,
                    topic,
                    source,
                    created,
                    expires,
                    protected,
                    model,
                    chunks,
                    blob,
                    digest,
                    terms,
                    stashed,
                    sha,
                ) = r
                v = self._vectors_of((row, sid, model, chunks, blob, digest), dim)
                if v is None:
                    table.remove(row)
                    continue
                pending.append(
                    TableRow(
                        row,
                        sid,
                        session,
                        SegmentType(kind),
                        topic,
                        source,
                        created,
                        expires,
                        bool(protected),
                        v,
                        terms.split(),
                        stashed,
                        sha,
                        digest,
                    )
                )
                if len(pending) >= _LOAD_BATCH:
                    table.add_many(pending)
                    pending.clear()
        table.add_many(pending)

    def _sync(self) -> VectorTable:
        """The in-memory table, brought up to date with every committed write (any process)."""
        with self.lock:
            if self._pinned is not None:
                return self._pinned
            version = self._db.execute("PRAGMA data_version").fetchone()[0]
            if self._table is not None and version == self._version:
                return self._table
            dim = self.meta().dim
            floor = self._db.execute("SELECT value FROM meta WHERE key = 'log_floor'").fetchone()
            floor_seq = int(floor[0]) if floor else 0
            last = self._db.execute("SELECT max(seq) FROM changes").fetchone()[0] or 0
            if self._table is None or self._seq < floor_seq or (dim and self._table.dim != dim):
                table = VectorTable(dim or 384, self.config.vectors)
                table.defer_hnsw = True  # a saved graph is tried before one is built
                self._load_rows(table, None)
                if table.wants_hnsw() and self.config.save_graph:
                    load_graph(table, self._graph_folder)
                table.finish_loading()
                self._table = table
                self._graph_saved = 0  # a graph built while loading (graph_built 1) is saved below
            elif last > self._seq:
                ops = self._db.execute(
                    "SELECT row, op FROM changes WHERE seq > ? ORDER BY seq", (self._seq,)
                ).fetchall()
                final: dict[int, int] = {}
                for row, op in ops:
                    final[row] = op if op != _OP_FLAGS or final.get(row) != _OP_ADD else _OP_ADD
                for row, op in final.items():
                    if op == _OP_DELETE:
                        self._table.remove(row)
                changed = [row for row, op in final.items() if op == _OP_ADD]
                self._load_rows(self._table, changed)
                for row, op in final.items():
                    if op == _OP_FLAGS:
                        p = self._db.execute("SELECT protected FROM segments WHERE row = ?", (row,)).fetchone()
                        if p is not None:
                            self._table.set_protected(row, bool(p[0]))
            self._seq = last
            self._version = version
            if self._table.graph_built != self._graph_saved:  # a graph built from scratch: save it now
                self._save_graph()
            return self._table

    @property
    def _graph_folder(self) -> Path:
        return graph_folder(self.path)

    def _save_graph(self) -> None:
        """Save the table's graph beside the store (a failure is a warning: the store is intact)."""
        table = self._table
        if table is None or table.graph is None or not self.config.save_graph:
            return
        try:
            save_graph(table, self._graph_folder)
        except (OSError, RuntimeError) as e:
            warnings.warn(
                f"could not save the HNSW graph of {self.location} to {self._graph_folder}: {e}; the next open "
                "rebuilds it",
                GraphFileWarning,
                stacklevel=4,
            )
        self._graph_saved = table.graph_built

    def _log(self, db: sqlite3.Connection, rows: Sequence[int], op: int) -> None:
        db.executemany("INSERT INTO changes (row, op) VALUES (?, ?)", [(r, op) for r in rows])
        last = db.execute("SELECT max(seq) FROM changes").fetchone()[0] or 0
        if last % 5_000 == 0 and last > 2 * _LOG_KEEP:  # compact now and then
            db.execute("DELETE FROM changes WHERE seq <= ?", (last - _LOG_KEEP,))
            db.execute("INSERT OR REPLACE INTO meta VALUES ('log_floor', ?)", (str(last - _LOG_KEEP),))

    def _after_write(self) -> None:
        # our own commits do not change data_version for this connection: force a sync
        self._version = -1

    # -- reads ------------------------------------------------------------------------------------

    def sessions_of(self, ids: Sequence[str]) -> dict[str, str]:
        def run() -> dict[str, str]:
            out: dict[str, str] = {}
            with self.lock:
                for batch in _chunks(list(ids)):
                    q = f"SELECT id, session FROM segments WHERE id IN ({','.join('?' * len(batch))})"
                    out.update(self._db.execute(q, list(batch)).fetchall())
            return out

        return self._guard(run)

    def by_hash(self, session: str, hashes: Sequence[str]) -> dict[str, str]:
        def run() -> dict[str, str]:
            out: dict[str, str] = {}
            with self.lock:
                for batch in _chunks(list(hashes)):
                    q = (
                        "SELECT sha256, id FROM segments WHERE session = ? AND sha256 IN "
                        f"({','.join('?' * len(batch))}) ORDER BY row DESC"
                    )
                    out.update(self._db.execute(q, [session, *batch]).fetchall())  # oldest wins (last write)
            return out

        return self._guard(run)

    def _segments(self, where: str, args: Sequence[Any]) -> list[ContextSegment]:
        rows = self._db.execute(f"SELECT {_COLUMNS} FROM segments WHERE {where}", list(args)).fetchall()
        ids = [r[1] for r in rows]
        refs: dict[str, list[str]] = {i: [] for i in ids}
        back: dict[str, list[str]] = {i: [] for i in ids}
        for batch in _chunks(ids):
            marks = ",".join("?" * len(batch))
            for src, dst in self._db.execute(
                f"SELECT src, dst FROM refs WHERE src IN ({marks}) ORDER BY src, pos", batch
            ):
                refs[src].append(dst)
            for src, dst in self._db.execute(f"SELECT src, dst FROM refs WHERE dst IN ({marks})", batch):
                back[dst].append(src)
        out = []
        for r in rows:
            row, sid, session, text, kind, created, stashed, tokens, topic, source, sha, model, expires, prot, nch = r
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
            return self._sync().facts(ids)  # the in-memory table, up to date with every process's writes

        return self._guard(run)

    def get(self, ids: Sequence[str]) -> list[ContextSegment]:
        def run() -> list[ContextSegment]:
            found: dict[str, ContextSegment] = {}
            with self.lock:
                for batch in _chunks(list(ids)):
                    for s in self._segments(f"id IN ({','.join('?' * len(batch))})", batch):
                        found[s.id] = s
            return [found[i] for i in ids if i in found]

        return self._guard(run)

    def references(self, ids: Sequence[str]) -> dict[str, tuple[str, ...]]:
        def run() -> dict[str, tuple[str, ...]]:
            out: dict[str, list[str]] = {}
            with self.lock:
                for batch in _chunks(list(ids)):
                    q = f"SELECT src, dst FROM refs WHERE src IN ({','.join('?' * len(batch))}) ORDER BY src, pos"
                    for src, dst in self._db.execute(q, batch):
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
                where += " AND expires IS NOT NULL AND expires <= ?"
                args.append(expired_before)
            if created_before is not None:
                where += " AND created < ?"
                args.append(created_before)
            q = f"SELECT id FROM segments WHERE {where} ORDER BY created DESC, row DESC"
            if limit is not None:
                q += " LIMIT ? OFFSET ?"
                args.extend([limit, offset])
            with self.lock:
                return [r[0] for r in self._db.execute(q, args)]

        return self._guard(run)

    def dense(self, queries: np.ndarray, k: int, filters: Filters) -> list[Hit]:
        def run() -> list[Hit]:
            with self.lock:
                table = self._sync()
                return [Hit(table.ids[s], score) for s, score in table.search(queries, k, filters)]

        return self._guard(run)

    def similarities(self, queries: np.ndarray, ids: Sequence[str]) -> dict[str, float]:
        def run() -> dict[str, float]:
            with self.lock:
                table = self._sync()
                slots = {i: table.slot_of_id[i] for i in ids if i in table.slot_of_id}
                scores = table.scores(queries, list(slots.values()))
            return dict(zip(slots, scores))

        return self._guard(run)

    def keyword(self, terms: Sequence[str], k: int, filters: Filters, also: Sequence[str] = ()) -> list[Hit]:
        uniq = list(dict.fromkeys(terms))
        if not uniq or k <= 0:
            return []

        def run() -> list[Hit]:  # BM25 over the in-memory term index, as FTS5 would rank (FTS5 is kept in step)
            with self.lock:
                table = self._sync()
                slots = [table.slot_of_id[i] for i in also if i in table.slot_of_id]
                return [Hit(table.ids[s], score) for s, score in table.keyword(uniq, k, filters, slots)]

        return self._guard(run)

    def stats(self, filters: Filters) -> dict[str, object]:
        def run() -> dict[str, object]:
            where, args = _where(filters)
            with self.lock:
                n, tokens, prot, oldest, newest, chunks, sessions = self._db.execute(
                    "SELECT count(*), coalesce(sum(tokens), 0), coalesce(sum(protected), 0), min(created), "
                    f"max(created), coalesce(sum(chunks), 0), count(DISTINCT session) FROM segments WHERE {where}",
                    args,
                ).fetchone()
                by_type = dict(
                    self._db.execute(f"SELECT type, count(*) FROM segments WHERE {where} GROUP BY type", args)
                )
                table = self._sync()
            return {
                "segments": int(n),
                "tokens": int(tokens),
                "protected": int(prot),
                "sessions": int(sessions),
                "chunk_vectors": int(chunks),
                "by_type": {str(k): int(v) for k, v in sorted(by_type.items())},
                "oldest": from_epoch(oldest).isoformat() if oldest is not None else None,
                "newest": from_epoch(newest).isoformat() if newest is not None else None,
                "search": table.backend,
                "failed_checksum": len(self.corrupt),
            }

        return self._guard(run)

    def stale(self, model: str, limit: int) -> list[ContextSegment]:
        def run() -> list[ContextSegment]:
            with self.lock:
                self._sync()
                bad = sorted(self.corrupt)[:limit]
                out = self.get(bad) if bad else []
                out += self._segments("model != ? ORDER BY row LIMIT ?", [model, max(0, limit - len(out))])
            return out[:limit]

        return self._guard(run)

    # -- writes -----------------------------------------------------------------------------------

    def insert(self, rows: Sequence[SegmentRow], dedup: bool) -> dict[int, str]:
        def run() -> dict[int, str]:
            skipped: dict[int, str] = {}
            remap: dict[str, str] = {}
            new_rows: list[int] = []
            with self._write() as db:
                for pos, r in enumerate(rows):
                    s = r.segment
                    if dedup:
                        hit = db.execute(
                            "SELECT id FROM segments WHERE session = ? AND sha256 = ? ORDER BY row LIMIT 1",
                            (s.session, s.sha256),
                        ).fetchone()
                        if hit is not None:
                            skipped[pos] = remap[s.id] = hit[0]
                            continue
                    v = np.ascontiguousarray(r.vectors, dtype=np.float32)
                    terms = " ".join(r.terms)
                    cur = db.execute(
                        "INSERT INTO segments (id, session, text, type, created, stashed, tokens, topic, source, "
                        "sha256, model, expires, protected, chunks, vectors, digest, terms) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
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
                            int(s.protected),
                            v.shape[0],
                            v.tobytes(),
                            vector_digest(s.id, s.embedding_model, v),
                            terms,
                        ),
                    )
                    row = int(cur.lastrowid or 0)
                    db.execute("INSERT INTO fts (rowid, terms) VALUES (?, ?)", (row, terms))
                    new_rows.append(row)
                for pos, r in enumerate(rows):  # references once every row of the batch is in
                    s = r.segment
                    if pos in skipped:
                        continue
                    for n, dst in enumerate(dict.fromkeys(remap.get(d, d) for d in s.references)):
                        found = db.execute("SELECT session FROM segments WHERE id = ?", (dst,)).fetchone()
                        if found is None or found[0] != s.session:
                            raise InputError(f"segment {s.id!r} refers to {dst!r}, which is not in its session")
                        db.execute("INSERT OR IGNORE INTO refs VALUES (?, ?, ?)", (s.id, dst, n))
                self._log(db, new_rows, _OP_ADD)
            self._after_write()
            return skipped

        return self._guard(run)

    def delete(self, ids: Sequence[str]) -> int:
        def run() -> int:
            n = 0
            with self._write() as db:
                gone: list[int] = []
                for batch in _chunks(list(ids)):
                    marks = ",".join("?" * len(batch))
                    rows = db.execute(f"SELECT row, terms FROM segments WHERE id IN ({marks})", batch).fetchall()
                    for row, terms in rows:
                        db.execute("INSERT INTO fts (fts, rowid, terms) VALUES ('delete', ?, ?)", (row, terms))
                    db.execute(f"DELETE FROM segments WHERE id IN ({marks})", batch)
                    db.execute(f"DELETE FROM refs WHERE src IN ({marks}) OR dst IN ({marks})", [*batch, *batch])
                    gone.extend(r for r, _ in rows)
                n = len(gone)
                self._log(db, gone, _OP_DELETE)
            self._after_write()
            return n

        return self._guard(run)

    def set_protected(self, ids: Sequence[str], protected: bool) -> int:
        def run() -> int:
            rows: list[int] = []
            with self._write() as db:
                for batch in _chunks(list(ids)):
                    marks = ",".join("?" * len(batch))
                    rows += [r[0] for r in db.execute(f"SELECT row FROM segments WHERE id IN ({marks})", batch)]
                    db.execute(f"UPDATE segments SET protected = ? WHERE id IN ({marks})", [int(protected), *batch])
                self._log(db, rows, _OP_FLAGS)
            self._after_write()
            return len(rows)

        return self._guard(run)

    def replace_vectors(self, rows: Sequence[SegmentRow]) -> None:
        def run() -> None:
            changed: list[int] = []
            with self._write() as db:
                for r in rows:
                    s = r.segment
                    v = np.ascontiguousarray(r.vectors, dtype=np.float32)
                    found = db.execute("SELECT row FROM segments WHERE id = ?", (s.id,)).fetchone()
                    if found is None:
                        continue  # deleted meanwhile
                    db.execute(
                        "UPDATE segments SET model = ?, chunks = ?, vectors = ?, digest = ? WHERE row = ?",
                        (
                            s.embedding_model,
                            v.shape[0],
                            v.tobytes(),
                            vector_digest(s.id, s.embedding_model, v),
                            found[0],
                        ),
                    )
                    changed.append(int(found[0]))
                self._log(db, changed, _OP_ADD)
            self._after_write()

        self._guard(run)

    # -- checks -----------------------------------------------------------------------------------

    def integrity_check(self) -> str:
        """SQLite's ``PRAGMA integrity_check`` result (``"ok"`` when the file is sound)."""
        with self.lock:
            return str(self._guard(lambda: self._db.execute("PRAGMA integrity_check").fetchone()[0]))
