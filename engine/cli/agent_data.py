"""An agent's data over time on the command line: the store ``serve`` opens for an agent, what it says when
the agent's namespace is empty while data that may be the agent's exists elsewhere, and the commands that
list a store's namespaces (``contextsieve stash namespaces``), rename one (``stash rename``) and make one an
agent's (``stash adopt``). :mod:`contextsieve.agent.identity` says how an agent is found again."""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from contextsieve.agent.agent import Agent
from contextsieve.agent.identity import AgentPrint, AgentRecord, similarity
from contextsieve.agent.registry import AgentRegistry, keep_in_store, store_records
from contextsieve.engine import Engine
from contextsieve.errors import ContextSieveError, StashError, brief
from contextsieve.fileio import DATA_ENV
from contextsieve.stash.store import StashStore

__all__ = [
    "AGENT_PREFIX",
    "Candidate",
    "adopt",
    "candidates",
    "default_store",
    "namespaces",
    "rename",
    "settle",
]

#: The prefix of an agent's own stash namespace (``agent:<identity>``).
AGENT_PREFIX = "agent:"
#: Most candidates ``serve`` names on stderr.
_MOST = 5


def default_store(registry: AgentRegistry, identity: str) -> Path:
    """The embedded store ``serve`` uses without ``--stash``: ``stash/<identity>.db`` in the data folder
    (one per agent); the folder is made when missing. :class:`StashError` when it cannot be (a file
    stands where a folder should)."""
    folder = registry.path.parent / "stash"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:  # the data folder or its stash folder is a file (or cannot be made)
        raise StashError(
            f"cannot use the stash folder {folder}: {_why(e, folder)}; move that file away, set "
            f"${DATA_ENV} to another folder, or pass --stash PATH or --no-stash"
        ) from e
    return folder / f"{identity}.db"


def _why(error: OSError, folder: Path) -> str:
    """Why ``folder`` could not be made: the first path on the way that is a file, else the OS's reason."""
    for p in (*reversed(folder.parents), folder):
        if p.exists() and not p.is_dir():
            return f"{p} is a file, not a folder"
    return error.strerror or str(error)


@dataclass(frozen=True)
class Candidate:
    """Stashed data that may be an agent's: a namespace of a store, its size, and whose it was."""

    store: str
    namespace: str
    segments: int
    last_stashed: datetime | None
    record: AgentRecord | None

    def line(self) -> str:
        when = f", last stashed {self.last_stashed:%Y-%m-%d}" if self.last_stashed else ""
        who = ""
        if self.record is not None:
            who = f" (agent {brief(self.record.print.name)} at {self.record.print.source})"
        return f"{self.store} namespace {self.namespace}: {self.segments} segments{when}{who}"


def _label(store: StashStore) -> str:
    return str(store.backend.location)


def candidates(
    registry: AgentRegistry, agent: Agent, store: StashStore | None, open_store: Callable[[Path], StashStore]
) -> list[Candidate]:
    """Data that may be ``agent``'s while its own namespace is empty: in ``store`` (a store it was pointed
    at), every other namespace with segments; in the data folder, the default stores of the identities
    the registry finds similar (:meth:`AgentRegistry.similar`). Most similar first."""
    found: list[Candidate] = []
    current = AgentPrint.of(agent)
    if store is not None:
        spaces = [n for n in store.namespaces() if n.segments and n.name != AGENT_PREFIX + agent.identity]
        ids = [n.name[len(AGENT_PREFIX) :] for n in spaces if n.name.startswith(AGENT_PREFIX)]
        records = {r.identity: r for r in store_records(store, ids)}
        for n in spaces:
            rec = records.get(n.name[len(AGENT_PREFIX) :]) if n.name.startswith(AGENT_PREFIX) else None
            found.append(Candidate(_label(store), n.name, n.segments, n.last_stashed, rec))

        def score(c: Candidate) -> float:
            return similarity(current.parts, c.record.print.parts) if c.record is not None else 0.0

        found.sort(key=lambda c: (-score(c), -c.segments, c.namespace))
        return found
    for record in registry.similar(agent):
        path = registry.path.parent / "stash" / f"{record.identity}.db"
        if not path.is_file() or any(c.namespace == AGENT_PREFIX + record.identity for c in found):
            continue
        try:
            with open_store(path) as other:
                got = {n.name: n for n in other.namespaces()}.get(AGENT_PREFIX + record.identity)
        except ContextSieveError:
            continue
        if got is not None and got.segments:
            found.append(Candidate(str(path), got.name, got.segments, got.last_stashed, record))
    return found


