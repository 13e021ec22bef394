"""The agent registry: which identity each agent file has (see :mod:`contextsieve.agent.identity`), and
the names its tools were given (see :mod:`contextsieve.agent.toolnames`).

One SQLite file, ``agents.sqlite`` in the data folder (``$CONTEXTSIEVE_DATA``, else
``~/.local/share/contextsieve``: :func:`~contextsieve.fileio.default_data_dir`), in WAL mode, safe for
several processes; every change is one transaction. It holds no user text: per place an agent was used
at, its identity, path, file id, name and the digests of its parts; per identity, its tools' keys and
names.

:meth:`AgentRegistry.resolve` (run by :meth:`contextsieve.Engine.from_file`, so by ``serve``, the
gateway and every command that loads an agent file) finds the agent's identity again or gives it one,
records where it is now, and gives the agent the registry's name book. A stash store also keeps a record
of each agent whose namespace it holds (:func:`store_records`, :func:`keep_in_store`), so a store copied
with its project, or shared by one agent at several paths, finds its agent again where the registry does
not know it (:meth:`AgentRegistry.resolve_in_store`).
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from contextsieve.agent.identity import AgentPrint, AgentRecord, Match, birth, declared_id, match, similarity
from contextsieve.agent.items import ItemKey, ItemKind
from contextsieve.agent.toolnames import NameBook, new_names
from contextsieve.errors import AgentRegistryError, ContextSieveError, InputError, brief
from contextsieve.fileio import default_data_dir
from contextsieve.retrieval.cache import connect_read_only, connect_wal, read_only

if TYPE_CHECKING:
    from contextsieve.agent.agent import Agent
    from contextsieve.stash.store import StashStore

__all__ = [
    "AgentRegistry",
    "RegistryNameBook",
    "Resolution",
    "REGISTRY_FILE",
    "STORE_RECORD_PREFIX",
    "keep_in_store",
    "store_records",
]

#: The registry's file name in the data folder.
REGISTRY_FILE = "agents.sqlite"
#: Prefix of a stash store's named value holding the record of the agent whose namespace is
#: ``agent:<identity>`` (followed by the identity).
STORE_RECORD_PREFIX = "agents:"
#: Share of parts from which another identity's record is named as maybe this agent's (0.3).
SIMILAR_MIN = 0.3

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS agents (identity TEXT NOT NULL, source TEXT NOT NULL, file_id TEXT NOT NULL, "
    "name TEXT NOT NULL, parts TEXT NOT NULL, created REAL NOT NULL, last_used REAL NOT NULL, "
    "PRIMARY KEY (identity, source))",
    "CREATE TABLE IF NOT EXISTS tool_names (identity TEXT NOT NULL, name TEXT NOT NULL, server TEXT NOT NULL, "
    "tool TEXT NOT NULL, given REAL NOT NULL, PRIMARY KEY (identity, name), UNIQUE (identity, server, tool))",
)


@dataclass(frozen=True)
class Resolution:
    """What :meth:`AgentRegistry.resolve` found.

    Attributes:
        identity: the agent's identity.
        how: ``"declared"`` (the file's ``id``), ``"same file"``, ``"moved"`` (found at another path that
            no longer exists), ``"store"`` (a store's record), ``"adopted"`` or ``"new"``.
        previous: the record found (``None`` for a declared id or a new agent): where the agent was.
    """

    identity: str
    how: str
    previous: AgentRecord | None = None

    def note(self) -> str:
        """One line for a user when the identity was found anywhere but at the same file, or may be
        another agent's (else ``""``)."""
        was = self.previous.print if self.previous is not None else None
        if self.how in ("moved", "store") and was is not None:
            where = "in the stash store" if self.how == "store" else "in the agent registry"
            return (
                f"agent {brief(was.name)} found {where} as {self.identity} (it was at {was.source}; "
                "same name, rules, references and servers): its data is kept"
            )
        if self.how == "declared" and was is not None:
            return (
                f"the declared id {self.identity} is also that of agent {brief(was.name)} at {was.source}, which "
                "looks like another agent: the two share their stash, learned examples and tool names"
            )
        if self.how == "new" and was is not None and self.previous is not None:
            return (
                f"the stash store's namespace agent:{self.previous.identity} is another agent's ({brief(was.name)} at "
                f"{was.source}): this agent is {self.identity} there"
            )
        return ""


class AgentRegistry:
    """The registry file (see the module docstring).

    Args:
        path: the SQLite file (default: ``agents.sqlite`` in :func:`~contextsieve.fileio.default_data_dir`),
            created with its folder on the first write.

    Raises (any method):
        AgentRegistryError: the file cannot be opened, read or written.
    """

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path is not None else default_data_dir() / REGISTRY_FILE
        self._db: sqlite3.Connection | None = None
        self._lock = threading.RLock()

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction (``BEGIN IMMEDIATE``: concurrent resolvers of one agent queue)."""
        with self._lock:
            try:
                if self._db is None:
                    self._db = connect_wal(self.path, _SCHEMA, "the agent registry")
                db = self._db
                db.execute("BEGIN IMMEDIATE")
            except ContextSieveError as e:  # connect_wal's error names the file already
                raise AgentRegistryError(str(e)) from e
            except sqlite3.Error as e:
                raise AgentRegistryError(f"the agent registry {self.path} cannot be opened: {e}") from e
            try:
                yield db
                db.execute("COMMIT")
            except BaseException as e:
                with contextlib.suppress(sqlite3.Error):
                    db.execute("ROLLBACK")
                if isinstance(e, sqlite3.Error):
                    raise AgentRegistryError(f"the agent registry {self.path} cannot be used: {e}") from e
                if isinstance(e, UnicodeEncodeError):  # a file name of bytes that are not UTF-8
                    raise AgentRegistryError(
                        f"the agent registry {self.path} keeps text, and a path or name here is not valid UTF-8 "
                        f"({brief(e.object)}); rename the file to keep its data where it moves"
                    ) from e
                raise

    # -- records -----------------------------------------------------------------------------------

    def records(self) -> list[AgentRecord]:
        """Every record, in identity then path order (a file that does not exist yet has none); read
        without writing when the file may not be written (a read-only data folder)."""
        if not self.path.exists():
            return []
        try:
            with self._transaction() as db:
                return _records(db)
        except AgentRegistryError as error:
            with self._read_only(error) as db:
                return _records(db)

    @contextlib.contextmanager
    def _read_only(self, error: AgentRegistryError) -> Iterator[sqlite3.Connection]:
        """The file opened without writing, after ``error`` (it may not be written: a read-only data
        folder); raises ``error`` (with why) when it cannot be read either."""
        try:
            db = connect_read_only(self.path, "the agent registry")
        except ContextSieveError as unread:  # why it cannot be read either
            raise AgentRegistryError(f"{error}; {unread}") from unread
        try:
            yield db
        except sqlite3.Error:
            raise error from None
        finally:
            db.close()

    def resolve(self, agent: Agent) -> Resolution:
        """Find ``agent``'s identity (see :mod:`contextsieve.agent.identity`) or give it one, record where
        it is now, and give it this registry's name book (:meth:`Agent.use_name_book`). One transaction.
        An agent made in code (no file) is left as it is (``how="code"``). A new identity is never one
        the registry or a default store (``stash/<identity>.db`` beside it) holds already."""
        if not agent.source:
            return Resolution(agent.identity, "code")
        current = AgentPrint.of(agent)
        try:
            with self._transaction() as db:
                found = self._found(agent, current, _records(db))
                _put(db, found.identity, current, found.previous if found.how == "moved" else None)
        except AgentRegistryError as e:
            if not read_only(e, self.path) or not os.path.isfile(self.path):
                raise
            return self._resolve_read_only(agent, current, e)
        self._attach(agent, found.identity)
        return found

    def _found(self, agent: Agent, current: AgentPrint, records: list[AgentRecord]) -> Resolution:
        """The identity of ``agent`` (its print ``current``) among ``records`` (see :meth:`resolve`)."""
        if agent.agent_id:
            others = [
                r
                for r in records
                if r.identity == agent.agent_id and match(current, [r], exists=lambda _: False, anywhere=True) is None
            ]
            return Resolution(agent.agent_id, "declared", others[0] if others else None)
        m = match(current, records)
        if m is not None:
            return Resolution(m.record.identity, m.how, m.record)
        held = {r.identity for r in records}
        return Resolution(birth(current, lambda i: i in held or self.has_store(i)), "new")

    def _resolve_read_only(self, agent: Agent, current: AgentPrint, error: AgentRegistryError) -> Resolution:
        """:meth:`resolve` in a registry this user may not write (a read-only data folder): the identity
        found as :meth:`resolve` finds it, from the file opened read-only, and the names its tools were
        given; nothing is recorded, so new tools' names are kept in memory for this process (an
        :class:`~contextsieve.errors.AgentRegistryWarning` says so). Raises ``error`` when the file
        cannot be read either."""
        import warnings

        from contextsieve.errors import AgentRegistryWarning

        with self._read_only(error) as db:
            found = self._found(agent, current, _records(db))
            given = _names(db, found.identity)
        agent.set_identity(found.identity)
        agent.use_name_book(NameBook(given))
        warnings.warn(
            f"{error}; agent {agent.name!r} is {found.identity} as the registry, read without writing, says "
            f"({found.how}), and the names of tools it has not named yet are kept in memory in this process",
            AgentRegistryWarning,
            stacklevel=3,
        )
        return found

    def store_path(self, identity: str) -> Path:
        """The default store of ``identity`` (``stash/<identity>.db`` beside the registry: ``serve`` without
        ``--stash``); :class:`InputError` for an identity that is not one (see
        :data:`~contextsieve.agent.identity.ID_PATTERN`)."""
        return self.path.parent / "stash" / f"{declared_id(identity, 'an identity')}.db"

    def has_store(self, identity: str) -> bool:
        """Whether ``identity`` has a default store (:meth:`store_path`)."""
        try:
            return self.store_path(identity).exists()
        except InputError:
            return False

    def known(self, identity: str) -> bool:
        """Whether ``identity`` is an agent's: the registry records it, or it has a default store."""
        return any(r.identity == identity for r in self.records()) or self.has_store(identity)

    def adopt(self, agent: Agent, identity: str) -> Resolution:
        """Make ``identity`` this agent's at its place from now on (its data, under that identity, is
        then this agent's: what ``contextsieve stash adopt`` does). The agent's records under another
        identity at this place are dropped; nothing else changes. A file that declares an ``id`` keeps it
        (:class:`InputError`)."""
        if agent.agent_id:
            raise InputError(f"the agent file declares id {agent.agent_id!r}: edit the file to change its identity")
        if not agent.source:
            raise InputError("an agent made in code has no records to adopt into: give it the name instead")
        declared_id(identity, "an identity")
        current = AgentPrint.of(agent)
        with self._transaction() as db:
            db.execute("DELETE FROM agents WHERE source = ? AND identity != ?", (current.source, identity))
            _put(db, identity, current, None)
        self._attach(agent, identity)
        return Resolution(identity, "adopted")

    def resolve_in_store(self, agent: Agent, store: StashStore) -> Resolution | None:
        """For an agent the registry did not know (a new identity) whose namespace in ``store``
        (``agent:<identity>``) is empty: the identity of a record ``store`` keeps of an agent of its name
        sharing its parts (:func:`contextsieve.agent.identity.match` with ``anywhere``: a project copied
        with its own store, one agent at several paths on one shared store), adopted (:meth:`adopt`);
        ``None`` when there is none (or the file declares an ``id``)."""
        if agent.agent_id or not agent.source:
            return None
        m = _store_match(agent, store)
        if m is None or m.record.identity == agent.identity:
            return None
        self.adopt(agent, m.record.identity)
        return Resolution(m.record.identity, "store", m.record)

    def claim_in_store(self, agent: Agent, store: StashStore) -> Resolution | None:
        """For an agent the registry did not know (a new identity): when ``store`` holds segments under its
        namespace and a record of another agent there (another container's agent at the same path, its
        registry elsewhere), give this agent an identity of its own that ``store`` does not hold
        (adopted); ``None`` when the namespace is free or the record is this agent's."""
        if agent.agent_id or not agent.source:
            return None
        held = {n.name[len("agent:") :] for n in store.namespaces() if n.name.startswith("agent:")}
        if agent.identity not in held:
            return None
        current = AgentPrint.of(agent)
        theirs = store_records(store, [agent.identity])
        if theirs and match(current, theirs, exists=lambda _: True, anywhere=True) is not None:
            return None
        taken = {r.identity for r in self.records()} | held
        fresh = birth(current, lambda i: i in taken or self.has_store(i))
        self.adopt(agent, fresh)
        return Resolution(fresh, "new", theirs[0] if theirs else None)

    def similar(self, agent: Agent) -> list[AgentRecord]:
        """Records of other identities that may be this agent's: at its path, of its name, or sharing at
        least :data:`SIMILAR_MIN` of its parts; most similar first."""
        current = AgentPrint.of(agent)
        found = [
            r
            for r in self.records()
            if r.identity != agent.identity
            and (
                r.print.source == current.source
                or r.print.name == current.name
                or similarity(current.parts, r.print.parts) >= SIMILAR_MIN
            )
        ]
        return sorted(found, key=lambda r: (-similarity(current.parts, r.print.parts), -r.last_used, r.identity))

    def forget(self, identity: str) -> int:
        """Drop every record and tool name of ``identity``; returns how many rows went."""
        with self._transaction() as db:
            n = db.execute("DELETE FROM agents WHERE identity = ?", (identity,)).rowcount
            return int(n + db.execute("DELETE FROM tool_names WHERE identity = ?", (identity,)).rowcount)

    def _attach(self, agent: Agent, identity: str) -> None:
        agent.set_identity(identity)
        agent.use_name_book(RegistryNameBook(self, identity))

    # -- tool names -----------------------------------------------------------------------------------

    def given_names(self, identity: str) -> dict[ItemKey, str]:
        """Every name given to a tool of ``identity`` (present or gone)."""
        if not self.path.exists():
            return {}
        with self._transaction() as db:
            return _names(db, identity)

    def assign_names(self, identity: str, keys: Sequence[ItemKey]) -> dict[ItemKey, str]:
        """Name the tools of ``keys`` not named yet for ``identity`` (one transaction: two processes of
        one agent never give one name to two tools); every name given to its tools."""
        with self._transaction() as db:
            given = _names(db, identity)
            new = new_names(keys, given)
            now = time.time()
            db.executemany(
                "INSERT INTO tool_names VALUES (?, ?, ?, ?, ?)",
                [(identity, n, k.server, k.name, now) for k, n in new.items()],
            )
            given.update(new)
            return given


