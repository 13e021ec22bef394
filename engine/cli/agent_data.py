"""An agent's data over time on the command line: the store ``serve`` opens for an agent, what it says when
the agent's namespace is empty while data that may be the agent's exists elsewhere, and the commands that
list a store's namespaces (``contextsieve stash namespaces``), rename one (``stash rename``) and make one an
agent's (``stash adopt``). :mod:`contextsieve.agent.identity` says how an agent is found again."""

from __future__ import annotations

import argparse
import difflib
import os
import shlex
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from contextsieve.agent.agent import Agent
from contextsieve.agent.example_records import Example
from contextsieve.agent.identity import AgentPrint, AgentRecord, declared_id, similarity
from contextsieve.agent.items import ItemKey
from contextsieve.agent.registry import AgentRegistry, keep_in_store, store_records
from contextsieve.agent.usage import KEEP_PER_TOOL, UsageLog
from contextsieve.agent.usage_file import KINDS
from contextsieve.engine import Engine, default_history_path
from contextsieve.errors import (
    AgentRegistryError,
    ContextSieveError,
    InputError,
    StashError,
    StashNotFoundError,
    brief,
    check_text,
)
from contextsieve.fileio import DATA_ENV
from contextsieve.retrieval.cache import read_only
from contextsieve.stash.store import StashStore

__all__ = [
    "AGENT_PREFIX",
    "Candidate",
    "adopt",
    "candidates",
    "default_store",
    "history",
    "history_agents",
    "history_of",
    "history_tool",
    "make_stash_folder",
    "namespaces",
    "rename",
    "serve_store",
    "settle",
]

#: The prefix of an agent's own stash namespace (``agent:<identity>``).
AGENT_PREFIX = "agent:"
#: Most candidates ``serve`` names on stderr.
_MOST = 5


def default_store(registry: AgentRegistry, identity: str) -> Path:
    """The embedded store ``serve`` uses without ``--stash``: ``stash/<identity>.db`` in the data folder
    (one per agent, :meth:`AgentRegistry.store_path`); the folder is made when missing. :class:`StashError`
    when it cannot be (a file stands where a folder should, a folder this user may not write)."""
    path = registry.store_path(identity)
    make_stash_folder(path.parent)
    return path


