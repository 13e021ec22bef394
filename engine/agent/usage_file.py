"""The usage log's SQLite file (:mod:`contextsieve.agent.usage`): its tables, what tells another program's
file from it, and the upgrade of a file written before vectors were kept."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from contextsieve.errors import EmbeddingCacheError
from contextsieve.retrieval.cache import connect_read_only

__all__ = ["KINDS", "FORGETS", "tables", "another_schema", "columns", "add_vectors"]

#: what the log keeps per tool: ``"examples"`` (requests after which the tool was called and
#: succeeded) and ``"misses"`` (requests for which it was offered and not called); one table each
KINDS = ("examples", "misses")

#: The columns every version of the usage log has had in each of its tables.
CORE_COLUMNS = frozenset({"agent", "server", "tool", "hash", "message", "at"})


#: The table of how often each agent's records were forgotten (:meth:`~contextsieve.agent.usage.UsageLog.forgets`).
FORGETS = "CREATE TABLE IF NOT EXISTS forgets (agent TEXT PRIMARY KEY, n INTEGER NOT NULL)"


def another_schema(path: Path) -> str | None:
    """What shows that the SQLite file at ``path`` is some other program's (a table named as the log's
    without the log's columns), read without writing; ``None`` for a usage log, an empty or missing
    file, or a file that cannot be read this way (opening it says why)."""
    try:
        if not path.is_file() or path.stat().st_size == 0:
            return None
        db = connect_read_only(path, "the usage log")  # nothing made beside it (a read-only file's -shm)
    except (OSError, EmbeddingCacheError):
        return None
    try:
        for kind in KINDS:
            found = columns(db, kind)
            if found and not CORE_COLUMNS <= found:
                return f"its table {kind} has the columns {', '.join(sorted(found))}"
    except sqlite3.Error:
        return None
    finally:
        db.close()
    return None


def columns(db: sqlite3.Connection, kind: str) -> set[str]:
    """The columns of the table ``kind`` (none: no such table)."""
    return {r[1] for r in db.execute(f"PRAGMA table_info({kind})")}


def add_vectors(db: sqlite3.Connection) -> None:
    """Give a log written before vectors were kept its vector and model columns (its messages stay as
    they were), in one transaction that checks again: another process may have done it meanwhile."""
    db.execute("BEGIN IMMEDIATE")
    try:
        for kind in KINDS:
            if "vector" not in columns(db, kind):
                db.execute(f"ALTER TABLE {kind} ADD COLUMN vector BLOB")
                db.execute(f"ALTER TABLE {kind} ADD COLUMN model TEXT NOT NULL DEFAULT ''")
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise


def tables() -> tuple[str, ...]:
    """The statements that make the log's tables where they are missing."""
    return tuple(
        f"CREATE TABLE IF NOT EXISTS {kind} (agent TEXT NOT NULL, server TEXT NOT NULL, tool TEXT NOT NULL,"
        " hash TEXT NOT NULL, message TEXT, at REAL NOT NULL, vector BLOB, model TEXT NOT NULL DEFAULT '',"
        " PRIMARY KEY (agent, server, tool, hash))"
        for kind in KINDS
    ) + (FORGETS,)