class RegistryNameBook(NameBook):
    """The name book of one identity, kept in the registry: names hold across processes and restarts.
    Should the registry fail, names go on in memory (the ones given so far, then new ones by the rule)
    with an :class:`~contextsieve.errors.AgentRegistryWarning`."""

    def __init__(self, registry: AgentRegistry, identity: str) -> None:
        super().__init__()
        self.registry = registry
        self.identity = identity
        self._failed = False

    def assign(self, keys: Sequence[ItemKey]) -> dict[ItemKey, str]:
        if not self._failed:
            try:
                given = self.registry.assign_names(self.identity, keys)
            except AgentRegistryError as e:
                import warnings

                from contextsieve.errors import AgentRegistryWarning

                self._failed = True
                warnings.warn(
                    f"{e}; the tools' names are kept in memory from now on (a restart may give a new tool the name "
                    "a gone one had)",
                    AgentRegistryWarning,
                    stacklevel=3,
                )
            else:
                with self._lock:
                    self._given = dict(given)
                return given
        return super().assign(keys)

    def adopt(self, given: Mapping[ItemKey, str]) -> None:
        super().adopt(given)
        if not self._failed:
            with contextlib.suppress(AgentRegistryError):
                mine = self.registry.given_names(self.identity)
                taken = set(mine.values())
                extra = {k: n for k, n in given.items() if k not in mine and n not in taken}
                if extra:
                    with self.registry._transaction() as db:
                        db.executemany(
                            "INSERT OR IGNORE INTO tool_names VALUES (?, ?, ?, ?, ?)",
                            [(self.identity, n, k.server, k.name, time.time()) for k, n in extra.items()],
                        )


