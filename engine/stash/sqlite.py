"""The embedded stash backend: one SQLite file in WAL mode holding segments, their vectors, their
references and their index terms; dense search in memory with the project's int8 kernels (HNSW when
large), keyword search (BM25) on the in-memory term index (:mod:`contextsieve.retrieval.bm25`). The
statements shared with the PostgreSQL backend are in :mod:`contextsieve.stash.sql` and ``sql_writes``;
the file's tables in :mod:`contextsieve.stash.sqlite_schema`, the checks of its data (vectors against
their digests, listings against the indexes they are read through) in ``sqlite_checks``.

Several processes may read and write one file at once: writes are ``BEGIN IMMEDIATE`` transactions
(waiting up to ``busy_timeout`` seconds for another writer), every write appends to a change log,
and each process brings its in-memory table up to date from that log before it searches (SQLite's
``data_version`` says when another connection has committed). A killed writer leaves either its
whole transaction or none of it.
"""

from __future__ import annotations

import errno
import os
import sqlite3
import stat
import threading
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from contextsieve.errors import (
    GraphFileWarning,
    InputError,
    StashError,
    StashNotFoundError,
)
from contextsieve.retrieval.cache import read_only, unwritable
from contextsieve.retrieval.chunks import IndexConfig
from contextsieve.retrieval.graphfile import graph_folder, load_graph, save_graph
from contextsieve.stash.backend import FORMAT, OKAPI_B, UPGRADES, Filters, Hit, SegmentRow
from contextsieve.stash.dialect import Dialect, StoredFields, checked_fields
from contextsieve.stash.segment import ContextSegment, SegmentType
from contextsieve.stash.sql import guarded
from contextsieve.stash.sqlite_read_only import SqliteReadOnly
from contextsieve.stash.sqlite_schema import create_tables, integer_times
from contextsieve.stash.vectors import TableRow, VectorTable

__all__ = [
    "SqliteConfig",
    "SqliteBackend",
]

_HEADER = b"SQLite format 3\x00"
#: Change-log entries kept after a compaction (a reader further behind reloads everything).
_LOG_KEEP = 20_000
_LOAD_BATCH = 5_000  # segments quantised together while a store's table is loaded
_OP_ADD, _OP_DELETE, _OP_FLAGS = 1, 2, 3


#: How SQLite spells what differs from PostgreSQL (see :class:`~contextsieve.stash.dialect.Dialect`).
DIALECT = Dialect(
    mark="?",
    segments="segments",
    refs="refs",
    meta="meta",
    true="1",
    false="0",
    arrays=False,
    returning=False,  # RETURNING needs SQLite 3.35; Python may be built with an older one
    lock_row="",  # BEGIN IMMEDIATE already holds the write lock
    ignore="INSERT OR IGNORE INTO {table} VALUES ({values})",
    replace="INSERT OR REPLACE INTO {table} VALUES ({values})",
)


@dataclass(frozen=True, kw_only=True)
class SqliteConfig:
    """Settings of the embedded backend.

    Attributes:
        busy_timeout: seconds a write waits for another process's write to finish (default 30).
        synchronous: SQLite ``synchronous`` level, ``"FULL"`` (default: a commit survives power loss)
            or ``"NORMAL"`` (faster; a commit survives a process crash, maybe not power loss).
        index: how the stashed chunk vectors are searched (:class:`~contextsieve.IndexConfig`, the
            agent's chunks' settings: exact, HNSW from 50,000 live chunk vectors).
        save_graph: keep the HNSW graph in a folder beside the store (``<store>.hnsw``; saved when
            built and when the store is closed, checked and brought up to date when opened) so an
            open does not build it again (default True; see :mod:`contextsieve.retrieval.graphfile`).
    """

    busy_timeout: float = 30.0
    synchronous: str = "FULL"
    index: IndexConfig = IndexConfig()
    save_graph: bool = True

    def __post_init__(self) -> None:
        if not (isinstance(self.busy_timeout, (int, float)) and 0 < self.busy_timeout < 86_400):
            raise InputError(f"busy_timeout must be seconds in (0, 86400), got {self.busy_timeout!r}")
        if self.synchronous not in ("FULL", "NORMAL"):
            raise InputError(f"synchronous must be 'FULL' or 'NORMAL', got {self.synchronous!r}")