def make_stash_folder(folder: Path) -> None:
    """Make ``folder`` (the data folder's ``stash``) when missing; :class:`StashError` naming why not,
    with what to do: move a file that stands on the way, or use another folder."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:  # the data folder or its stash folder is a file, or may not be written
        blocked = next((p for p in (*reversed(folder.parents), folder) if p.exists() and not p.is_dir()), None)
        why = f"{blocked} is a file, not a folder; move that file away, set" if blocked else f"{e.strerror or e}; set"
        raise StashError(
            f"cannot use the stash folder {folder}: {why} ${DATA_ENV} to a folder this user may write, or pass "
            "--stash PATH or --no-stash"
        ) from e


def serve_store(engine: Engine, location: str, *, explicit: bool) -> tuple[StashStore | None, list[str]]:
    """The store ``serve`` uses at ``location`` (``--stash`` when ``explicit``, else the agent's default
    store), opened for writing, and the lines to print on stderr. Where it may not be written (a
    read-only data folder or file: :func:`~contextsieve.retrieval.cache.read_only`), a store that exists
    is read (retrieval works; the stash tools that write answer with the error), and a default store that
    does not exist is left out (serve goes on without the stash tools), each with a warning line.

    Raises:
        StashError: anything else (a file on the way, a damaged store), or a ``--stash`` store that does
            not exist and may not be made.
    """
    path = Path(location)
    try:
        if not explicit:
            make_stash_folder(path.parent)
        return StashStore.open(location, engine.embedder), []
    except StashError as e:
        if not read_only(e, path):
            raise
        without = [f"warning: {e}; serving without the stash tools"]
        if not os.path.isfile(path):
            if explicit:
                raise
            return None, without
        try:
            store = StashStore.open(location, engine.embedder, create=False)
        except StashNotFoundError:  # an empty file: no store yet, and none can be made
            if explicit:
                raise
            return None, without
        other = "" if explicit else " (pass --stash PATH to a store this user may write)"
        return store, [
            f"warning: {e}; the store is read as it is, and the stash tools that write answer with an error{other}"
        ]


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
        path = registry.store_path(record.identity)
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
    """Before ``serve`` uses ``store`` for the agent's namespace. For an agent the registry did not know
    (a new identity) and a store given with ``--stash``: a namespace of that store that is another agent's
    gives this one an identity of its own (:meth:`AgentRegistry.claim_in_store`), and a record the store
    keeps of this agent at another path makes that namespace the agent's
    (:meth:`AgentRegistry.resolve_in_store`: a project copied with its own store). When the agent's
    namespace is still empty, data that may be its is named with the one command that adopts it. The
    agent's record is kept in the store. A registry that cannot be used changes nothing here (said in the
    notes). Returns the lines to print on stderr (``contextsieve: ...``)."""
    agent = engine.agent
    registry = registry or AgentRegistry()
    notes: list[str] = []
    found = engine.resolution
    try:
        if explicit and found is not None and found.how == "new":
            for step in (registry.claim_in_store, registry.resolve_in_store):
                moved = step(agent, store)
                if moved is not None:
                    engine.resolution = found = moved
                    engine.store.usage_scope = agent.identity
        if found is not None and found.note():
            notes.append(found.note())
        if not _holds(store, agent.identity) and not store.backend.read_only:  # adopting would write it
            notes += _candidate_notes(registry, engine, store, explicit)
    except AgentRegistryError as e:
        notes.append(f"{e}; the agent's data elsewhere is not looked for")
    if not store.backend.read_only:
        keep_in_store(agent, store)
    return notes


def _holds(store: StashStore, identity: str) -> bool:
    got = {n.name: n for n in store.namespaces()}.get(AGENT_PREFIX + identity)
    return got is not None and got.segments > 0


def _candidate_notes(registry: AgentRegistry, engine: Engine, store: StashStore, explicit: bool) -> list[str]:
    """The lines naming data that may be the agent's, and the command that adopts the best of it."""
    agent = engine.agent
    others = candidates(registry, agent, store if explicit else None, lambda p: _open(p, engine))
    if not others:
        return []
    notes = [
        f"agent {brief(agent.name)} has nothing stashed under its namespace {AGENT_PREFIX}{agent.identity} yet; "
        "stashed data that may be this agent's:"
    ]
    notes += ["  " + c.line() for c in others[:_MOST]]
    if len(others) > _MOST:
        notes.append(f"  ... and {len(others) - _MOST} more (contextsieve stash namespaces STORE)")
    best = others[0]
    command = f"contextsieve stash adopt {_quote(agent.source)} {_quote(best.namespace)}"
    if explicit:
        command += f" --stash {_quote(_label(store))}"
    elif agent.agent_id or not best.namespace.startswith(AGENT_PREFIX):
        command += f" --from {_quote(best.store)}"  # copied into the agent's own store
    notes.append(f"  to make it this agent's: {command}")
    return notes


def _quote(text: str) -> str:
    """A shell word for ``text`` that stays on one line (``$'...'`` for a newline or other control)."""
    if text.isprintable():
        return shlex.quote(text)
    return "$'" + "".join(c if c.isprintable() and c not in "'\\" else f"\\x{ord(c):02x}" for c in text) + "'"


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
        if not _holds(store, args.old[len(AGENT_PREFIX) :]) and not any(n.name == args.old for n in store.namespaces()):
            raise InputError(
                f"{_label(store)} has no namespace {brief(args.old)} (contextsieve stash namespaces STORE)"
            )
        if args.old == args.new:
            raise InputError("the old and the new namespace are the same")
        n = store.rename_namespace(args.old, args.new)
    print(f"moved {n} segments from {args.old} to {args.new}")


