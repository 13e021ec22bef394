"""Learning from use (seeds 000/001: "track which context items are actually used ... learn from
successful context selections"): the requests after which the LLM called a tool, kept as examples of
that tool; and the requests for which a tool was offered and not called, kept as its misses.

:meth:`contextsieve.session.session.Session.record_tool_calls` and ``record_outcome`` record them; the
chunk store embeds each tool's recent examples as extra chunks of the tool (max-pooled with its own,
and read by the keyword index when their text is kept), so a later request that resembles an earlier
one finds the tool the LLM chose then; a request close to a tool's misses lowers that tool's score
(``outcome_weight`` in :class:`~contextsieve.agent.settings.AgentSettings`).

**What is kept, where.** The history of an agent with a durable identity (one loaded from a file:
:mod:`contextsieve.agent.identity`) is kept across restarts in ``history.sqlite`` in the data folder
(``$CONTEXTSIEVE_DATA``), under that identity (never another agent's), by default. Privacy: a record
holds the tool's key, a digest of the request, its time and **its vector** (float16, of the model that
made it), **not the user's words**; the request's text is kept too only with ``remember_requests``
(``--remember-requests``: then the keyword index reads it and ``contextsieve history`` can show it).
Bounded: at most :data:`KEEP_PER_TOOL` records per tool and kind (the oldest go first) and
:data:`KEEP_PER_AGENT` per agent. One SQLite file in WAL mode, safe for several processes; one
transaction per record. ``contextsieve history AGENT --forget`` (:meth:`UsageLog.forget`) deletes an
agent's history (AGENT ``agent:<identity>`` when its file is gone: ``contextsieve history`` lists them).
An agent made in code keeps its history in memory unless asked (``Engine(history=True)``: by its name).
"""

from __future__ import annotations

import contextlib
import math
import os
import sqlite3
import threading
import time
import warnings
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from contextsieve.agent.example_records import Example, RecordColumns, keep_range
from contextsieve.agent.items import ItemKey, ItemKind, tool_key
from contextsieve.agent.stored_vectors import VectorBlock, checked_unit_vector, stored_blob
from contextsieve.agent.usage_file import KINDS, add_vectors, another_schema, tables
from contextsieve.agent.usage_file import columns as table_columns
from contextsieve.errors import EmbeddingCacheError, InputError, UsageLogWarning, brief, check_text
from contextsieve.retrieval.cache import (
    BUSY_TIMEOUT,
    check_folder,
    connect_read_only,
    connect_wal,
    damaged,
    text_key,
    unwritable,
    when_free,
)

__all__ = [
    "UsageLog",
    "Tally",
    "example_hash",
    "MAX_EXAMPLE_CHARS",
    "KEEP_PER_TOOL",
    "KEEP_PER_AGENT",
]

#: Longest example kept (characters); a longer message is cut (the embedder reads 256 tokens anyway).
MAX_EXAMPLE_CHARS = 2000
#: Records kept per tool and kind (default 100; the oldest go first). The chunk store reads the newest
#: ``ChunkConfig.max_examples`` of them.
KEEP_PER_TOOL = 100
#: Records kept per agent and kind (default 25,000; the oldest go first): a busy year of a 500-tool agent
#: (``python -m benchmarks.speed.history_memory``: 44-59 MB on disk for both kinds at the caps).
KEEP_PER_AGENT = 25_000


def example_text(message: str) -> str:
    """A message as a log keeps it: whitespace runs made one space, cut at :data:`MAX_EXAMPLE_CHARS`."""
    return " ".join(message.split())[:MAX_EXAMPLE_CHARS]


def example_hash(message: str) -> str:
    """The identity of ``message`` as an example in a log (:attr:`Example.hash`)."""
    return text_key(example_text(message))


class Tally(NamedTuple):
    """What a usage log holds of one tool of one agent, whatever model made it (:meth:`UsageLog.tally`)."""

    examples: int
    misses: int
    texts: int  #: records that keep the request's text
    newest: float  #: the newest record's time, in seconds since the epoch


