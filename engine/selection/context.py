"""The request context: which items a request used, how each got there, and why (scores)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from contextsieve.agent.items import IncludeMode, ItemKey, ItemKind

__all__ = ["ContextEntry", "StashedEntry", "Dropped", "RequestContext", "shown_order"]

_MODE_ORDER = {
    IncludeMode.ALWAYS: 0,
    IncludeMode.MANUAL: 1,
    IncludeMode.AGENT: 2,
    IncludeMode.EXPANSION: 3,
    IncludeMode.STASH: 4,
}
_PLURAL = {ItemKind.RULE: "rules", ItemKind.REFERENCE: "references", ItemKind.TOOL: "tools"}


@dataclass(frozen=True)
class ContextEntry:
    """One item of a request context.

    Attributes:
        key: the item.
        mode: how it got in: ``always`` / ``manual`` (from the session) or ``agent`` (semantic search).
        score: similarity for ``agent`` items (max over query chunks), else ``None``.
        chunk: index of the item's chunk that gave the score.
        query_chunk: index of the query chunk that gave the score.
        priority: the item's priority level (tools: ``None``).
        via: how a searched item got in: ``"query"`` (the max-pooled ranking), ``"min-representation"``
            (promoted for an unrepresented query sentence), ``"expansion"``, ``"task"`` (a tool of the
            task's first message a later step carries, see ``AgentSettings.task_tools``), ``"companion"`` (a
            tool the history used next to one of the request's best tools, ``pulled_by``; see
            ``AgentSettings.companion_tools``), or ``"tool-result"``
            (proposed by :meth:`~contextsieve.session.session.Session.expand_from`); ``None`` for session items.
        pulled_by: for expansion items, the selected item whose chunk matched; for companions, the tool
            the history used them with.
    """

    key: ItemKey
    mode: IncludeMode
    score: float | None = None
    chunk: int | None = None
    query_chunk: int | None = None
    priority: int | None = None
    via: str | None = None
    pulled_by: ItemKey | None = None

    def to_dict(self) -> dict[str, Any]:
        """The reference system's ``RequestContextItem`` (``type``, ``name``, ``serverName`` for tools,
        ``includeMode``, ``similarityScore`` when searched) with contextsieve's extras under
        ``contextsieve`` (``query_chunk``, ``chunk``, ``via``, ``pulled_by``, ``priority``)."""
        key = self.key
        d: dict[str, Any] = {"type": key.kind.value, "name": key.name}
        if key.kind is ItemKind.TOOL:
            d["serverName"] = key.server
        d["includeMode"] = self.mode.value
        if self.score is not None:
            d["similarityScore"] = self.score
        extras = {
            k: v
            for k, v in (
                ("query_chunk", self.query_chunk),
                ("chunk", self.chunk),
                ("via", self.via),
                ("pulled_by", str(self.pulled_by) if self.pulled_by is not None else None),
                ("priority", self.priority),
            )
            if v is not None
        }
        if extras:
            d["contextsieve"] = extras
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ContextEntry":
        """Read :meth:`to_dict`'s shape, a request context item of the reference system (its chat
        files keep them on assistant messages), or contextsieve's earlier ``key`` / ``mode`` shape."""
        if "key" in d:  # contextsieve before the reference shape
            pulled = ItemKey.parse(d["pulled_by"]) if d.get("pulled_by") else None
            return cls(
                ItemKey.parse(d["key"]),
                IncludeMode(d["mode"]),
                d.get("score"),
                d.get("chunk"),
                d.get("query_chunk"),
                d.get("priority"),
                d.get("via"),
                pulled,
            )
        kind = ItemKind(d["type"])
        name = d["name"]
        if not isinstance(name, str):
            raise TypeError(f"name must be a string, got {type(name).__name__}")
        key = ItemKey(kind, name, str(d["serverName"])) if kind is ItemKind.TOOL else ItemKey(kind, name)
        x = d.get("contextsieve") or {}
        if not isinstance(x, dict):
            raise TypeError("contextsieve extras must be an object")
        score = d.get("similarityScore")
        return cls(
            key,
            IncludeMode(d.get("includeMode", "agent")),
            float(score) if score is not None else None,
            x.get("chunk"),
            x.get("query_chunk"),
            x.get("priority"),
            x.get("via"),
            ItemKey.parse(x["pulled_by"]) if x.get("pulled_by") else None,
        )