def adopt(args: argparse.Namespace) -> None:
    """``contextsieve stash adopt AGENT NAMESPACE [--stash STORE] [--from SOURCE]``: make NAMESPACE the
    agent's, moving or losing nothing.

    An agent namespace ``agent:<identity>`` the agent registry knows (or that has a default store, or
    that STORE holds), for an agent file without a declared ``id``: the agent takes that identity (the
    registry's record of its file is changed; its stashed segments in every store, its learned examples
    and its tools' names come with it). Any other namespace, or any namespace for a file that declares
    its ``id``: its segments go into the agent's namespace of the agent's store (STORE, default: its
    default store), renamed in one transaction when they are in that store, else copied from SOURCE
    (left as it was); for an agent namespace, the examples learned under it are moved or copied alike."""
    registry = AgentRegistry()
    engine = Engine.from_file(args.agent, registry=registry)
    agent = engine.agent
    target: str = args.namespace
    identity = target[len(AGENT_PREFIX) :] if target.startswith(AGENT_PREFIX) else None
    if identity == agent.identity:
        print(f"{target} is already agent {agent.name!r}'s namespace")
        return
    if identity is not None and not agent.agent_id and args.source is None:
        declared_id(identity, "the namespace's identity")
        in_store = False
        if args.stash:
            with StashStore.open(args.stash, engine.embedder, create=False) as store:
                in_store = _holds(store, identity)
        if not in_store and not registry.known(identity) and identity not in engine.store.usage().tally():
            raise InputError(
                f"no agent {target} is known: the agent registry has no record of it, it has no default store "
                "nor learned history, and "
                + ("the --stash store holds no segments under it" if args.stash else "no --stash STORE was given")
                + " (contextsieve stash namespaces STORE lists a store's)"
            )
        before = agent.identity
        registry.adopt(agent, identity)
        moved = engine.store.usage().rescope(before, identity)  # what it learned as before comes along
        if args.stash:
            with StashStore.open(args.stash, engine.embedder, create=False) as store:
                keep_in_store(agent, store)
        print(
            f"agent {agent.name!r} ({agent.source}) is now {identity}: its stash, learned examples and tool names"
            + (f" ({moved} recorded requests it had learned as {before} kept)" if moved else "")
        )
        return
    location = args.stash or str(default_store(registry, agent.identity))
    mine = AGENT_PREFIX + agent.identity
    copied = args.source is not None and not _same_store(args.source, location)
    # an agent's namespace: what that agent learned comes along, even with nothing stashed
    learned = identity is not None and identity in engine.store.usage().tally()
    if not copied and args.stash is None and not Path(location).exists() and not learned:  # made by no refusal
        raise InputError(f"{location} holds no segments under {brief(target)}: the agent has no store there yet")
    with StashStore.open(location, engine.embedder, create=args.stash is None) as store:
        held = store if not copied else StashStore.open(args.source, engine.embedder, create=False)
        try:
            if not any(n.name == target and n.segments for n in held.namespaces()):
                if not learned:
                    raise InputError(f"{args.source if copied else location} holds no segments under {brief(target)}")
                done = f"no segments of {target} to bring ({args.source if copied else location})"
            elif not copied:
                n = store.rename_namespace(target, mine)
                done = f"moved {n} segments of {target} into {mine} ({location})"
            else:
                from contextsieve.stash.transfer import migrate

                r = migrate(held, store, session=target, into=mine, show_progress=True)
                done = f"copied {r.written} segments of {target} in {args.source} into {mine} ({location})"
        finally:
            if held is not store:
                held.close()
        keep_in_store(agent, store)
    if identity is not None:
        n = engine.store.usage().rescope(identity, agent.identity, keep=copied)
        done += f"; {n} recorded requests it had learned {'copied' if copied else 'moved'}" if n else ""
    print(f"{done}, agent {agent.name!r}")


def _same_store(a: str, b: str) -> bool:
    """Whether the stores ``a`` and ``b`` are one: the same URI, or paths of the same file."""
    if a == b:
        return True
    if "://" in a or "://" in b:
        return False
    try:
        return Path(a).resolve() == Path(b).resolve()
    except (OSError, RuntimeError):  # a link loop: not the same as anything else
        return False


def history(args: argparse.Namespace) -> None:
    """``contextsieve history [AGENT] [--forget] [--tool TOOL]``: what learning from use keeps for the agent
    (per tool: examples and misses) and where; ``--forget`` deletes it (one tool's with ``--tool``: a tool
    of the agent, or one its history holds records of, named as by :func:`history_tool`). AGENT is an agent
    file, or ``agent:<identity>`` for an agent whose file is gone (:func:`history_of`); without it, every
    agent the history holds records of is listed (:func:`history_agents`)."""
    if args.agent is None:
        if args.forget or args.tool is not None:
            raise InputError(
                "name the agent: an agent file, or agent:<identity> for one whose file is gone (`contextsieve "
                "history` lists the agents the history holds records of)"
            )
        history_agents()
        return
    if not args.agent.strip():  # not the current folder's agent by accident
        raise InputError("AGENT is empty: name an agent file, or agent:<identity> (`contextsieve history` lists them)")
    if args.agent.startswith(AGENT_PREFIX) and not os.path.lexists(args.agent):
        history_of(args.agent[len(AGENT_PREFIX) :], args.tool, forget=args.forget)
        return
    engine = Engine.from_file(Path(args.agent), registry=AgentRegistry())
    usage = engine.store.usage()
    scope = engine.store.usage_scope
    recorded: dict[str, dict[ItemKey, Sequence[Example]]] = {kind: {} for kind in KINDS}
    if args.tool is not None or not args.forget:  # what is recorded, read once (forgetting it all needs no look)
        recorded = usage.all_records(scope, KEEP_PER_TOOL)
    examples = {k: len(v) for k, v in recorded["examples"].items()}
    misses = {k: len(v) for k, v in recorded["misses"].items()}
    tool = None if args.tool is None else history_tool(engine.agent, args.tool, set(examples) | set(misses))
    where = f"{usage.path}" if usage.path is not None else "memory"
    if args.forget:
        n = usage.forget(scope, tool, None)
        whose = f"tool {tool}" if tool else f"agent {engine.agent.name!r}"
        print(f"forgot {n} recorded requests of {whose} ({where})")
        return
    texts = sum(e.text is not None for kind in KINDS for kept in recorded[kind].values() for e in kept)
    _print_history(f"agent {engine.agent.name!r} ({scope})", where, texts, tool, examples, misses)


