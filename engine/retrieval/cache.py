"""Persistent cache of chunk vectors, keyed by model id and the sha256 of the embedded text.

One SQLite file (WAL mode, 30 s busy timeout) that any number of processes may share: readers never
block, writers wait their turn, and a write is one transaction, so a crash leaves no half entry. The
model family (:attr:`contextsieve.Embedder.info`.family: model name and weights hash; every variant of
those weights passes the fidelity bars, so vectors are shared across variants) is part of the key, so
vectors of another model are never returned.

Every row is verified when read: a 16-byte BLAKE2b digest of (model id, text hash, vector bytes)
stored after the vector, finite values and unit norm. A row that fails (a flipped byte on disk, a
row of an older format, a vector of the wrong length) is not served: the caller embeds that text again
and the fresh vector replaces the row. The first rejection per cache object raises a
:class:`CacheIntegrityWarning`; :attr:`EmbeddingCache.rejected` counts them all.

The same file keeps chunk plans (:meth:`EmbeddingCache.get_plans`): how an item was cut into chunks,
by a key over everything the cut depends on, so a restarted agent does not count tokens again.
Plans carry the same digest; a plan that fails it is cut again.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import json
import os
import sqlite3
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TypeVar

import numpy as np

from contextsieve.errors import CacheFolderWarning, CacheIntegrityWarning, EmbeddingCacheError, InputError
from contextsieve.retrieval.embedding import unit_rows

__all__ = ["EmbeddingCache", "text_key"]

DIGEST_BYTES = 16


#: The embedding cache's tables: vectors by model id and text hash, chunk plans by model id and key.
_TABLES = (
    "CREATE TABLE IF NOT EXISTS vectors (model TEXT NOT NULL, hash TEXT NOT NULL, vec BLOB NOT NULL, "
    "PRIMARY KEY (model, hash))",
    "CREATE TABLE IF NOT EXISTS plans (model TEXT NOT NULL, key TEXT NOT NULL, plan BLOB NOT NULL, "
    "PRIMARY KEY (model, key))",
)


def text_key(text: str) -> str:
    """sha256 hex of the UTF-8 text."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _digest(model_id: str, key: str, payload: bytes) -> bytes:
    h = hashlib.blake2b(digest_size=DIGEST_BYTES)
    h.update(model_id.encode("utf-8", "surrogatepass"))
    h.update(b"\0")
    h.update(key.encode("ascii"))
    h.update(b"\0")
    h.update(payload)
    return h.digest()


def connect_wal(path: Path, schema: str | tuple[str, ...], what: str) -> sqlite3.Connection:
    """A connection to one of the project's shared SQLite files (created with its folder): WAL mode,
    a 30 s busy timeout, autocommit (writers open their own transactions), usable from any thread
    under the caller's lock, ``schema`` (``CREATE TABLE IF NOT EXISTS ...`` statements) applied.
    Processes that create the file at once wait for each other (up to the busy timeout), as SQLite's
    busy handler does not for a change of journal mode or a schema write that would deadlock.

    Raises:
        EmbeddingCacheError: the file cannot be opened (or the path is no regular file: a device, a
            FIFO or a folder is never opened, so nothing is written beside it); the message names it as
            ``what`` and its path.
    """
    try:
        if path.exists() and not path.is_file():
            raise EmbeddingCacheError(f"cannot open {what} {path}: not a regular file")
        check_folder(path, what)
        check_writable(path, what)
        path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(path, timeout=BUSY_TIMEOUT, isolation_level=None, check_same_thread=False)
        deadline = time.monotonic() + BUSY_TIMEOUT
        when_free(lambda: db.execute("PRAGMA journal_mode=WAL"), deadline)
        for statement in (schema,) if isinstance(schema, str) else schema:
            when_free(functools.partial(db.execute, statement), deadline)
    except (sqlite3.Error, OSError, ValueError) as e:  # ValueError: a NUL in the path
        raise EmbeddingCacheError(f"cannot open {what} {path}: {e}") from e
    return db


def _nearest_folder(path: Path) -> Path | None:
    """The nearest of ``path``'s parents that exists (``None``: none can be seen)."""
    return next((p for p in path.parents if os.path.exists(p)), None)


