"""Learning from use (seeds 000/001: "track which context items are actually used ... learn from
successful context selections"): the requests after which the LLM called a tool, kept as examples of
that tool; and the requests for which a tool was offered and not called, kept as its misses.

:meth:`contextsieve.session.session.Session.record_tool_calls` and ``record_outcome`` record them; the
chunk store embeds each tool's recent examples as extra chunks of the tool (max-pooled with its own,
and read by the keyword index), so a later request that resembles an earlier one finds the tool the
LLM chose then; a request close to a tool's misses lowers that tool's score (``outcome_weight`` in
:class:`~contextsieve.agent.settings.AgentSettings`). Both persist in ``usage.sqlite`` beside the embedding
cache (one SQLite file in WAL mode, safe for several processes; one transaction per record), or in
memory when the cache is off.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from contextsieve.agent.items import ItemKey, ItemKind
from contextsieve.errors import EmbeddingCacheError, InputError, check_text
from contextsieve.retrieval.cache import connect_wal, text_key

__all__ = ["UsageLog", "MAX_EXAMPLE_CHARS", "KINDS"]

#: what the log keeps per tool: ``"examples"`` (requests after which the tool was called and
#: succeeded) and ``"misses"`` (requests for which it was offered and not called); one table each
KINDS = ("examples", "misses")

#: Longest example kept (characters); a longer message is cut (the embedder reads 256 tokens anyway).
MAX_EXAMPLE_CHARS = 2000


class UsageLog:
    """Example requests per tool, per agent.

    Args:
        path: the SQLite file, created (with its folder) by the first :meth:`record`, so reading an
            agent's examples never creates one; ``None`` keeps examples in memory only.
    """

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path is not None else None
        self._lock = threading.Lock()
        self._memory: dict[tuple[str, str, ItemKey], dict[str, tuple[float, str]]] = {}  # (kind, agent, tool)
        self._db: sqlite3.Connection | None = None

    @property
    def persistent(self) -> bool:
        """Whether examples are kept in a file (else in memory)."""
        return self.path is not None

    def _open(self, create: bool) -> sqlite3.Connection | None:
        """The connection; ``None`` when the file does not exist and ``create`` is false."""
        if self._db is not None:
            return self._db
        assert self.path is not None
        if not create and not self.path.exists():
            return None
        self._db = connect_wal(
            self.path,
            tuple(
                f"CREATE TABLE IF NOT EXISTS {kind} (agent TEXT NOT NULL, server TEXT NOT NULL, tool TEXT NOT NULL, "
                "hash TEXT NOT NULL, message TEXT NOT NULL, at REAL NOT NULL, PRIMARY KEY (agent, server, tool, hash))"
                for kind in KINDS
            ),
            "the usage log",
        )
        return self._db

    @contextlib.contextmanager
    def _guard(self, create: bool = False) -> Iterator[sqlite3.Connection | None]:
        with self._lock:
            try:
                yield self._open(create)
            except sqlite3.Error as e:
                raise EmbeddingCacheError(
                    f"the usage log {self.path} cannot be used ({e}); delete it to start afresh (the tool examples "
                    "it held are lost)"
                ) from e

    def record(self, agent: str, message: str, tools: Iterable[ItemKey], kind: str = "examples") -> None:
        """Keep ``message`` as an example of each tool (again: only its time is renewed); with
        ``kind="misses"`` as a miss. An example of a tool removes a miss of it for the same message.

        Raises:
            InputError: a blank message, lone surrogates, or a key that is not a tool (nothing is written).
        """
        _kind(kind)
        if not isinstance(message, str) or not message.strip():
            raise InputError("an example request must be a non-empty str")
        check_text(message, "the example request")
        keys = list(tools)
        for k in keys:
            if not isinstance(k, ItemKey) or k.kind is not ItemKind.TOOL:
                raise InputError(f"only tools have examples, got {k}")
        text = " ".join(message.split())[:MAX_EXAMPLE_CHARS]
        h, now = text_key(text), time.time()
        if not self.persistent:
            with self._lock:
                for k in keys:
                    self._memory.setdefault((kind, agent, k), {})[h] = (now, text)
                    if kind == "examples":
                        self._memory.get(("misses", agent, k), {}).pop(h, None)
            return
        with self._guard(create=True) as db:
            assert db is not None
            db.execute("BEGIN IMMEDIATE")
            try:
                db.executemany(
                    f"INSERT INTO {kind} VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (agent, server, tool, hash) "
                    "DO UPDATE SET at = excluded.at",
                    [(agent, k.server, k.name, h, text, now) for k in keys],
                )
                if kind == "examples":
                    db.executemany(
                        "DELETE FROM misses WHERE agent = ? AND server = ? AND tool = ? AND hash = ?",
                        [(agent, k.server, k.name, h) for k in keys],
                    )
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise

    def examples(self, agent: str, per_tool: int, kind: str = "examples") -> dict[ItemKey, tuple[str, ...]]:
        """The ``per_tool`` most recent examples (or misses) of each tool of ``agent``, newest first."""
        _kind(kind)
        if per_tool <= 0:
            return {}
        out: dict[ItemKey, list[tuple[float, str]]] = {}
        if not self.persistent:
            with self._lock:
                for (c, a, k), kept in self._memory.items():
                    if a == agent and c == kind:
                        out[k] = list(kept.values())
        else:
            with self._guard() as db:
                rows = (
                    db.execute(f"SELECT server, tool, message, at FROM {kind} WHERE agent = ?", (agent,)).fetchall()
                    if db is not None
                    else []
                )
            for server, tool, message, at in rows:
                out.setdefault(ItemKey(ItemKind.TOOL, str(tool), str(server)), []).append((float(at), str(message)))
        return {k: tuple(m for _, m in sorted(v, key=lambda r: (-r[0], r[1]))[:per_tool]) for k, v in out.items()}

    def forget(self, agent: str, tool: ItemKey | None = None, kind: str = "examples") -> int:
        """Delete the examples (or misses) of one tool (or all of ``agent``'s); returns how many were deleted."""
        _kind(kind)
        if not self.persistent:
            with self._lock:
                gone = [k for k in self._memory if k[0] == kind and k[1] == agent and (tool is None or k[2] == tool)]
                n = sum(len(self._memory.pop(k)) for k in gone)
            return n
        with self._guard() as db:
            if db is None:
                return 0
            if tool is None:
                cur = db.execute(f"DELETE FROM {kind} WHERE agent = ?", (agent,))
            else:
                cur = db.execute(
                    f"DELETE FROM {kind} WHERE agent = ? AND server = ? AND tool = ?", (agent, tool.server, tool.name)
                )
            return int(cur.rowcount)

    def rescope(self, old: str, new: str) -> int:
        """Move every example and miss kept under the scope ``old`` to ``new`` (an agent whose examples
        were kept under its file's path, now under its identity); returns how many moved. Nothing is
        created: a log that does not exist has nothing to move."""
        if old == new:
            return 0
        if not self.persistent:
            with self._lock:
                moved = [k for k in self._memory if k[1] == old]
                for k in moved:
                    self._memory.setdefault((k[0], new, k[2]), {}).update(self._memory.pop(k))
            return len(moved)
        with self._guard() as db:
            if db is None:
                return 0
            db.execute("BEGIN IMMEDIATE")
            try:
                n = 0
                for kind in KINDS:
                    n += db.execute(f"UPDATE OR IGNORE {kind} SET agent = ? WHERE agent = ?", (new, old)).rowcount
                    db.execute(f"DELETE FROM {kind} WHERE agent = ?", (old,))  # kept under ``new`` already
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            return int(n)


def _kind(kind: str) -> None:
    if kind not in KINDS:
        raise InputError(f"kind must be one of {KINDS}, got {kind!r:.40}")