# -- rows ----------------------------------------------------------------------------------------------


def _records(db: sqlite3.Connection) -> list[AgentRecord]:
    rows = db.execute(
        "SELECT identity, name, source, file_id, parts, last_used FROM agents ORDER BY identity, source"
    ).fetchall()
    out = []
    for identity, name, source, fid, parts, used in rows:
        try:
            p = AgentPrint.from_json({"name": name, "source": source, "file_id": fid, "parts": json.loads(parts)})
        except (ValueError, InputError):
            continue  # a damaged row finds nothing (its agent gets a new identity and is told about it)
        out.append(AgentRecord(str(identity), p, float(used)))
    return out


def _put(db: sqlite3.Connection, identity: str, current: AgentPrint, moved_from: AgentRecord | None) -> None:
    now = time.time()
    if moved_from is not None:
        db.execute("DELETE FROM agents WHERE identity = ? AND source = ?", (identity, moved_from.print.source))
    db.execute(
        "INSERT INTO agents VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (identity, source) DO UPDATE SET "
        "file_id = excluded.file_id, name = excluded.name, parts = excluded.parts, last_used = excluded.last_used",
        (identity, current.source, current.file_id, current.name, json.dumps(sorted(current.parts)), now, now),
    )


def _names(db: sqlite3.Connection, identity: str) -> dict[ItemKey, str]:
    rows = db.execute("SELECT name, server, tool FROM tool_names WHERE identity = ?", (identity,)).fetchall()
    return {ItemKey(ItemKind.TOOL, str(tool), str(server)): str(name) for name, server, tool in rows}