def check_folder(path: Path, what: str) -> None:
    """:class:`EmbeddingCacheError` naming ``what`` when the nearest existing parent of ``path`` is no
    folder (``$CONTEXTSIEVE_DATA`` naming a regular file, say)."""
    folder = _nearest_folder(path)
    if folder is not None and not os.path.isdir(folder):
        raise EmbeddingCacheError(f"cannot open {what} {path}: {folder} is not a folder")


#: Whether ``os.access`` can check with the effective ids (a setuid or capability-dropped process).
_EFFECTIVE = os.access in os.supports_effective_ids


def check_writable(path: Path, what: str) -> None:
    """:class:`EmbeddingCacheError` (caused by a :class:`PermissionError`, so :func:`read_only` says so)
    when the file at ``path`` or its ``-wal`` or ``-shm`` file exists and this user may not write it.
    Checked before SQLite opens the file: it would open a read-only file for reading without a word and
    then create its ``-wal`` and ``-shm`` files with the file's own mode, read-only files that keep
    every later writer out once the file is made writable again."""
    blocked = unwritable(path)
    if blocked is not None:
        raise EmbeddingCacheError(f"cannot open {what} {path}: {blocked}") from PermissionError(
            errno.EACCES, blocked, str(path)
        )


def unwritable(path: Path) -> str | None:
    """Why this user may not write the SQLite file ``path`` (a link followed): the first of it and its
    ``-wal`` and ``-shm`` files that exists and may not be read or written, named, with what to do for a
    ``-shm`` (or empty ``-wal``) file left behind by a process that could only read the file (``None``:
    none)."""
    unread = _unreadable(path)
    if unread is not None:
        return unread
    for p in sqlite_files(path):
        if os.path.isfile(p) and not os.access(p, os.W_OK, effective_ids=_EFFECTIVE):
            return f"attempt to write a readonly database ({p} may not be written by this user{_leftover(p)})"
    return None


def _unreadable(path: Path) -> str | None:
    """The first of the SQLite file ``path`` and its ``-wal`` and ``-shm`` files that exists and this user
    may not read, named (``None``: none)."""
    for p in sqlite_files(path):
        if os.path.isfile(p) and not os.access(p, os.R_OK, effective_ids=_EFFECTIVE):
            return f"{p} may not be read by this user{_leftover(p)}"
    return None


def connect_read_only(path: Path, what: str) -> sqlite3.Connection:
    """A read-only connection to one of the project's shared SQLite files where :func:`connect_wal`
    cannot open it for writing (a read-only folder or file: SQLite's WAL mode needs to create the
    ``-shm`` file beside it). Nothing is created beside the file: it is opened ``mode=ro`` when its
    ``-shm`` and ``-wal`` files are both there, else as immutable when no write-ahead log is left (what
    the file holds is then all there is to read).

    Raises:
        EmbeddingCacheError: it cannot be read this way either (a ``-wal`` file holding changes without
            its ``-shm`` file, which SQLite cannot read without creating that file; a file this user may
            not read).
    """
    _, wal, shm = sqlite_files(path)
    try:
        uri = path.resolve().as_uri()
        logged = wal.exists() and wal.stat().st_size > 0
        if wal.exists() and shm.exists():
            db = sqlite3.connect(f"{uri}?mode=ro", uri=True, timeout=BUSY_TIMEOUT, check_same_thread=False)
            try:
                db.execute("SELECT count(*) FROM sqlite_master").fetchone()
                return db
            except sqlite3.Error:
                db.close()
                if logged:
                    raise
        elif logged:
            raise EmbeddingCacheError(
                f"cannot read {what} {path}: its write-ahead log {wal} holds changes not yet in the file, and "
                f"SQLite reads that log only with its index {shm}, which is missing (and is not made where the file "
                "may not be written); open it once as a user who may write it and its folder (any contextsieve "
                "command that reads it merges the log into the file), then make it read-only again"
            )
        db = sqlite3.connect(f"{uri}?mode=ro&immutable=1", uri=True, timeout=BUSY_TIMEOUT, check_same_thread=False)
        db.execute("SELECT count(*) FROM sqlite_master").fetchone()
        return db
    except (sqlite3.Error, OSError, ValueError) as e:
        raise EmbeddingCacheError(f"cannot read {what} {path}: {_reason(e, path)}") from e