def settle(engine: Engine, store: StashStore, *, explicit: bool, registry: AgentRegistry | None = None) -> list[str]:
    """Before ``serve`` uses ``store`` for the agent's namespace: when the namespace is empty and the store
    was given (``--stash``), a record the store keeps of this agent at another path makes its namespace
    the agent's (:meth:`AgentRegistry.resolve_in_store`: a project copied with its own store); else data
    that may be the agent's is named, with the one command that adopts it. The agent's record is kept in
    the store. Returns the lines to print on stderr (``contextsieve: ...``)."""
    agent = engine.agent
    registry = registry or AgentRegistry()
    notes: list[str] = []
    if engine.resolution is not None and engine.resolution.note():
        notes.append(engine.resolution.note())
    mine = {n.name: n for n in store.namespaces()}.get(AGENT_PREFIX + agent.identity)
    if mine is None or not mine.segments:
        found = registry.resolve_in_store(agent, store) if explicit else None
        if found is not None:
            engine.resolution = found
            engine.store.usage_scope = agent.identity
            notes.append(found.note())
        else:
            others = candidates(registry, agent, store if explicit else None, lambda p: _open(p, engine))
            if others:
                where = f" --stash {shlex.quote(_label(store))}" if explicit else ""
                notes.append(
                    f"agent {brief(agent.name)} has nothing stashed under its namespace {AGENT_PREFIX}{agent.identity} "
                    "yet; stashed data that may be this agent's:"
                )
                notes += ["  " + c.line() for c in others[:_MOST]]
                if len(others) > _MOST:
                    notes.append(f"  ... and {len(others) - _MOST} more (contextsieve stash namespaces STORE)")
                best = others[0]
                store_arg = where or (f" --stash {shlex.quote(best.store)}" if best.store else "")
                notes.append(
                    "  to make one this agent's: contextsieve stash adopt "
                    f"{shlex.quote(agent.source)} {shlex.quote(best.namespace)}{store_arg}"
                )
    keep_in_store(agent, store)
    return notes


def _open(path: Path, engine: Engine) -> StashStore:
    return StashStore.open(path, engine.embedder, create=False)


# -- commands --------------------------------------------------------------------------------------------


def namespaces(args: argparse.Namespace) -> None:
    """``contextsieve stash namespaces STORE``: each namespace with its segments, last stash and agent."""
    with StashStore.open(args.store, create=False) as store:
        spaces = store.namespaces()
        ids = [n.name[len(AGENT_PREFIX) :] for n in spaces if n.name.startswith(AGENT_PREFIX)]
        records = {r.identity: r for r in store_records(store, ids)}
        if not spaces:
            print(f"{_label(store)}: no segments")
        for n in spaces:
            when = f"{n.last_stashed:%Y-%m-%d %H:%M}" if n.last_stashed else "-"
            rec = records.get(n.name[len(AGENT_PREFIX) :]) if n.name.startswith(AGENT_PREFIX) else None
            who = f"  agent {brief(rec.print.name)} at {rec.print.source}" if rec is not None else ""
            print(f"{n.name}\t{n.segments} segments\tlast stashed {when}{who}")


def rename(args: argparse.Namespace) -> None:
    """``contextsieve stash rename STORE OLD NEW``: every segment of namespace OLD moved to NEW, at once."""
    with StashStore.open(args.store, create=False) as store:
        n = store.rename_namespace(args.old, args.new)
    print(f"moved {n} segments from {args.old} to {args.new}")


def adopt(args: argparse.Namespace) -> None:
    """``contextsieve stash adopt AGENT NAMESPACE [--stash STORE]``: make NAMESPACE the agent's, in one
    step that moves or loses nothing. An agent namespace ``agent:<identity>``: the agent takes that
    identity (the registry's record of its file is changed; its stashed segments in every store, its
    learned examples and its tools' names come with it). Any other namespace, or any namespace for a
    file that declares its ``id``: its segments move into the agent's namespace of STORE (default: the
    agent's default store) in one transaction."""
    registry = AgentRegistry()
    engine = Engine.from_file(args.agent, registry=registry)
    agent = engine.agent
    target = args.namespace
    identity = target[len(AGENT_PREFIX) :] if target.startswith(AGENT_PREFIX) else None
    if identity == agent.identity:
        print(f"{target} is already agent {agent.name!r}'s namespace")
        return
    if identity and not agent.agent_id:
        registry.adopt(agent, identity)
        if args.stash:
            with StashStore.open(args.stash, engine.embedder, create=False) as store:
                keep_in_store(agent, store)
        print(f"agent {agent.name!r} ({agent.source}) is now {identity}: its stash, learned examples and tool names")
        return
    location = args.stash or str(default_store(registry, agent.identity))
    with StashStore.open(location, engine.embedder, create=args.stash is None) as store:
        n = store.rename_namespace(target, AGENT_PREFIX + agent.identity)
        keep_in_store(agent, store)
    print(f"moved {n} segments of {target} into {AGENT_PREFIX}{agent.identity} ({location}), agent {agent.name!r}")


def print_notes(notes: list[str]) -> None:
    for line in notes:
        print(("contextsieve: " if not line.startswith("  ") else "") + line, file=sys.stderr, flush=True)