class SqliteBackend(SqliteReadOnly):
    """A stash in one SQLite file (created with its folder when missing, unless ``create`` is False).

    Args:
        path: the database file. config: :class:`SqliteConfig`.
        create: make the file (and its folder) when missing. False: open an existing store only; the
            file is opened in a mode that cannot create it, and an empty file is not given a schema.

    Raises:
        StashNotFoundError: ``create`` is False and there is no file (or an empty one) at ``path``;
            nothing was created.
        StashError: the path is a folder, FIFO or other non-file, not a SQLite database, a database
            of something else, or cannot be opened.
    """

    kind = "sqlite"
    dialect = DIALECT
    _conflict = sqlite3.IntegrityError
    _failure = sqlite3.Error

    def __init__(
        self, path: str | os.PathLike[str], config: SqliteConfig | None = None, *, create: bool = True
    ) -> None:
        self.config = config or SqliteConfig()
        self.path = Path(path)
        self.location = str(self.path)
        self.lock = threading.RLock()
        self._pinned: VectorTable | None = None  # the table of the open reading() scope
        self._warned = False
        self.corrupt: set[str] = set()
        self._create = create
        self._indexes_checked = False  # the listing indexes matched the table (checked once, on a listing)
        self._check_path()
        self.read_only = False
        self._stamp: tuple[object, ...] = ()
        self._table: VectorTable | None = None
        self._seq = 0
        self._version = -1
        self._graph_saved = -1  # the table's graph_built count at the last save
        blocked = unwritable(self.path)  # before SQLite opens a read-only file and makes read-only -wal/-shm
        if blocked is not None:
            refused = StashError(f"cannot open the stash {self.location} to write: {blocked}")
            refused.__cause__ = PermissionError(errno.EACCES, blocked, self.location)
            if create:
                raise refused
            self._open_read_only(refused)
            return
        try:
            if create:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                target, uri = str(self.path), False
            else:  # SQLite's mode=rw fails on a missing file instead of creating it
                target, uri = self.path.absolute().as_uri() + "?mode=rw", True
            self._db = sqlite3.connect(
                target, timeout=self.config.busy_timeout, isolation_level=None, check_same_thread=False, uri=uri
            )
        except (sqlite3.Error, OSError) as e:
            if not create and not self.path.exists():  # removed since it was checked
                raise self._missing() from e
            if create:
                self._raise_if_folder_read_only(e)
            raise StashError(f"cannot open the stash {self.location}: {e}") from e
        try:
            self._setup()
        except StashError as e:
            self._db.close()
            if create:
                self._raise_if_folder_read_only(e)
            if create or not read_only(e, self.path):
                raise
            self._open_read_only(e)
        except BaseException:
            self._db.close()
            raise

    # -- opening ----------------------------------------------------------------------------------

    def _missing(self, what: str = "no such file") -> StashNotFoundError:
        return StashNotFoundError(
            f"no stash store at {self.location} ({what}); nothing was created (a store is made by its first "
            "writer: serve, stash import or stash migrate)"
        )

    def _check_path(self) -> None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            if not self._create:
                raise self._missing() from None
            return
        except NotADirectoryError:  # a folder on the way is a file
            if not self._create:
                raise self._missing("a folder on its path is a file") from None
            raise StashError(f"cannot open the stash {self.location}: a folder on its path is a file") from None
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

    @guarded
    def _setup(self) -> None:
        db = self._db
        db.execute(f"PRAGMA busy_timeout = {int(self.config.busy_timeout * 1000)}")
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "meta" not in tables:  # checked before WAL mode is set: that writes to the file
            if tables - {"sqlite_sequence"}:
                raise StashError(f"{self.location} is a SQLite database of something else, not a stash")
            if not self._create:
                raise self._missing("an empty database")
        fmt = self._format(db) if self.read_only else self._writable_setup(db, tables)
        if fmt is None or fmt[0] != FORMAT:
            found = fmt[0] if fmt else "none"
            cannot = ", and a store this user may not write cannot be upgraded" if self.read_only else ""
            raise StashError(f"{self.location} is a stash of format {found!r}; this version reads {FORMAT!r}{cannot}")

    def _writable_setup(self, db: sqlite3.Connection, tables: set[str]) -> tuple[str] | None:
        """WAL mode, the tables of a new store, an older format upgraded; the format then. (A store opened
        read-only is read as it is: :meth:`_open_read_only`.)"""
        mode = db.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise StashError(f"the stash {self.location} cannot use WAL mode (got {mode})")
        db.execute(f"PRAGMA synchronous = {self.config.synchronous}")
        if "meta" not in tables:
            with self._write():
                create_tables(db)
                self._write_format(db, FORMAT)
        fmt = self._format(db)
        if fmt is not None and fmt[0] in UPGRADES:
            with self._write():
                fmt = self._format(db)  # another process may have upgraded it meanwhile
                if fmt is not None:
                    fmt = (self._upgrade(db, fmt[0]),)
        return fmt

    def _integer_times(self, db: sqlite3.Connection) -> None:
        """See :meth:`SqlBackend._integer_times`: SQLite cannot change a column's type (a REAL column
        turns every integer written to it into a float), so the table is copied into one of the new
        schema, rows and their numbers (``row``, the AUTOINCREMENT sequence) kept."""
        integer_times(db)

    @contextmanager
    def reading(self) -> Iterator[None]:
        """See :meth:`StashBackend.reading`: the in-memory table is brought up to date once and used
        until the scope ends (the lock is held throughout; a write inside ends the pin)."""
        with self.lock:
            if self._pinned is not None:  # nested: the outer scope's table
                yield
                return
            with self._guard():
                self._reconnect_if_lost()
                self._pinned = self._sync()
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
            if table is not None and table.chunks.graph is not None and table.chunks.graph_changes:
                self._save_graph()
            self._db.close()

    @guarded
    def set_meta(self, model: str | None, dim: int | None, rebuild_to: str | None) -> None:
        with self._write() as db:
            self._write_meta(db, model, dim, rebuild_to)

    @guarded
    def put_setting(self, key: str, value: str, *, replace: bool = True) -> str:
        with self._write() as db:
            return self._put_setting(db, key, value, replace)

    # -- the in-memory table ----------------------------------------------------------------------

    @guarded
    def chunk_vectors(self, ids: Sequence[str]) -> dict[str, np.ndarray]:
        """See :meth:`StashBackend.chunk_vectors` (each checked against its digest)."""
        out: dict[str, np.ndarray] = {}
        dim = self.meta().dim
        if dim is None:
            return out
        with self.lock:
            for batch in self.dialect.batches(ids):
                cond, args = self.dialect.any_of("id", batch)
                q = f"SELECT row, id, model, chunks, vectors, digest FROM segments WHERE {cond}"
                for r in self._db.execute(q, args):
                    v = self._vectors_of(r, dim)
                    if v is not None:
                        out[r[1]] = v
        return out

    def _load_rows(self, table: VectorTable, rows: Sequence[int] | None) -> None:
        meta = self.meta()
        dim = meta.dim or table.dim
        sql = (
            "SELECT row, id, session, type, topic, source, created, expires, protected, model, chunks, vectors, "
            "digest, terms, stashed, sha256, superseded_by IS NOT NULL, tokens, fields FROM segments"
        )
        batches: list[list[int] | None] = [None] if rows is None else list(self.dialect.batches(rows))
        pending: list[TableRow] = []  # added in batches: one quantisation call per batch
        for batch in batches:
            if batch is None:
                cur = self._db.execute(sql + " ORDER BY row")
            else:
                cond, args = self.dialect.any_of("row", batch)
                cur = self._db.execute(f"{sql} WHERE {cond}", args)
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
                    superseded,
                    tokens,
                    check,
                ) = r
                fields = checked_fields(
                    StoredFields(sid, session, None, kind, created, stashed, tokens, topic, source, sha, expires, terms)
                )
                if fields is None or fields != check:  # a changed row (or a NULL where a value was): not searched
                    self._flag(sid, "has fields that fail their check")
                    table.remove(row)
                    continue
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
                        bool(superseded),
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
                table = VectorTable(dim or 384, self.config.index)
                table.chunks.defer_hnsw = True  # a saved graph is tried before one is built
                self._load_rows(table, None)
                if table.chunks.wants_hnsw() and self.config.save_graph:
                    load_graph(table.chunks, self._graph_folder)
                table.chunks.finish_loading()
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
                        p = self._db.execute(
                            "SELECT protected, superseded_by IS NOT NULL FROM segments WHERE row = ?", (row,)
                        ).fetchone()
                        if p is not None:
                            self._table.set_flags(row, bool(p[0]), bool(p[1]))
            self._seq = last
            self._version = version
            if self._table.chunks.graph_built != self._graph_saved:  # a graph built from scratch: save it now
                self._save_graph()
            return self._table

    @property
    def _graph_folder(self) -> Path:
        return graph_folder(self.path)

    def _save_graph(self) -> None:
        """Save the table's graph beside the store (a failure is a warning: the store is intact)."""
        table = self._table
        if table is None or table.chunks.graph is None or not self.config.save_graph or self.read_only:
            return  # a store this user may not write: its graph is kept in memory only
        try:
            save_graph(table.chunks, self._graph_folder)
        except (OSError, RuntimeError) as e:
            warnings.warn(
                f"could not save the HNSW graph of {self.location} to {self._graph_folder}: {e}; the next open "
                "rebuilds it",
                GraphFileWarning,
                stacklevel=4,
            )
        self._graph_saved = table.chunks.graph_built

    def _log(self, db: sqlite3.Connection, rows: Sequence[int], op: int) -> None:
        db.executemany("INSERT INTO changes (row, op) VALUES (?, ?)", [(r, op) for r in rows])
        last = db.execute("SELECT max(seq) FROM changes").fetchone()[0] or 0
        if last % 5_000 == 0 and last > 2 * _LOG_KEEP:  # compact now and then
            db.execute("DELETE FROM changes WHERE seq <= ?", (last - _LOG_KEEP,))
            db.execute(self.dialect.upsert(self.dialect.meta, "key", "value"), ("log_floor", str(last - _LOG_KEEP)))

    def _after_write(self) -> None:
        # our own commits do not change data_version for this connection: force a sync
        self._version = -1

    # -- reads (the shared ones are in SqlBackend) ----------------------------------------------

    def _search_stats(self) -> tuple[str, int]:
        table = self._sync()
        return table.backend, len(self.corrupt)

    @guarded
    def ranking_facts(self, ids: Sequence[str]) -> dict[str, tuple[int, int, str]]:
        return self._sync().facts(ids)  # the in-memory table, up to date with every process's writes

    @guarded
    def dense(self, queries: np.ndarray, k: int, filters: Filters) -> list[Hit]:
        with self.lock:
            table = self._sync()
            return [Hit(table.ids[s], score) for s, score in table.search(queries, k, filters)]

    @guarded
    def similarities(self, queries: np.ndarray, ids: Sequence[str]) -> dict[str, float]:
        with self.lock:
            table = self._sync()
            slots = {i: table.slot_of_id[i] for i in ids if i in table.slot_of_id}
            scores = table.scores(queries, list(slots.values()))
        return dict(zip(slots, scores))

    @guarded
    def keyword(
        self, terms: Sequence[str], k: int, filters: Filters, also: Sequence[str] = (), b: float = OKAPI_B
    ) -> list[Hit]:
        uniq = list(dict.fromkeys(terms))
        if not uniq or k <= 0:
            return []
        with self.lock:  # BM25 over the in-memory term index
            table = self._sync()
            slots = [table.slot_of_id[i] for i in also if i in table.slot_of_id]
            return [Hit(table.ids[s], score) for s, score in table.keyword(uniq, k, filters, slots, b)]

    @guarded
    def stale(self, model: str, limit: int) -> list[ContextSegment]:
        """Segments whose vectors failed their checksum first, then those of another model."""
        with self.lock:
            self._sync()
            bad = sorted(self.corrupt)[:limit]
            out = self.get(bad) if bad else []
            out += self._stale(model, max(0, limit - len(out)))
        return out[:limit]

    # -- writes (each one BEGIN IMMEDIATE transaction, logged for the other processes' tables) ----

    def _stored_vectors(self, v: np.ndarray) -> dict[str, Any]:
        return {"vectors": v.tobytes()}

    def _stored_terms(self, terms: list[str]) -> dict[str, Any]:
        return {"terms": " ".join(terms)}

    def _stored_chunks(self, db: sqlite3.Connection, row: int) -> np.ndarray:
        blob = db.execute("SELECT vectors FROM segments WHERE row = ?", (row,)).fetchone()
        return np.frombuffer(blob[0], np.float32) if blob and isinstance(blob[0], bytes) else np.zeros(0, np.float32)

    @guarded
    def insert(
        self, rows: Sequence[SegmentRow], dedup: bool, supersede: Sequence[tuple[str, str]] = ()
    ) -> dict[int, str]:
        with self._write() as db:
            skipped, added, superseded = self._insert_rows(db, rows, dedup, supersede)
            self._log(db, [row for row, _ in added], _OP_ADD)
            self._log(db, superseded, _OP_FLAGS)
        self._after_write()
        return skipped

    @guarded
    def delete(self, ids: Sequence[str]) -> int:
        with self._write() as db:
            deleted, freed = self._delete_rows(db, ids, "row")
            gone = [int(r[0]) for r in deleted]
            self._log(db, gone, _OP_DELETE)
            self._log(db, freed, _OP_FLAGS)
        self._after_write()
        return len(gone)

    @guarded
    def set_protected(self, ids: Sequence[str], protected: bool) -> int:
        with self._write() as db:
            rows = self._set_protected(db, ids, protected)
            self._log(db, rows, _OP_FLAGS)
        self._after_write()
        return len(rows)

    @guarded
    def rename_session(self, old: str, new: str) -> int:
        with self._write() as db:
            rows = self._rename_session(db, old, new)
            self._log(db, rows, _OP_ADD)  # read again by every process: the row's session changed
        self._after_write()
        return len(rows)

    @guarded
    def replace_vectors(self, rows: Sequence[SegmentRow]) -> None:
        with self._write() as db:
            self._log(db, self._replace_vectors(db, rows), _OP_ADD)
        self._after_write()
