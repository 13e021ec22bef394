"""The JSON the inspect page draws for one request: its context in columns, stashed and dropped entries,
an item's identity and description, how a replay differs from a recorded context, and the digests of
the provider-cache prefixes. Pure functions of a request and its agent; :mod:`.inspector` calls them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from contextsieve.agent.items import IncludeMode, ItemKey, ItemKind, Tool
from contextsieve.errors import UnknownItemError
from contextsieve.selection.context import RequestContext, StashedEntry, shown_order
from contextsieve.session.assembly import Request
from contextsieve.session.messages import Message

__all__ = [
    "PREVIEW_CHARS",
    "compare_contexts",
    "describe_item",
    "prefix_digests",
    "recorded_context",
    "round_score",
    "shown_context",
    "stashed_entry",
]

#: Longest description or stashed text shown in full (characters; longer ones are cut, with "...").
PREVIEW_CHARS = 300

_COLUMNS = {ItemKind.RULE: "rules", ItemKind.REFERENCE: "references", ItemKind.TOOL: "tools"}


def prefix_digests(request: Request) -> dict[str, dict[str, Any]]:
    """The provider-cache prefixes of ``request``: for the deferred Anthropic payload
    (``request.anthropic(tools="deferred")``) and for the payload of the session's own offer
    (``request.anthropic()``, the tools the offer mode chose), the sha256 and length of the compact
    JSON of ``[tools, system]`` (the order the provider's cache reads them in) and the number of
    tools. Two requests' prefixes are byte-identical exactly when the digests are equal."""
    out: dict[str, dict[str, Any]] = {}
    for name, payload in (("deferred", request.anthropic(tools="deferred")), ("selected", request.anthropic())):
        data = json.dumps(
            [payload["tools"], payload["system"]], ensure_ascii=False, separators=(",", ":"), sort_keys=False
        ).encode("utf-8", "surrogatepass")
        out[name] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data), "tools": len(payload["tools"])}
    return out


def round_score(x: float | None) -> float | None:
    """A score or similarity as the page's JSON gives it: rounded to 4 decimals (``None`` stays ``None``)."""
    return None if x is None else round(float(x), 4)


def recorded_context(history: Sequence[Message], user: int) -> RequestContext | None:
    """The request context of the reply to the user message at ``user`` (before the next user message)."""
    for m in history[user + 1 :]:
        if m.role == "user":
            return None
        if m.role == "assistant" and m.context is not None:
            return m.context
    return None


def compare_contexts(recorded: RequestContext, now: RequestContext, notes: list[str]) -> dict[str, Any]:
    """How a replay's items differ from the recording's (by item and include mode)."""
    a = {(str(e.key), e.mode.value) for e in recorded.entries}
    b = {(str(e.key), e.mode.value) for e in now.entries}
    return {
        "same_items": a == b,
        "only_recorded": [f"{k} [{m}]" for k, m in sorted(a - b)],
        "only_replay": [f"{k} [{m}]" for k, m in sorted(b - a)],
        "notes": notes,
    }


def describe_item(agent: Any, key: ItemKey) -> dict[str, Any]:
    """An item's identity for the page, and a short description when the agent still has it."""
    d: dict[str, Any] = {
        "key": str(key),
        "type": key.kind.value,
        "name": key.name,
        "server": key.server or None,
        "label": f"{key.server}:{key.name}" if key.kind is ItemKind.TOOL else key.name,
    }
    try:
        item = agent.get(key)
    except UnknownItemError:
        d["known"] = False
        d["description"] = ""
        return d
    d["known"] = True
    text = item.description or ("" if isinstance(item, Tool) else item.text)
    d["description"] = text if len(text) <= PREVIEW_CHARS else text[:PREVIEW_CHARS].rstrip() + "..."
    return d


def shown_context(agent: Any, ctx: RequestContext, stash_texts: Any) -> dict[str, Any]:
    """A request context as the page draws it (seed 001): a column per kind, session items first
    (always, then manual), then searched items by score; stashed segments; dropped items; notes."""
    columns: dict[str, list[dict[str, Any]]] = {name: [] for name in _COLUMNS.values()}
    for kind, name in _COLUMNS.items():
        entries = shown_order(ctx.of_kind(kind))
        columns[name] = [
            {
                **describe_item(agent, e.key),
                "mode": e.mode.value,
                "score": e.score,  # unrounded: the page shows it as `select` does (two decimals)
                "via": e.via,
                "pulled_by": str(e.pulled_by) if e.pulled_by is not None else None,
                "priority": e.priority,
            }
            for e in entries
        ]
    stashed = [stashed_entry(e, stash_texts.get(e.segment_id)) for e in ctx.stashed]
    dropped = []
    for x in ctx.dropped:
        if isinstance(x.entry, StashedEntry):
            d = stashed_entry(x.entry, stash_texts.get(x.entry.segment_id))
        else:
            d = {**describe_item(agent, x.entry.key), "mode": x.entry.mode.value, "score": round_score(x.entry.score)}
        dropped.append({**d, "tokens": x.tokens, "reason": x.reason})
    return {
        "summary": ctx.summary(),
        "columns": columns,
        "stashed": stashed,
        "dropped": dropped,
        "notes": list(ctx.notes),
        "tokens": ctx.tokens,
        "settings": ctx.settings,
        "context": ctx.to_dict(),
    }


def stashed_entry(e: StashedEntry, text: str | None) -> dict[str, Any]:
    """A stashed segment of a request as the page draws it (``text``: its text, if still in the stash)."""
    preview = None if text is None else (text if len(text) <= PREVIEW_CHARS else text[:PREVIEW_CHARS].rstrip() + "...")
    return {
        "key": f"stash:{e.segment_id}",
        "segment_id": e.segment_id,
        "mode": IncludeMode.STASH.value,
        "segment_type": e.segment_type,
        "score": round_score(e.score),
        "similarity": round_score(e.similarity),
        "tokens": e.tokens,
        "timestamp": e.timestamp,
        "preview": preview,
    }
