"""How the embedded stash backend reads a store this user may not write (a read-only folder or file, an
edge machine's image): opened read-only with nothing made beside it
(:func:`contextsieve.retrieval.cache.connect_read_only`), opened again once another process changed the
file, and why a new store cannot be made where SQLite says only "unable to open database file"."""

from __future__ import annotations

import os
import sqlite3
import threading
from pathlib import Path

from contextsieve.errors import ContextSieveError, StashError
from contextsieve.retrieval.cache import connect_read_only, read_only, sqlite_files
from contextsieve.stash.sqlite_checks import SqliteChecks
from contextsieve.stash.vectors import VectorTable

__all__ = ["SqliteReadOnly"]


class SqliteReadOnly(SqliteChecks):
    """The read-only opening of :class:`~contextsieve.stash.sqlite.SqliteBackend` (which sets these
    attributes and ``_setup``, the checks of an opened file)."""

    path: Path
    location: str
    lock: threading.RLock
    _db: sqlite3.Connection
    read_only: bool
    _stamp: tuple[object, ...]
    _pinned: VectorTable | None
    _seq: int
    _version: int
    _graph_saved: int

    def _setup(self) -> None:
        raise NotImplementedError

    def _open_read_only(self, error: StashError) -> None:
        """Open an existing store this user may not write (a read-only folder or file) for reading:
        ``stash stats``, ``namespaces``, ``export`` and retrieval work, and a write raises
        :class:`~contextsieve.errors.StashError` naming the store. Raises ``error`` when it cannot be
        read either, or needs an upgrade of its format."""
        self._stamp = self._file_stamp()
        try:
            self._db = connect_read_only(self.path, "the stash")
        except ContextSieveError as e:
            raise StashError(f"{error}; {e}") from e
        self.read_only = True
        try:
            self._setup()
        except BaseException:
            self._db.close()
            raise

    def _file_stamp(self) -> tuple[object, ...]:
        """What shows that another process wrote the file since it was opened to read: the file's inode,
        size and time, and whether its ``-wal`` and ``-shm`` files exist."""
        real, wal, shm = sqlite_files(self.path)
        try:
            st = os.stat(real)
            head: object = (st.st_ino, st.st_size, st.st_mtime_ns)
        except OSError:
            head = None
        return (head, wal.exists(), shm.exists())

    def _reconnect_if_lost(self) -> None:
        """A store opened to read as immutable (no ``-wal`` and ``-shm`` files beside it: nothing may be made
        there) sees nothing another process writes afterwards, and SQLite leaves its reads undefined once
        the file changes; so when the file's stamp (:meth:`_file_stamp`) changed since it was opened, it is
        opened again and its table read afresh (a few stat calls per operation, on read-only stores only)."""
        if not self.read_only or self._pinned is not None or self._file_stamp() == self._stamp:
            return
        with self.lock:
            stamp = self._file_stamp()
            try:
                db = connect_read_only(self.path, "the stash")
            except ContextSieveError as e:
                raise StashError(f"the stash {self.location} changed, and cannot be read again: {e}") from e
            self._db.close()
            self._db, self._stamp = db, stamp
            self._table, self._seq, self._version, self._graph_saved = None, 0, -1, -1

    def _raise_if_folder_read_only(self, error: Exception) -> None:
        """Say why a new store cannot be made where SQLite says only "unable to open database file"."""
        if not os.path.exists(self.path) and read_only(error, self.path):
            raise StashError(
                f"cannot create the stash {self.location}: {self.path.parent} may not be written by this user"
            ) from error