def _reason(error: BaseException, path: Path) -> str:
    """SQLite's "unable to open database file" said plainly where the file, its ``-wal`` or its ``-shm``
    is one this user may not read."""
    if isinstance(error, sqlite3.Error) and "unable to open" in str(error).lower():
        return _unreadable(path) or str(error)
    return str(error)


def sqlite_files(path: Path) -> tuple[Path, Path, Path]:
    """The SQLite file at ``path`` and its ``-wal`` and ``-shm`` files, beside the file a link points to
    (where SQLite makes them)."""
    real = Path(os.path.realpath(path))
    return real, Path(f"{real}-wal"), Path(f"{real}-shm")


def _leftover(p: Path) -> str:
    """What to do with ``p`` when it is a ``-shm`` (or an empty ``-wal``) file: it holds no data."""
    if p.name.endswith("-shm") or (p.name.endswith("-wal") and os.path.getsize(p) == 0):
        return "; it holds no data: delete it when no process has the database open"
    return ""


#: Seconds a connection of :func:`connect_wal` waits for another process's lock.
BUSY_TIMEOUT = 30.0
_T = TypeVar("_T")


def read_only(error: BaseException, path: Path) -> bool:
    """Whether ``error`` (or its cause), opening the file at ``path``, says that a file or folder may not
    be written by this user or on this file system (a permission, a read-only mount or database), not
    that anything is wrong with it."""
    cause = error
    while cause.__cause__ is not None:  # the first error, under the library's own
        cause = cause.__cause__
    if isinstance(cause, OSError):
        return isinstance(cause, PermissionError) or cause.errno == errno.EROFS
    if not isinstance(cause, sqlite3.Error):
        return False
    text = str(cause).lower()
    if "readonly" in text:
        return True
    folder = _nearest_folder(path)  # where SQLite could not create the file
    return "unable to open" in text and folder is not None and not os.access(folder, os.W_OK, effective_ids=True)


def damaged(error: Exception) -> bool:
    """Whether an SQLite error says the file itself is no database or is damaged (not a lock, a
    read-only folder or a full disk): only then is moving or deleting the file the advice."""
    text = str(error).lower()
    return any(w in text for w in ("not a database", "malformed", "corrupt"))


def when_free(step: Callable[[], _T], deadline: float) -> _T:
    """``step()``, run again while SQLite reports the database locked or busy, until ``deadline``
    (:func:`time.monotonic`): a journal-mode change or a write that could deadlock fails at once
    instead of waiting in the busy handler."""
    pause = 0.005
    while True:
        try:
            return step()
        except sqlite3.OperationalError as e:
            text = str(e)
            if ("locked" not in text and "busy" not in text) or time.monotonic() >= deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.1)


