"""Who an agent is over time: what tells one agent from another when its file is renamed, moved, copied,
linked or edited, without writing anything into the file.

An agent's data (its stash namespace ``agent:<identity>``, its default stash store, its learned tool
examples and the names its tools were offered under) is keyed on its **identity**. The identity is:

- the ``id`` the agent file declares (top-level ``id:``), when it does: the same everywhere, whatever
  happens to the file (the way to tie copies together, e.g. one agent run in many containers);
- otherwise the identity first given to the agent at this place, found again through the records the
  registry (:mod:`contextsieve.agent.registry`, in the data folder) and the stash stores keep of each
  agent: where its file was (path and file id), its name, and a print of what it is made of
  (:class:`AgentPrint`: a digest per system prompt, rule, reference and server; not the name, the path or
  the settings).

How a record is found again (:func:`match`; the numbers are :data:`SAME_FILE_MIN` and :data:`MOVED_MIN`):

1. **the same file**: a record of this path (a symlink is followed) or of this file (its device and inode:
   a hard link, a rename), whose parts this agent shares at least half of: edits in place (the name too)
   keep the identity; another agent written to the same path (a container's ``/app/agent.yaml`` holding
   another agent) does not share parts and gets its own. A file found by its inode at another path
   while the record's path is gone, under another name, needs 80% of the parts, as a moved one: a file
   system gives a deleted file's inode to the next file made, which may be another agent with the same
   servers.
2. **moved**: a record of the same name whose path no longer exists, whose parts this agent shares at
   least 80% of: a move of its folder, or of the file to another file system.
3. **a store's record** (only for an agent the registry does not know, with a store it was pointed at:
   :func:`match` with ``anywhere``): a record in that store of the same name sharing 80% of the parts,
   wherever its file was: a project copied with its own ``--stash`` file, or one agent deployed at several
   paths on one shared store.

The parts are digests of the system prompt, each rule and reference (name and text) and each server (its
name, type and command file name or URL); two agents made of nothing (no prompt, rules, references or
servers) are told apart by their names alone.

Anything else is a new agent: its identity is born (:func:`birth`) as its name made file-safe, ``-`` and
10 hex digits of the SHA-256 of its path (what every agent file's identity was before records were kept,
so an existing agent keeps its data), or, when another agent already holds that one (another agent at
the same path), of its path and its parts.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from contextsieve.errors import InputError, brief

if TYPE_CHECKING:
    from contextsieve.agent.agent import Agent

__all__ = [
    "AgentPrint",
    "AgentRecord",
    "Match",
    "SAME_FILE_MIN",
    "MOVED_MIN",
    "ID_PATTERN",
    "birth",
    "file_id",
    "match",
    "path_identity",
    "similarity",
    "stem",
]

#: Share of its parts an agent edited in place keeps with its record, at least (0.5).
SAME_FILE_MIN = 0.5
#: Share of its parts an agent found at another path keeps with its record, at least (0.8).
MOVED_MIN = 0.8
#: What a declared ``id`` may be: 1-100 ASCII letters, digits, ``.``, ``_`` and ``-``, starting with a
#: letter or digit.
ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


def stem(name: str) -> str:
    """An agent name made file-safe: runs of other characters one ``-``, at most 60 characters."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip(".-")[:60] or "agent"


def _digest(*fields: str) -> str:
    return hashlib.sha256("\0".join(fields).encode("utf-8", "surrogatepass")).hexdigest()


def path_identity(name: str, source: str) -> str:
    """``<stem>-<10 hex of the SHA-256 of the path>``: a file's first identity (and every file's before
    records were kept)."""
    return f"{stem(name)}-{_digest(source)[:10]}"


def file_id(source: str) -> str:
    """``"<device>:<inode>"`` of the file at ``source`` (what two hard links share); ``""`` when unknown."""
    try:
        st = os.stat(source)
    except (OSError, ValueError):
        return ""
    return f"{st.st_dev}:{st.st_ino}"


@dataclass(frozen=True)
class AgentPrint:
    """What an agent looks like to the records: its name, where its file is, and what it is made of.

    Attributes:
        name: its declared name (or its file's stem).
        source: its file, resolved (``""``: made in code).
        file_id: ``"<device>:<inode>"`` of that file (``""``: unknown).
        parts: 16-hex digests of its system prompt, each rule (name and text), each reference and each
            MCP server's name: what it is made of, not its name, path or settings.
    """

    name: str
    source: str
    file_id: str
    parts: frozenset[str]

    @classmethod
    def of(cls, agent: Agent) -> AgentPrint:
        """The print of ``agent`` now."""
        parts = {_digest("rule", r.name, r.text)[:16] for r in agent.rules}
        parts |= {_digest("reference", r.name, r.text)[:16] for r in agent.references}
        parts |= {_digest("server", name, *_endpoint(s.config))[:16] for name, s in agent.servers.items()}
        if agent.system_prompt.strip():
            parts.add(_digest("prompt", agent.system_prompt.strip())[:16])
        return cls(agent.name, agent.source, file_id(agent.source) if agent.source else "", frozenset(parts))

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "source": self.source, "file_id": self.file_id, "parts": sorted(self.parts)}

    @classmethod
    def from_json(cls, d: Any) -> AgentPrint:
        """Read back :meth:`to_json`; :class:`InputError` for anything else."""
        try:
            parts = d["parts"]
            if not isinstance(parts, list) or not all(isinstance(p, str) for p in parts):
                raise TypeError("parts")
            fields = (d["name"], d["source"], d["file_id"])
            if not all(isinstance(f, str) for f in fields):
                raise TypeError("fields")
            return cls(*fields, frozenset(parts))
        except (KeyError, TypeError) as e:
            raise InputError(f"not an agent record: {brief(d)}") from e