class UsageLog:
    """Example requests per tool, per agent (see the module docstring).

    Args:
        path: the SQLite file, created (with its folder) by the first :meth:`record`, so reading an
            agent's examples never creates one; ``None`` keeps examples in memory only (text and vector).
        keep_text: also keep each request's text in the file (default ``False``: its vector only).
        model: the model family the vectors are of; a record's vector is read only when it was made by
            the same (others are read as text only, and dropped when they have none). Default ``""``.
    """

    def __init__(self, path: str | Path | None = None, *, keep_text: bool = False, model: str = "") -> None:
        self.path = Path(path) if path is not None else None
        self.keep_text = keep_text
        self.model = model
        self._lock = threading.Lock()
        self._memory: dict[tuple[str, str, ItemKey], dict[str, Example]] = {}  # (kind, agent, tool)
        self._db: sqlite3.Connection | None = None
        self._warned: set[str] = set()  # the kinds whose damaged records were warned of
        self._forgets: tuple[int, dict[str, int]] = (-1, {})  # the file's data_version, forgets by agent then
        self._latest: float | None = None  # the newest record time written or found (None: not read yet)

    @property
    def persistent(self) -> bool:
        """Whether examples are kept in a file (else in memory)."""
        return self.path is not None

    def _open(self, create: bool) -> sqlite3.Connection | None:
        """The connection; ``None`` when the file does not exist and ``create`` is false."""
        if self._db is not None:
            return self._db
        assert self.path is not None
        try:
            check_folder(self.path, "the usage log")
            if not create and not self.path.exists():
                return None
        except OSError as e:  # a name too long, a folder on the way that may not be searched
            raise EmbeddingCacheError(f"cannot open the usage log {self.path}: {e.strerror or e}") from e
        other = another_schema(self.path)
        if other:  # checked before anything is written: its journal mode and tables stay as they are
            raise EmbeddingCacheError(
                f"the usage log {self.path} is not a contextsieve usage log ({other}): move that file aside for "
                "contextsieve to keep a history there"
            )
        try:
            db = connect_wal(
                self.path,
                tables(),
                "the usage log",
            )
            db.execute("PRAGMA secure_delete=ON")  # a forgotten or evicted record's bytes are overwritten
        except EmbeddingCacheError as e:  # not a database, say
            if create or damaged(e) or not os.path.isfile(self.path):
                raise EmbeddingCacheError(f"{e}{_advice(e)}") from e
            try:  # a read-only folder: read what it holds (recording into it raises)
                db = connect_read_only(self.path, "the usage log")
            except EmbeddingCacheError as unread:  # says why reading fails too
                raise EmbeddingCacheError(f"{unread}{_advice(unread)}") from unread
            if not all(table_columns(db, kind) for kind in KINDS):  # an empty file: nothing was recorded
                db.close()
                return None
            if any("vector" not in table_columns(db, kind) for kind in KINDS):
                db.close()
                raise EmbeddingCacheError(
                    f"{e}; it is of an older format, upgraded by the first process that may write it"
                ) from e
            self._db = db
            return self._db
        if any("vector" not in table_columns(db, kind) for kind in KINDS):
            when_free(lambda: add_vectors(db), time.monotonic() + BUSY_TIMEOUT)
        self._db = db
        return self._db

    @contextlib.contextmanager
    def _guard(self, create: bool = False) -> Iterator[sqlite3.Connection | None]:
        with self._lock:
            try:
                yield self._open(create)
            except sqlite3.Error as e:
                why = str(e)
                if "readonly" in why.lower() and self.path is not None:  # which file, or the folder
                    why = unwritable(self.path) or f"{why}: {self.path.parent} may not be written by this user"
                raise EmbeddingCacheError(f"the usage log {self.path} cannot be used ({why}){_advice(e)}") from e

    def record(
        self,
        agent: str,
        message: str,
        tools: Iterable[ItemKey],
        kind: str = "examples",
        vector: np.ndarray | None = None,
    ) -> None:
        """Keep ``message`` as an example of each tool (again: only its time is renewed); with
        ``kind="misses"`` as a miss. An example of a tool removes a miss of it for the same message.
        ``vector``: the message's unit vector, as the chunk store embeds an example (what a file keeps
        instead of the text; required for a file that keeps no text).

        Raises:
            InputError: a blank message, lone surrogates, a key that is not a tool, or no vector for a
                file that keeps no text (nothing is written).
        """
        _kind(kind)
        if not isinstance(message, str) or not message.strip():
            raise InputError("an example request must be a non-empty str")
        check_text(message, "the example request")
        _agent_name(agent)
        keys = list(tools)
        for k in keys:
            if not isinstance(k, ItemKey) or k.kind is not ItemKind.TOOL:
                raise InputError(f"only tools have examples, got {k}")
            check_text(k.server + k.name, f"the tool {brief(str(k))}")
        text = example_text(message)
        h = example_hash(message)
        vec = checked_unit_vector(vector) if vector is not None else None
        if self.persistent and vec is None and not self.keep_text:
            raise InputError("a usage log that keeps no text needs the request's vector")
        if not self.persistent:
            with self._lock:
                at = self._stamps(keys, None)
                for k in keys:
                    self._memory.setdefault((kind, agent, k), {})[h] = Example(h, text, vec, at[k])
                    if kind == "examples":
                        self._memory.get(("misses", agent, k), {}).pop(h, None)
                    _trim(self._memory[(kind, agent, k)])
                mine = [kept for (c, a, _), kept in self._memory.items() if c == kind and a == agent]
                for _ in range(sum(map(len, mine)) - KEEP_PER_AGENT):  # the bound per agent, as in a file
                    oldest = min((e.at, e.hash, i) for i, kept in enumerate(mine) for e in kept.values())
                    del mine[oldest[2]][oldest[1]]
            return
        blob = stored_blob(vec, h) if vec is not None else None
        stored = text if self.keep_text else None
        with self._guard(create=True) as db:
            assert db is not None
            db.execute("BEGIN IMMEDIATE")
            try:
                at = self._stamps(keys, db)
                db.executemany(
                    f"INSERT INTO {kind} (agent, server, tool, hash, message, at, vector, model) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (agent, server, tool, hash) DO UPDATE SET "
                    "at = excluded.at, vector = coalesce(excluded.vector, vector), "
                    "model = CASE WHEN excluded.vector IS NULL THEN model ELSE excluded.model END, "
                    "message = coalesce(excluded.message, message)",
                    [(agent, k.server, k.name, h, stored, at[k], blob, self.model) for k in keys],
                )
                if kind == "examples":
                    db.executemany(
                        "DELETE FROM misses WHERE agent = ? AND server = ? AND tool = ? AND hash = ?",
                        [(agent, k.server, k.name, h) for k in keys],
                    )
                for k in keys:  # the bound per tool, then per agent: the oldest go first
                    db.execute(
                        f"DELETE FROM {kind} WHERE agent = ? AND server = ? AND tool = ? AND hash NOT IN "
                        f"(SELECT hash FROM {kind} WHERE agent = ? AND server = ? AND tool = ? "
                        "ORDER BY at DESC, hash LIMIT ?)",
                        (agent, k.server, k.name, agent, k.server, k.name, KEEP_PER_TOOL),
                    )
                over = db.execute(f"SELECT count(*) - ? FROM {kind} WHERE agent = ?", (KEEP_PER_AGENT, agent))
                extra = int(over.fetchone()[0])
                if extra > 0:
                    db.execute(
                        f"DELETE FROM {kind} WHERE rowid IN (SELECT rowid FROM {kind} WHERE agent = ? "
                        "ORDER BY at, hash LIMIT ?)",
                        (agent, extra),
                    )
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise

    def _stamps(self, keys: list[ItemKey], db: sqlite3.Connection | None) -> dict[ItemKey, float]:
        """Each tool's record time (seconds): now, a microsecond apart in the tools' order (for relations), and
        after every record this log wrote or found in its file (read once, in the write's transaction): a
        clock stepped back (a correction, a snapshot restored) must not make the newest records the oldest."""
        if self._latest is None:
            ahead = time.time() + 3e7  # a damaged time about a year ahead or more would stop the clock
            rows = [db.execute(f"SELECT max(at) FROM {k} WHERE at < ?", (ahead,)).fetchone() for k in KINDS if db]
            times = [r[0] for r in rows if r and isinstance(r[0], (int, float)) and math.isfinite(r[0])]
            self._latest = max(map(float, times), default=0.0)
        now = max(time.time(), self._latest + 1e-6)
        self._latest = now + len(keys) * 1e-6
        return {k: now + i * 1e-6 for i, k in enumerate(keys)}

    def records(
        self, agent: str, per_tool: int, kind: str = "examples", dim: int | None = None
    ) -> dict[ItemKey, Sequence[Example]]:
        """The ``per_tool`` most recent examples (or misses) of each tool of ``agent``, newest first; a
        record of another model without text is left out, and one with text gets ``vector=None``.

        ``dim``: the model's vector length (default ``None``: any). A damaged record (its vector not a
        finite, non-zero float16 vector of that length, or its time not a number; a bit flip or a hand
        edit) is read as one of another model, and the first read that meets one warns once
        (:class:`~contextsieve.errors.UsageLogWarning`): the rest of the history stays in use."""
        return self.all_records(agent, per_tool, dim, (kind,))[kind]

    def all_records(
        self, agent: str, per_tool: int, dim: int | None = None, kinds: tuple[str, ...] = KINDS
    ) -> dict[str, dict[ItemKey, Sequence[Example]]]:
        """:meth:`records` of each of ``kinds`` (default both), by kind, read together: a file's vectors
        are then rows of one float16 matrix, each request's once whatever its kinds and tools (a request
        is often an example of the tool called and a miss of those offered with it). :class:`InputError`
        for a kind that is not one of :data:`KINDS`, or ``kinds`` not a tuple or list of them."""
        if isinstance(kinds, str) or not isinstance(kinds, (tuple, list)):
            raise InputError(f"kinds must be a tuple of kinds from {KINDS}, got {kinds!r:.40}")
        kinds = tuple(dict.fromkeys(kinds))  # each kind once
        for kind in kinds:
            _kind(kind)
        _agent_name(agent)
        if isinstance(per_tool, bool) or not isinstance(per_tool, int):
            raise InputError(f"per_tool must be a whole number, got {brief(per_tool)}")
        if per_tool <= 0:
            return {kind: {} for kind in kinds}
        outs: dict[str, dict[ItemKey, Sequence[Example]]] = {kind: {} for kind in kinds}
        damaged = dict.fromkeys(kinds, 0)
        if not self.persistent:
            with self._lock:
                for (c, a, k), kept in self._memory.items():
                    if a == agent and c in outs:
                        fits = [
                            e if e.vector is None or dim is None or e.vector.shape[0] == dim else e.without_vector()
                            for e in kept.values()
                        ]
                        fits = [e for e in fits if e.vector is not None or e.text is not None]
                        outs[c][k] = tuple(sorted(fits, key=lambda e: (-e.at, e.hash))[:per_tool])
        else:
            with self._guard() as db:
                if db is not None:
                    damaged = self._read_kinds(db, agent, per_tool, kinds, dim, outs)
        for kind in kinds:
            if damaged[kind] and kind not in self._warned:
                self._warned.add(kind)
                warnings.warn(
                    f"the usage log {self.path} holds damaged records ({kind}: at least {damaged[kind]}); they "
                    "are left out and the rest of the history is used (`contextsieve history AGENT --forget` "
                    "starts afresh)",
                    UsageLogWarning,
                    stacklevel=3,
                )
        return outs

    def _read_kinds(
        self,
        db: sqlite3.Connection,
        agent: str,
        per_tool: int,
        kinds: tuple[str, ...],
        dim: int | None,
        outs: dict[str, dict[ItemKey, Sequence[Example]]],
    ) -> dict[str, int]:
        """Read ``agent``'s records of each of ``kinds`` from the file into ``outs`` (see :meth:`all_records`),
        as columns (:class:`~contextsieve.agent.example_records.RecordColumns`) with their vectors in one
        :class:`~contextsieve.agent.stored_vectors.VectorBlock`; returns how many were damaged, per kind."""
        upper = sum(int(db.execute(f"SELECT count(*) FROM {k} WHERE agent = ?", (agent,)).fetchone()[0]) for k in kinds)
        columns = RecordColumns(VectorBlock(upper, dim))  # one copy of a request's hash and vector, whatever its kinds
        damaged: dict[str, int] = {}
        for kind in kinds:
            out = outs[kind]
            mark = len(columns)
            try:
                damaged[kind] = self._read(db, agent, per_tool, kind, columns, out)
            except sqlite3.OperationalError as e:  # text that is not UTF-8 (a damaged byte): read it replaced
                if "decode" not in str(e):
                    raise
                out.clear()
                columns.truncate(mark)
                db.text_factory = _lenient_text
                try:
                    damaged[kind] = self._read(db, agent, per_tool, kind, columns, out) + 1
                finally:
                    db.text_factory = str
        columns.done()
        # the pages the read went through (a year of history is tens of MB) leave SQLite's cache for
        # what the engine allocates next: a later record reads the few it needs again
        db.execute("PRAGMA shrink_memory")
        return damaged

    def _read(
        self,
        db: sqlite3.Connection,
        agent: str,
        per_tool: int,
        kind: str,
        columns: RecordColumns,
        out: dict[ItemKey, Sequence[Example]],
    ) -> int:
        """Read ``agent``'s records of ``kind`` into ``columns``, each tool's newest ``per_tool`` as its
        :class:`~contextsieve.agent.example_records.ExampleRecords` in ``out``; returns how many were damaged."""
        damaged = 0
        rows = db.execute(  # newest first per tool, streamed: past a tool's per_tool usable ones, nothing is read
            f"SELECT server, tool, hash, message, at, vector, model FROM {kind} WHERE agent = ? "
            "ORDER BY server, tool, at DESC, hash",
            (agent,),
        )
        tool: tuple[object, object] | None = None
        key: ItemKey | None = None
        start = earlier = len(columns)
        for server, name, h, message, at, blob, model in rows:
            if (server, name) != tool:  # a tool's records are together: its range of the columns ends
                if key is not None:
                    keep_range(out, key, columns, start, per_tool)
                tool, key, start = (server, name), ItemKey(ItemKind.TOOL, str(name), str(server)), len(columns)
                earlier = len(out.get(key, ()))  # a damaged name may read as another's: one tool, two ranges
            assert key is not None
            if earlier + len(columns) - start >= per_tool:
                continue
            vec = None
            if blob is not None and model == self.model:
                vec = columns.vectors.add(str(h), blob)
                damaged += vec is None
            if not isinstance(at, (int, float)) or not math.isfinite(at) or not isinstance(message, (str, type(None))):
                damaged += 1
                continue
            if vec is None and message is None:
                continue  # a vector of another model, and no text to embed again
            columns.add(str(h), message, vec, float(at))
        if key is not None:
            keep_range(out, key, columns, start, per_tool)
        return damaged

    def examples(self, agent: str, per_tool: int, kind: str = "examples") -> dict[ItemKey, tuple[str, ...]]:
        """The texts of :meth:`records` that have one (a file keeps them with ``keep_text``; memory always)."""
        kept = self.records(agent, per_tool, kind)
        got = {k: tuple(e.text for e in v if e.text is not None) for k, v in kept.items()}
        return {k: v for k, v in got.items() if v}

    def counts(self, agent: str, kind: str = "examples") -> dict[ItemKey, int]:
        """How many examples (or misses) of each tool ``agent``'s log holds."""
        return {k: len(v) for k, v in self.records(agent, KEEP_PER_TOOL, kind).items()}

    def tally(self) -> dict[str, dict[ItemKey, Tally]]:
        """What the log holds, per agent (the scope its records are kept under) and tool, counted whatever
        model made the records; a log that does not exist holds nothing (and is not created). What
        ``contextsieve history`` lists, an agent whose file is gone included."""
        rows: list[tuple[Any, ...]] = []
        if not self.persistent:
            with self._lock:
                for (c, a, k), v in self._memory.items():
                    got = list(v.values())
                    texts = sum(e.text is not None for e in got)
                    rows += [(c, a, k.server, k.name, len(got), texts, max(e.at for e in got))] if got else []
        else:
            with self._guard() as db:
                if db is not None:
                    db.text_factory = _lenient_text  # a damaged byte in a name is read, replaced
                    try:
                        for t in KINDS:
                            each = "agent, server, tool, count(*), count(message), max(at)"
                            rows += [(t, *r) for r in db.execute(f"SELECT {each} FROM {t} GROUP BY 1, 2, 3")]
                    finally:
                        db.text_factory = str
        out: dict[str, dict[ItemKey, Tally]] = {}
        for kind, agent, server, name, n, texts, newest in rows:
            key, mine = ItemKey(ItemKind.TOOL, str(name), str(server)), out.setdefault(str(agent), {})
            was = mine.get(key, Tally(0, 0, 0, 0.0))
            at = float(newest) if isinstance(newest, (int, float)) and math.isfinite(newest) else 0.0
            n_ex, n_miss = (int(n), 0) if kind == "examples" else (0, int(n))
            mine[key] = Tally(was.examples + n_ex, was.misses + n_miss, was.texts + int(texts), max(was.newest, at))
        return out

    def forget(self, agent: str, tool: ItemKey | str | None = None, kind: str | None = "examples") -> int:
        """Delete the examples (or misses; ``kind=None``: both) of one tool (an :class:`ItemKey`,
        ``"tool:SERVER:NAME"`` or ``"SERVER:NAME"``; ``None``: all of ``agent``'s); returns how many were
        deleted, in one transaction (an error deletes nothing). :class:`InputError` for any other ``tool``
        (nothing is deleted). The file's pages that held them are overwritten (``secure_delete``) and its
        write-ahead log is emptied when no other process reads it at that moment (else at its next
        checkpoint), so their words and digests do not stay on disk."""
        _agent_name(agent)
        tool = tool_key(tool)
        kinds = KINDS if kind is None else (kind,)
        for k in kinds:
            _kind(k)
        if not self.persistent:
            with self._lock:
                gone = [x for x in self._memory if x[0] in kinds and x[1] == agent and (tool is None or x[2] == tool)]
                return sum(len(self._memory.pop(x)) for x in gone)
        n = 0
        with self._guard() as db:
            if db is None:
                return 0
            db.execute("BEGIN IMMEDIATE")  # every kind or none: a failure half way deletes nothing
            try:
                for k in kinds:
                    if tool is None:
                        n += db.execute(f"DELETE FROM {k} WHERE agent = ?", (agent,)).rowcount
                    else:
                        n += db.execute(
                            f"DELETE FROM {k} WHERE agent = ? AND server = ? AND tool = ?",
                            (agent, tool.server, tool.name),
                        ).rowcount
                if n:  # what tells the other processes holding this agent's records to read them again
                    db.execute(
                        "INSERT INTO forgets (agent, n) VALUES (?, 1) ON CONFLICT (agent) DO UPDATE SET n = n + 1",
                        (agent,),
                    )
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            if n:  # the forgotten records' frames leave the write-ahead log too (it keeps them until reused)
                self._forgets = (-1, {})  # this connection's own write leaves data_version as it was
                with contextlib.suppress(sqlite3.Error):
                    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return int(n)

    def forgets(self, agent: str) -> int:
        """How often records of ``agent`` were forgotten from the file, by any process (0: never, or a log
        in memory): an engine that holds them reads them again when it changes (:meth:`forget` in another
        process, ``contextsieve history AGENT --forget``). The count is read again only when another
        connection changed the file since the last call (SQLite's ``data_version``), so a request's check
        costs one pragma."""
        if not self.persistent:
            return 0
        with self._guard() as db:
            if db is None:
                return 0
            version = int(db.execute("PRAGMA data_version").fetchone()[0])
            seen, counts = self._forgets
            if version != seen:
                counts = {}
                self._forgets = (version, counts)
            if agent not in counts:
                try:
                    row = db.execute("SELECT n FROM forgets WHERE agent = ?", (agent,)).fetchone()
                except sqlite3.OperationalError:  # a file written before the table (read-only: not added)
                    row = None
                counts[agent] = int(row[0]) if row else 0
            return counts[agent]

    def rescope(self, old: str, new: str, *, keep: bool = False) -> int:
        """Move every example and miss kept under the scope ``old`` to ``new`` (an agent whose examples
        were kept under its file's path, now under its identity), or copy them with ``keep`` (default
        ``False``); returns how many moved. Nothing is created: a log that does not exist has nothing to move."""
        if old == new:
            return 0
        if not self.persistent:
            with self._lock:
                n = 0
                for k in [k for k in self._memory if k[1] == old]:  # as the file does: records kept under new stay
                    got = self._memory[k] if keep else self._memory.pop(k)
                    into = self._memory.setdefault((k[0], new, k[2]), {})
                    n += len(got.keys() - into.keys())
                    into.update({h: e for h, e in got.items() if h not in into})
            return n
        with self._guard() as db:
            if db is None:
                return 0
            db.execute("BEGIN IMMEDIATE")
            try:
                n, cols = 0, "server, tool, hash, message, at, vector, model"
                for kind in KINDS:
                    if keep:
                        cp = f"INSERT OR IGNORE INTO {kind} (agent, {cols}) SELECT ?, {cols} FROM {kind} WHERE agent=?"
                        n += db.execute(cp, (new, old)).rowcount
                        continue
                    n += db.execute(f"UPDATE OR IGNORE {kind} SET agent = ? WHERE agent = ?", (new, old)).rowcount
                    db.execute(f"DELETE FROM {kind} WHERE agent = ?", (old,))  # kept under ``new`` already
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            return int(n)

    def absorb(self, other: UsageLog, agent: str, scopes: Iterable[str]) -> int:
        """Copy the records ``other`` keeps under any of ``scopes`` into this log under ``agent`` (an
        earlier version's log beside the embedding cache, which kept text), then delete them there;
        returns how many. This log must keep text (``keep_text``) or live in memory."""
        n = 0
        for scope in scopes:
            for kind in KINDS:
                for key, examples in other.records(scope, KEEP_PER_TOOL, kind).items():
                    for e in reversed(examples):  # oldest first: the newest stays newest
                        if e.text is not None:
                            self.record(agent, e.text, [key], kind, e.vector)
                            n += 1
            other.forget(scope, None, None)
        return n


#: What to do with a usage log that is damaged (the file is never changed or deleted for the user).
_START_ANEW = "to start anew, move the file aside (it holds the learned history of every agent of its data folder)"


def _advice(error: Exception) -> str:
    """What to add to an error of the log's file: to move it aside only when SQLite says it is no
    database or damaged (a read-only folder or a lock says nothing against the file itself)."""
    return f"; {_START_ANEW}" if damaged(error) else ""


def _lenient_text(raw: bytes) -> str:
    """A stored text whose bytes are not all UTF-8, read with the damaged bytes replaced."""
    return raw.decode("utf-8", "replace")


def _agent_name(agent: object) -> str:
    """``agent`` (the scope records are kept under) if it is valid text; :class:`InputError` otherwise."""
    if not isinstance(agent, str):
        raise InputError(f"an agent is named by a str, got {brief(agent)}")
    return check_text(agent, "the agent's name")


def _trim(kept: dict[str, Example]) -> None:
    while len(kept) > KEEP_PER_TOOL:
        del kept[min(kept.values(), key=lambda e: (e.at, e.hash)).hash]


def _kind(kind: str) -> None:
    if kind not in KINDS:
        raise InputError(f"kind must be one of {KINDS}, got {kind!r:.40}")