class EmbeddingCache:
    """Vectors by (model id, text hash) in a SQLite file.

    Args:
        path: the database file (created with its folder).
        model_id: the embedder's identity; entries of other ids are ignored (see :meth:`prune`).

    Attributes:
        rejected: rows that failed verification since this object was opened (not served).
    """

    def __init__(self, path: str | Path, model_id: str) -> None:
        self.path = Path(path)
        self.model_id = model_id
        self.rejected = 0
        #: Whether writes are skipped: the file or its folder may not be written (said once, with a
        #: :class:`~contextsieve.errors.CacheFolderWarning`); what it holds is still read.
        self.read_only = False
        self._lock = threading.Lock()  # one connection, used by one thread at a time
        try:
            self._db = connect_wal(self.path, _TABLES, "the embedding cache")
        except EmbeddingCacheError as e:
            if not read_only(e, self.path) or not os.path.isfile(self.path):
                raise
            try:  # a filled cache on a read-only image: read what it holds
                self._db = connect_read_only(self.path, "the embedding cache")
            except EmbeddingCacheError as unread:  # why reading fails too; still a cache that may not be written
                raise EmbeddingCacheError(str(unread)) from e
            tables = {r[0] for r in self._db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if not {"vectors", "plans"} <= tables:  # an empty file, say: a cache that may not be written
                self._db.close()
                raise
            self._skip_writes(e)

    def _skip_writes(self, error: EmbeddingCacheError) -> None:
        """Skip every write from now on, said once: the file or its folder may not be written."""
        self.read_only = True
        warnings.warn(
            f"{error}: what it holds is still read, and new vectors are kept in memory for this process; set "
            "$CONTEXTSIEVE_CACHE (or Engine(cache_dir=...)) to a folder this user may write",
            CacheFolderWarning,
            stacklevel=4,
        )

    @contextlib.contextmanager
    def _guard(self) -> Iterator[None]:
        """This connection, one thread at a time; SQLite errors become :class:`EmbeddingCacheError`."""
        with self._lock:
            try:
                yield
            except sqlite3.Error as e:
                advice = (
                    "delete it to start afresh (its vectors are embedded again)"
                    if damaged(e)
                    else "another process may hold it, or its folder may not be writable"
                )
                raise EmbeddingCacheError(f"the embedding cache {self.path} cannot be used ({e}); {advice}") from e

    def _insert(self, table: str, rows: list[tuple[str, str, bytes]]) -> None:
        """Insert or replace ``rows`` of ``table`` in one transaction; skipped once the cache was found
        read-only. A write that fails because the file or its folder may not be written (a read-only
        image whose ``-shm`` file let it open) makes the cache read-only from then on, with one
        warning, instead of an error."""
        if self.read_only:
            return
        try:
            with self._guard(), self._db:
                self._db.execute("BEGIN IMMEDIATE")
                self._db.executemany(f"INSERT OR REPLACE INTO {table} VALUES (?, ?, ?)", rows)
        except EmbeddingCacheError as e:
            if not read_only(e, self.path):
                raise
            self._skip_writes(e)

    def get(self, texts: Sequence[str], dim: int | None = None) -> dict[int, np.ndarray]:
        """Verified cached vectors of ``texts`` by their position in ``texts``.

        Args:
            texts: chunk texts.
            dim: the expected vector length; rows of another length are rejected. ``None``: any.

        Rows that fail verification are left out (so the caller embeds them again) and counted in
        :attr:`rejected`; the first one warns (:class:`CacheIntegrityWarning`).
        """
        keys = [text_key(t) for t in texts]
        found: dict[str, np.ndarray] = {}
        bad = 0
        for h, blob in self._rows("SELECT hash, vec FROM vectors WHERE model = ? AND hash IN ", keys):
            vec = self._verified(h, blob, dim)
            if vec is None:
                bad += 1
            else:
                found[h] = vec
        if bad:
            self._reject(bad)
        return {i: found[k] for i, k in enumerate(keys) if k in found}

    def _rows(self, select: str, keys: Sequence[str]) -> Iterator[tuple[str, object]]:
        """``(key, blob)`` rows of ``select`` (ending in ``IN ``) for this model id and ``keys``, 500 keys
        per statement (SQLite's limit on parameters)."""
        for start in range(0, len(keys), 500):
            part = list(keys[start : start + 500])
            with self._guard():
                rows = self._db.execute(f"{select}({','.join('?' * len(part))})", [self.model_id, *part]).fetchall()
            yield from rows

    def _verified(self, key: object, blob: object, dim: int | None) -> np.ndarray | None:
        if not isinstance(key, str) or not isinstance(blob, bytes):  # a damaged record can change a column's type
            return None
        if len(blob) <= DIGEST_BYTES or (len(blob) - DIGEST_BYTES) % 4:
            return None
        payload, digest = blob[:-DIGEST_BYTES], blob[-DIGEST_BYTES:]
        if _digest(self.model_id, key, payload) != digest:
            return None
        vec = np.frombuffer(payload, dtype=np.float32)
        if (dim is not None and vec.shape[0] != dim) or not unit_rows(vec[None, :])[0]:
            return None
        return vec

    def _reject(self, n: int) -> None:
        first = self.rejected == 0
        self.rejected += n
        if first:
            warnings.warn(
                CacheIntegrityWarning(
                    f"{n} row(s) of the embedding cache {self.path} failed verification (checksum, finite values "
                    "or unit norm) and are embedded again; further rejections are counted in EmbeddingCache.rejected"
                ),
                stacklevel=3,
            )

    def put(self, texts: Sequence[str], vectors: np.ndarray) -> None:
        """Store vectors (one transaction), each with its digest.

        Raises:
            InputError: a vector is not finite or not of unit norm (nothing is written).
        """
        arr = np.ascontiguousarray(vectors, dtype=np.float32)
        if arr.ndim != 2 or arr.shape[0] != len(texts):
            raise InputError(f"put needs one vector per text: {len(texts)} texts, vectors of shape {arr.shape}")
        ok = unit_rows(arr)
        if not ok.all():
            raise InputError(
                f"refusing to cache {int((~ok).sum())} vector(s) that are not finite unit vectors "
                f"(first at position {int(np.argmin(ok))}); nothing was written"
            )
        rows = []
        for t, v in zip(texts, arr):
            key, payload = text_key(t), v.tobytes()
            rows.append((self.model_id, key, payload + _digest(self.model_id, key, payload)))
        self._insert("vectors", rows)

    def get_plans(self, keys: Sequence[str]) -> dict[str, list[list[object]]]:
        """Verified chunk plans by key (a plan is a JSON list the caller wrote with :meth:`put_plans`);
        plans that fail verification are left out and counted in :attr:`rejected`."""
        found: dict[str, list[list[object]]] = {}
        bad = 0
        for key, blob in self._rows("SELECT key, plan FROM plans WHERE model = ? AND key IN ", keys):
            plan = None
            if isinstance(key, str) and isinstance(blob, bytes) and len(blob) > DIGEST_BYTES:
                payload, digest = blob[:-DIGEST_BYTES], blob[-DIGEST_BYTES:]
                if _digest(self.model_id, "plan:" + key, payload) == digest:
                    try:
                        plan = json.loads(payload.decode("utf-8"))
                    except ValueError:
                        plan = None
            if isinstance(plan, list):
                found[key] = plan
            else:
                bad += 1
        if bad:
            self._reject(bad)
        return found

    def put_plans(self, plans: dict[str, list[list[object]]]) -> None:
        """Store chunk plans by key (one transaction), each with its digest."""
        rows = []
        for key, plan in plans.items():
            payload = json.dumps(plan, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
            rows.append((self.model_id, key, payload + _digest(self.model_id, "plan:" + key, payload)))
        self._insert("plans", rows)

    def forget_plans(self, mark: str) -> int | None:
        """Delete this model's plans whose stored text contains ``mark``; returns how many, or ``None``
        when another process holds the cache's write lock (nothing is waited for: try again later). A
        cache without such plans is only read."""
        needle = mark.encode("utf-8")
        if self.read_only:
            return None
        with self._guard():
            query = "FROM plans WHERE model = ? AND instr(plan, ?) > 0"
            if self._db.execute(f"SELECT 1 {query} LIMIT 1", (self.model_id, needle)).fetchone() is None:
                return 0
            self._db.execute("PRAGMA busy_timeout = 0")
            try:
                return int(self._db.execute(f"DELETE {query}", (self.model_id, needle)).rowcount)
            except sqlite3.OperationalError as e:
                if "locked" in str(e) or "busy" in str(e) or "readonly" in str(e):  # readonly: never, skipped
                    return None
                raise
            finally:
                self._db.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT * 1000)}")

    def __len__(self) -> int:
        with self._guard():
            return int(self._db.execute("SELECT COUNT(*) FROM vectors WHERE model = ?", [self.model_id]).fetchone()[0])

    def prune(self) -> int:
        """Delete the entries of every other model id; returns how many were deleted."""
        with self._guard(), self._db:
            cur = self._db.execute("DELETE FROM vectors WHERE model != ?", [self.model_id])
            self._db.execute("DELETE FROM plans WHERE model != ?", [self.model_id])
        return cur.rowcount

    def close(self) -> None:
        with self._lock:
            self._db.close()