@dataclass(frozen=True)
class StashedEntry:
    """A stashed segment a session retrieved into a request (include mode ``stash``).

    Attributes:
        segment_id: the segment in the session's stash.
        score: its combined ranking score (similarity, keyword term and time decays; see
            :mod:`contextsieve.stash.ranking`); requests order and cut stashed segments by it.
        similarity: its dense cosine similarity to the message (best pair of query sentence and chunk).
        segment_type: the segment's type (``message``, ``code_block``, ...).
        tokens: its model tokens (the stash's count).
        timestamp: when its content was created (ISO 8601).
    """

    segment_id: str
    score: float
    similarity: float
    segment_type: str
    tokens: int
    timestamp: str

    @property
    def mode(self) -> IncludeMode:
        return IncludeMode.STASH

    def to_dict(self) -> dict[str, Any]:
        """The reference's ``RequestContextItem`` shape (``type`` ``"stash"``, ``name`` the segment id,
        ``includeMode`` ``"stash"``, ``similarityScore``), the rest under ``contextsieve``."""
        return {
            "type": "stash",
            "name": self.segment_id,
            "includeMode": IncludeMode.STASH.value,
            "similarityScore": self.similarity,
            "contextsieve": {
                "score": self.score,
                "segment_type": self.segment_type,
                "tokens": self.tokens,
                "timestamp": self.timestamp,
            },
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "StashedEntry":
        x = d.get("contextsieve") or {}
        if not isinstance(x, dict) or not isinstance(d.get("name"), str):
            raise TypeError("a stash item needs a string name and an object of contextsieve extras")
        return cls(
            d["name"],
            float(x["score"]),
            float(d["similarityScore"]),
            str(x["segment_type"]),
            int(x["tokens"]),
            str(x["timestamp"]),
        )


def entry_from_dict(d: dict[str, Any]) -> "ContextEntry | StashedEntry":
    """An item of a stored request context: a stashed segment (``type: stash``) or an agent item."""
    if not isinstance(d, dict):
        raise TypeError(f"a request context item must be an object, got {type(d).__name__}")
    return StashedEntry.from_dict(d) if d.get("type") == "stash" else ContextEntry.from_dict(d)


@dataclass(frozen=True)
class Dropped:
    """An item (or stashed segment) selected but left out of the request, and why (e.g. ``"token budget"``)."""

    entry: ContextEntry | StashedEntry
    tokens: int
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {**self.entry.to_dict(), "tokens": self.tokens, "reason": self.reason}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Dropped":
        return cls(entry_from_dict(d), int(d["tokens"]), str(d["reason"]))


def shown_order(entries: Iterable[ContextEntry]) -> list[ContextEntry]:
    """Entries in the order the seed's "Context Used" view shows them: always, manual, then agent items
    by score (then priority, server and name)."""
    return sorted(
        entries,
        key=lambda e: (
            _MODE_ORDER[e.mode],
            -(e.score or 0.0),
            e.priority if e.priority is not None else 0,
            e.key.server,
            e.key.name,
        ),
    )


@dataclass(frozen=True)
class RequestContext:
    """The items of one request, in the order they are sent (session items, then agent items by score),
    and the stashed segments retrieved for it (best first).

    Stores item keys and segment ids, not copies: rebuilding a request later shows later edits of the
    items as such (and leaves out segments deleted from the stash since).
    """

    entries: tuple[ContextEntry, ...]
    query: str = ""
    query_chunks: tuple[str, ...] = ()
    settings: dict[str, Any] = field(default_factory=dict)
    tokens: int | None = None
    dropped: tuple[Dropped, ...] = ()
    notes: tuple[str, ...] = ()
    stashed: tuple[StashedEntry, ...] = ()

    def of_kind(self, kind: ItemKind) -> list[ContextEntry]:
        return [e for e in self.entries if e.key.kind is kind]

    def keys(self) -> list[ItemKey]:
        return [e.key for e in self.entries]

    def summary(self) -> str:
        """``"5 rules (3 agent, 2 always), 2 references (1 agent, 1 manual), 3 tools (all manual)"``."""
        parts = []
        for kind in ItemKind:
            entries = self.of_kind(kind)
            counts = {m: sum(1 for e in entries if e.mode is m) for m in sorted(IncludeMode, key=lambda m: m.value)}
            used = {m: n for m, n in counts.items() if n}
            if len(used) == 1:
                detail = f" (all {next(iter(used)).value})"
            elif used:
                detail = " (" + ", ".join(f"{n} {m.value}" for m, n in used.items()) + ")"
            else:
                detail = ""
            parts.append(f"{len(entries)} {_PLURAL[kind] if len(entries) != 1 else kind.value}{detail}")
        if self.stashed:
            parts.append(f"{len(self.stashed)} stashed segment{'s' if len(self.stashed) != 1 else ''}")
        return ", ".join(parts)

    def grouped_text(self) -> str:
        """The seed's "Context Used" view: Rules / References / Tools, always, manual, then agent items by score."""
        lines = ["Context Used:"]
        for kind in ItemKind:
            entries = shown_order(self.of_kind(kind))
            lines.append(f"{_PLURAL[kind].capitalize()} ({len(entries)}):")
            for e in entries:
                name = f"{e.key.server}:{e.key.name}" if kind is ItemKind.TOOL else e.key.name
                if e.mode is IncludeMode.EXPANSION and e.score is not None:
                    badge = f"Expansion - {e.score:.2f}, via {e.pulled_by.name if e.pulled_by else '?'}"
                elif e.mode is IncludeMode.AGENT and e.score is not None:
                    badge = f"Agent - {e.score:.2f}"
                else:
                    badge = e.mode.value.capitalize()
                prio = f" (priority {e.priority})" if e.priority is not None else ""
                lines.append(f"  • {name}{prio} [{badge}]")
            lines.append("")
        if self.stashed:
            lines.append(f"Stashed ({len(self.stashed)}):")
            lines += [
                f"  • {e.segment_id} ({e.segment_type}, {e.tokens} tokens) [Stash - {e.score:.2f}]"
                for e in self.stashed
            ]
            lines.append("")
        for x in self.dropped:
            name = f"stash:{x.entry.segment_id}" if isinstance(x.entry, StashedEntry) else str(x.entry.key)
            lines.append(
                f"Dropped: {name} ({x.tokens} tokens, score {x.entry.score:.2f}): {x.reason}"
                if x.entry.score is not None
                else f"Dropped: {name}: {x.reason}"
            )
        lines.extend(f"Note: {n}" for n in self.notes)
        return "\n".join(lines).rstrip() + "\n"

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "query": self.query,
            "query_chunks": list(self.query_chunks),
            "settings": self.settings,
            "items": [e.to_dict() for e in self.entries] + [e.to_dict() for e in self.stashed],
            "summary": self.summary(),
        }
        if self.tokens is not None:
            d["tokens"] = self.tokens
        if self.dropped:
            d["dropped"] = [x.to_dict() for x in self.dropped]
        if self.notes:
            d["notes"] = list(self.notes)
        return d

    def to_json(self, **kw: Any) -> str:
        return json.dumps(self.to_dict(), **kw)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "RequestContext":
        items = [entry_from_dict(e) for e in d["items"]]
        return cls(
            tuple(e for e in items if isinstance(e, ContextEntry)),
            d.get("query", ""),
            tuple(d.get("query_chunks", ())),
            dict(d.get("settings", {})),
            d.get("tokens"),
            tuple(Dropped.from_dict(x) for x in d.get("dropped", ())),
            tuple(d.get("notes", ())),
            tuple(e for e in items if isinstance(e, StashedEntry)),
        )