def _print_history(
    whose: str, where: str, texts: int, tool: ItemKey | None, examples: dict[ItemKey, int], misses: dict[ItemKey, int]
) -> None:
    kept = f"the text of {texts} recorded requests (kept with --remember-requests)" if texts else "no request text"
    print(f"{whose}: history in {where}, holding {kept}")
    for key in sorted(set(examples) | set(misses), key=str):
        if tool is None or key == tool:
            print(f"{key}\t{examples.get(key, 0)} examples\t{misses.get(key, 0)} misses")


def _history_log() -> UsageLog:
    """The data folder's history file, as every engine of it keeps it."""
    return UsageLog(default_history_path())


def _registry_records() -> list[AgentRecord]:
    """The agent registry's records (none, with a line on stderr, when it cannot be read)."""
    try:
        return AgentRegistry().records()
    except AgentRegistryError as e:
        print_notes([f"warning: {e}; the agents' files are not named"])
        return []


def _whose(identity: str, records: list[AgentRecord]) -> str:
    """Who ``identity`` is by the agent registry's ``records``: its name and file (its latest record),
    and whether the file is gone or another agent has been used at its path since."""
    mine = [r for r in records if r.identity == identity]
    if not mine:
        return "no agent file known (an agent made in code, or one of another data folder's registry)"
    r = max(mine, key=lambda r: r.last_used)
    note = ""
    if not os.path.lexists(r.print.source):
        note = " (the file is gone)"
    else:
        later = [o for o in records if o.print.source == r.print.source and o.last_used > r.last_used]
        if later:
            note = f" (another agent's file since: {_shown(max(later, key=lambda o: o.last_used).identity)})"
    return f"agent {brief(r.print.name)} at {r.print.source}{note}"


def _shown(identity: str) -> str:
    """``agent:<identity>`` as a shell word on one line (:func:`_quote`), to paste into ``history``."""
    return _quote(AGENT_PREFIX + identity)


def _day(at: float) -> str:
    """The day of the time ``at`` (seconds since the epoch), or ``an unknown day`` for one no calendar
    holds (a damaged record's)."""
    try:
        return datetime.fromtimestamp(at).date().isoformat() if at > 0 else "an unknown day"
    except (OverflowError, OSError, ValueError):
        return "an unknown day"


def history_agents() -> None:
    """``contextsieve history``: every agent the data folder's history holds records of, whatever model
    made them, with what the agent registry knows of it (its name and file, and whether the file is gone),
    so that the history of an agent whose file was deleted can be named and forgotten."""
    log = _history_log()
    held = log.tally()
    if not held:
        print(f"no agent has a history in {log.path}")
        return
    records = _registry_records()
    print(f"history in {log.path}: {len(held)} agent{'s' if len(held) != 1 else ''}")
    for scope in sorted(held):
        tools = held[scope].values()
        examples, misses = sum(t.examples for t in tools), sum(t.misses for t in tools)
        last = _day(max(t.newest for t in tools))
        print(f"{_shown(scope)}\t{examples} examples\t{misses} misses\tlast {last}\t{_whose(scope, records)}")
    print("contextsieve history agent:<identity> [--forget] shows (or forgets) one agent's")