def _endpoint(config: Any) -> tuple[str, str]:
    """What a server is, not where the project lies: its type and its command's file name (a command
    given as a path moves with the project) or its URL."""
    config = config if isinstance(config, dict) else {}
    command = config.get("command")
    what = os.path.basename(command) if isinstance(command, str) else str(config.get("url") or config.get("tool") or "")
    return str(config.get("type") or config.get("transport") or ""), what


def similarity(a: frozenset[str], b: frozenset[str]) -> float:
    """The share of parts two prints have in common (Jaccard: shared / either); 1.0 for two empty ones."""
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


@dataclass(frozen=True)
class AgentRecord:
    """What a registry or a store keeps of an agent at one place.

    Attributes:
        identity: the identity the agent had there.
        print: its :class:`AgentPrint` when last used there.
        last_used: when, in seconds since the epoch.
    """

    identity: str
    print: AgentPrint
    last_used: float


@dataclass(frozen=True)
class Match:
    """A record found for an agent: which, how (``"same file"``, ``"moved"`` or ``"store"``), and the
    share of parts in common."""

    record: AgentRecord
    how: str
    similarity: float


def _best(found: list[tuple[float, AgentRecord]]) -> tuple[float, AgentRecord] | None:
    """The most similar, then the latest used, then the smallest identity (a stable order)."""
    return min(found, key=lambda f: (-f[0], -f[1].last_used, f[1].identity)) if found else None


def match(
    current: AgentPrint,
    records: Sequence[AgentRecord],
    *,
    exists: Callable[[str], bool] = os.path.exists,
    anywhere: bool = False,
) -> Match | None:
    """The record that is ``current``'s, by the module's rules (1: the same file, 2: moved; with
    ``anywhere``, 3: a store's record wherever its file was); ``None``: a new agent. ``exists`` tells
    whether a record's path still exists (rule 2)."""
    same: list[tuple[float, AgentRecord]] = []
    moved: list[tuple[float, AgentRecord]] = []
    for r in records:
        s = similarity(current.parts, r.print.parts)
        named = r.print.name == current.name
        if r.print.source == current.source or (current.file_id and r.print.file_id == current.file_id):
            # a file id whose path is gone: renamed, or a new file given a freed inode (another agent):
            # a renamed agent that is renamed inside too keeps its identity only as a moved one would
            reused = r.print.source != current.source and not named and not exists(r.print.source)
            if s >= (MOVED_MIN if reused else SAME_FILE_MIN) and (named or (current.parts and r.print.parts)):
                same.append((s, r))  # two agents made of nothing are told apart by their names alone
        elif named and s >= MOVED_MIN and (anywhere or not r.print.source or not exists(r.print.source)):
            moved.append((s, r))
    best = _best(same)
    if best is not None:  # found by its file id at a path that is gone: the file was renamed
        renamed = best[1].print.source != current.source and not exists(best[1].print.source)
        return Match(best[1], "moved" if renamed else "same file", best[0])
    best = _best(moved)
    if best is not None:
        return Match(best[1], "store" if anywhere else "moved", best[0])
    return None


def birth(current: AgentPrint, taken: Callable[[str], bool]) -> str:
    """A new agent's identity: :func:`path_identity` unless ``taken`` says another agent holds it, then
    the same with the parts in the digest (then a counter, should that be taken too)."""
    first = path_identity(current.name, current.source)
    if not taken(first):
        return first
    salted = f"{stem(current.name)}-{_digest(current.source, *sorted(current.parts))[:10]}"
    candidate, n = salted, 1
    while taken(candidate):
        n += 1
        candidate = f"{salted}-{n}"
    return candidate


def declared_id(value: object, where: str) -> str:
    """A declared ``id`` checked (:data:`ID_PATTERN`); :class:`InputError` naming ``where`` otherwise."""
    if not isinstance(value, str) or not ID_PATTERN.fullmatch(value):
        raise InputError(
            f"{where}: must be 1-100 ASCII letters, digits, '.', '_' or '-' starting with a letter or digit, "
            f"got {brief(value)}"
        )
    return value
