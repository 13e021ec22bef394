"""The tables of the embedded stash backend's file (:data:`SCHEMA`, created by :func:`create_tables`
with a new store) and the one change of them an upgrade makes (:func:`integer_times`, format 3 -> 4);
:class:`~contextsieve.stash.sqlite.SqliteBackend` runs both inside its write transaction.
"""

from __future__ import annotations

import sqlite3

__all__ = ["SCHEMA", "create_tables", "integer_times"]

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS segments (
    row INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    session TEXT NOT NULL,
    text TEXT NOT NULL,
    type TEXT NOT NULL,
    created INTEGER NOT NULL,
    stashed INTEGER NOT NULL,
    tokens INTEGER NOT NULL,
    topic TEXT,
    source TEXT NOT NULL,
    sha256 TEXT NOT NULL,
    model TEXT NOT NULL,
    expires INTEGER,
    protected INTEGER NOT NULL,
    chunks INTEGER NOT NULL,
    vectors BLOB NOT NULL,
    digest BLOB NOT NULL,
    terms TEXT NOT NULL,
    fields BLOB NOT NULL,
    superseded_by TEXT
);
CREATE INDEX IF NOT EXISTS segments_session_hash ON segments (session, sha256);
CREATE INDEX IF NOT EXISTS segments_created ON segments (created);
CREATE INDEX IF NOT EXISTS segments_expires ON segments (expires) WHERE expires IS NOT NULL;
CREATE INDEX IF NOT EXISTS segments_superseded ON segments (superseded_by) WHERE superseded_by IS NOT NULL;
CREATE TABLE IF NOT EXISTS refs (
    src TEXT NOT NULL, dst TEXT NOT NULL, pos INTEGER NOT NULL, PRIMARY KEY (src, dst)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS refs_dst ON refs (dst);
CREATE TABLE IF NOT EXISTS changes (seq INTEGER PRIMARY KEY AUTOINCREMENT, row INTEGER NOT NULL, op INTEGER NOT NULL);
"""
# Stores made before this schema also hold an FTS5 table ``fts`` (external content over ``segments``,
# written by every insert and delete, never read: keyword search runs on the in-memory term index).
# Such a store is opened as it is and its ``fts`` is left alone, unread and unwritten, rather than
# dropped on open: no write at open (a read-only file or a SQLite built without FTS5, where DROP TABLE
# of an FTS5 table fails, still opens and works), and an older contextsieve sharing the file (same
# FORMAT) keeps writing its ``fts`` (FTS5 accepts the deletes of rows it never indexed, and an
# external-content index is checked without its content table, so PRAGMA integrity_check stays "ok").
# No trigger ever fed it, so the statements here never touch it.


def create_tables(db: sqlite3.Connection) -> None:
    """Create the tables and indexes of :data:`SCHEMA` (those missing) in ``db``'s transaction."""
    for statement in SCHEMA.split(";"):
        if statement.strip():
            db.execute(statement)


def integer_times(db: sqlite3.Connection) -> None:
    """Copy ``segments`` into a table of the new schema whose time columns are integer microseconds
    (``round(seconds * 1e6)``) and whose ``fields`` is nullable until the upgrade fills it, rows and
    their numbers (``row``, the AUTOINCREMENT sequence) kept; its indexes are made again."""
    seq = db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'segments'").fetchone()
    start = SCHEMA.index("CREATE TABLE IF NOT EXISTS segments")
    create = SCHEMA[start : SCHEMA.index(");", start) + 1]
    create = create.replace("IF NOT EXISTS segments", "segments_upgrade").replace("fields BLOB NOT NULL", "fields BLOB")
    db.execute(create)
    kept = (
        "row, id, session, text, type, created, stashed, tokens, topic, source, sha256, model, expires, protected, "
        "chunks, vectors, digest, terms"
    )
    us = "CAST(round({0} * 1000000) AS INTEGER)"
    copied = kept.replace("created", us.format("created")).replace("stashed", us.format("stashed"))
    copied = copied.replace("expires", us.format("expires"))  # NULL stays NULL
    db.execute(f"INSERT INTO segments_upgrade ({kept}) SELECT {copied} FROM segments")
    db.execute("DROP TABLE segments")
    db.execute("ALTER TABLE segments_upgrade RENAME TO segments")
    for statement in SCHEMA.split(";"):
        if statement.strip().startswith("CREATE INDEX") and " ON segments " in statement:
            db.execute(statement)
    if seq is not None:
        db.execute("UPDATE sqlite_sequence SET seq = max(seq, ?) WHERE name = 'segments'", (seq[0],))