def history_of(identity: str, tool_text: str | None, *, forget: bool) -> None:
    """``contextsieve history agent:<identity> [--forget] [--tool TOOL]``: an agent's history named by the
    identity it is kept under (``contextsieve history`` lists them), for an agent whose file is gone. TOOL
    is ``SERVER:TOOL``, ``tool:SERVER:TOOL`` or a name the agent's tools were offered under, of a tool the
    history holds records of. :class:`InputError` for an identity the history holds nothing of (with the
    likely one), or such a tool."""
    check_text(identity, "the identity")
    log = _history_log()
    everyone = log.tally()
    held = everyone.get(identity, {})
    if not held:
        close = difflib.get_close_matches(identity, list(everyone), n=1)
        hint = f" (did you mean {_shown(close[0])}?)" if close else ""
        raise InputError(
            f"the history {log.path} holds no records of {brief(AGENT_PREFIX + identity)}{hint}; "
            "`contextsieve history` lists the agents it holds"
        )
    tool = None
    if tool_text is not None:
        try:
            offered = {name: key for key, name in AgentRegistry().given_names(identity).items()}
        except AgentRegistryError:
            offered = {}
        if not tool_text.strip():
            raise InputError(
                "--tool is empty: name a tool as SERVER:TOOL or by the name offered to the model (SERVER_TOOL) "
                f"(`contextsieve history {_shown(identity)} --forget` forgets every tool's)"
            )
        tool = _recorded_key(tool_text, offered.get)
        if tool is None or tool not in held:
            names = [f"{k.server}:{k.name}" for k in held] + [n for n, k in offered.items() if k in held]
            close = difflib.get_close_matches(tool_text, [n for n in names if n != tool_text], n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise InputError(
                f"--tool {brief(tool_text)}: the history of {brief(AGENT_PREFIX + identity)} holds no records of "
                f"such a tool{hint}; name it as SERVER:TOOL or by the name offered to the model (SERVER_TOOL)"
            )
    whose = _shown(identity) if tool is None else f"tool {tool} of {_shown(identity)}"
    if forget:
        n = log.forget(identity, tool, None)
        left = log.tally().get(identity, {}) if not n else {}
        if left and (tool is None or tool in left):  # still listed, yet none matched: a damaged stored name
            raise InputError(
                f"the records of {whose} are stored under a damaged name (bytes that are not valid text), "
                f"which no command can name; to start anew, move {log.path} aside (it holds "
                "the learned history of every agent of its data folder)"
            )
        print(f"forgot {n} recorded requests of {whose} ({log.path})")
        return
    texts = sum(t.texts for k, t in held.items() if tool is None or k == tool)
    whose = f"{_shown(identity)}, {_whose(identity, _registry_records())}"
    examples = {k: t.examples for k, t in held.items() if t.examples}
    misses = {k: t.misses for k, t in held.items() if t.misses}
    _print_history(whose, str(log.path), texts, tool, examples, misses)


def history_tool(agent: Agent, text: str, recorded: set[ItemKey]) -> ItemKey:
    """The tool ``history --tool`` names: ``SERVER:NAME``, ``tool:SERVER:NAME`` or the name offered to the
    model (``SERVER_NAME``), of a tool the agent has (:func:`~contextsieve.session.outcomes.tool_keys`, what
    ``eval`` and ``record_tool_calls`` read) or of one in ``recorded`` (a tool the agent no longer has whose
    records are still kept). :class:`InputError` for anything else, with the likely name."""
    from contextsieve.session.outcomes import tool_keys

    how = "name a tool as SERVER:TOOL or by the name offered to the model (SERVER_TOOL)"
    if not text.strip():
        raise InputError(f"--tool is empty: {how} (`contextsieve history AGENT --forget` forgets every tool's)")
    try:
        return tool_keys(agent, [text], "--tool")[0]
    except ContextSieveError:
        pass
    key = _recorded_key(text, agent.tool_names().gone)
    if key is not None and key in recorded:
        return key
    named = [f"{t.key.server}:{t.key.name}" for t in agent.tools] + list(agent.tool_names())
    named += [f"{k.server}:{k.name}" for k in recorded if k.server is not None]
    close = difflib.get_close_matches(text, list(dict.fromkeys(named)), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise InputError(
        f"--tool {brief(text)}: the agent has no such tool and its history holds no records of one{hint}; "
        f"{how}: `contextsieve tools AGENT` lists the agent's tools, `contextsieve history AGENT` the recorded ones"
    )


def _recorded_key(text: str, offered: Callable[[str], ItemKey | None]) -> ItemKey | None:
    """The tool key ``text`` names in the forms :func:`history_tool` reads, when it is one: ``offered``
    gives the tool a name was offered under (a tool the agent no longer has included), whether or not
    the agent has that tool."""
    from contextsieve.agent.items import ItemKind

    if ":" not in text:
        return offered(text)
    if text.count(":") == 1 and text.split(":")[0] not in {k.value for k in ItemKind}:
        text = "tool:" + text
    try:
        key = ItemKey.parse(text)
    except InputError:
        return None
    return key if key.kind is ItemKind.TOOL and key.server else None


def print_notes(notes: list[str]) -> None:
    for line in notes:
        print(("contextsieve: " if not line.startswith("  ") else "") + line, file=sys.stderr, flush=True)