# -- records kept in stash stores ------------------------------------------------------------------------


def keep_in_store(agent: Agent, store: StashStore) -> None:
    """Keep ``agent``'s record in ``store`` (the named value :data:`STORE_RECORD_PREFIX` + identity), so
    the store finds its agent again wherever its file goes (:meth:`AgentRegistry.resolve_in_store`)."""
    record = {**AgentPrint.of(agent).to_json(), "last_used": time.time()}
    store.write_value(STORE_RECORD_PREFIX + agent.identity, json.dumps(record, sort_keys=True))


def store_records(store: StashStore, identities: Sequence[str]) -> list[AgentRecord]:
    """The records ``store`` keeps of the agents ``identities`` (those it has, in that order)."""
    out = []
    for identity in identities:
        raw = store.read_value(STORE_RECORD_PREFIX + identity)
        if raw is None:
            continue
        try:
            d = json.loads(raw)
            out.append(AgentRecord(identity, AgentPrint.from_json(d), float(d.get("last_used", 0.0))))
        except (ValueError, TypeError, AttributeError, InputError):
            continue  # a damaged record finds nothing
    return out


def _store_match(agent: Agent, store: StashStore) -> Match | None:
    identities = [n.name[len("agent:") :] for n in store.namespaces() if n.name.startswith("agent:") and n.segments]
    return match(AgentPrint.of(agent), store_records(store, identities), anywhere=True)
