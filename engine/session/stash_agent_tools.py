"""The stash tools a model gets (seed 004 as tools): stash, retrieve, merge, list, delete and protect
segments of one namespace of a :class:`~contextsieve.stash.store.StashStore`, each one
:class:`~contextsieve.session.agent_tools.AgentTool` written once for MCP (``serve``) and every
framework integration (their ``stash_tools``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from contextsieve.errors import ToolArgumentError
from contextsieve.session.agent_tools import AgentTool, text_argument, tool_hints
from contextsieve.stash.segment import SegmentType

if TYPE_CHECKING:
    from contextsieve.stash.store import StashStore

__all__ = ["StashScope", "STASH_TOOLS", "RETRIEVE_STASHED_CONTEXT"]


@dataclass
class StashScope:
    """What the stash tools work on: a store and one namespace in it.

    Attributes:
        store: the stash store.
        session: the namespace the segments go to and come from.
        cross_session: retrieval searches every namespace (default False).
        max_segments: most segments one ``stash_context`` call may carry (default 1,000).
        progress: ``progress(done, total)`` while stashing (default none).
    """

    store: StashStore
    session: str
    cross_session: bool = False
    max_segments: int = 1000
    progress: Callable[[int, int], None] | None = None


def _stash(scope: StashScope, a: dict[str, Any]) -> dict[str, Any]:
    if len(a["segments"]) > scope.max_segments:
        raise ToolArgumentError(f"stash_context: at most {scope.max_segments} segments per call")
    return scope.store.stash(a["segments"], session=scope.session, progress=scope.progress).to_dict()


def _retrieve(scope: StashScope, a: dict[str, Any]) -> dict[str, Any]:
    found = scope.store.retrieve(
        a["query"],
        session=scope.session,
        top_k=a["top_k"],
        min_similarity=0.0 if a["min_similarity"] is None else a["min_similarity"],
        filters=a["filters"],
        cross_session=scope.cross_session,
        include_superseded=bool(a["include_superseded"]),
    )
    rows = [h.to_dict(scope.store.config.preview_chars) for h in found]
    return {"segments": rows, "total_found": len(rows)}


def _merge(scope: StashScope, a: dict[str, Any]) -> dict[str, Any]:
    return scope.store.merge(a["segment_ids"], session=scope.session, keep=a["keep"]).to_dict()


def _list(scope: StashScope, a: dict[str, Any]) -> dict[str, Any]:
    segs = scope.store.list(session=scope.session, filters=a["filters"], limit=a["limit"], offset=a["offset"] or 0)
    rows = [{**s.to_dict(text=False), "text": s.preview(scope.store.config.preview_chars)} for s in segs]
    for row in rows:
        row.pop("session", None)
    return {"segments": rows}


def _delete(scope: StashScope, a: dict[str, Any]) -> dict[str, Any]:
    return {"deleted": scope.store.delete(a["segment_ids"], session=scope.session)}


def _protect(scope: StashScope, a: dict[str, Any]) -> dict[str, Any]:
    call = scope.store.protect if a["protected"] else scope.store.unprotect
    return {"changed": call(a["segment_ids"], session=scope.session), "protected": a["protected"]}


_TYPE = {"type": "string", "enum": [t.value for t in SegmentType]}
_IDS = {"type": "array", "items": {"type": "string"}, "maxItems": 1000}
_FILTERS = {
    "type": "object",
    "description": "types, topics, sources, start_time, end_time, protected",
}
_SEGMENT = {
    "type": "object",
    "properties": {
        "text": {"type": "string"},
        "type": _TYPE,
        "topic": {"type": "string"},
        "source": {"type": "string"},
        "references": {"type": "array", "items": {"type": "string"}},
        "supersedes": {"type": "array", "items": {"type": "string"}, "description": "Ids it replaces"},
        "expires_in_days": {"type": "number"},
        "protected": {"type": "boolean"},
        "id": {"type": "string"},
    },
    "required": ["text"],
}

STASH_CONTEXT = AgentTool(
    "stash_context",
    "Stash context",
    "Save context to drop from the prompt and find later. Returns segment_ids.",
    {"segments": {"type": "array", "items": _SEGMENT, "minItems": 1, "maxItems": 1000}},
    ("segments",),
    tool_hints(read_only=False, idempotent=True),
    _stash,
)
RETRIEVE_STASHED_CONTEXT = AgentTool(
    "retrieve_stashed_context",
    "Retrieve from stash",
    "Search the stash by meaning, best first; previews only (full texts: merge_stashed_context).",
    {
        "query": text_argument("Task, question or recent messages"),
        "top_k": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 5},
        "min_similarity": {"type": "number", "minimum": -1, "maximum": 1},
        "filters": _FILTERS,
        "include_superseded": {"type": "boolean"},
    },
    ("query",),
    tool_hints(read_only=True),
    _retrieve,
)
MERGE_STASHED_CONTEXT = AgentTool(
    "merge_stashed_context",
    "Merge from stash",
    "Full texts of stashed segments; keep=false deletes them.",
    {"segment_ids": _IDS, "keep": {"type": "boolean", "default": True}},
    ("segment_ids",),
    tool_hints(read_only=False, destructive=True, idempotent=False),
    _merge,
)
LIST_STASHED_CONTEXT = AgentTool(
    "list_stashed_context",
    "List stash",
    "Stashed segments, newest first, as previews.",
    {
        "filters": _FILTERS,
        "limit": {"type": "integer", "minimum": 1, "maximum": 10000, "default": 20},
        "offset": {"type": "integer", "minimum": 0},
    },
    (),
    tool_hints(read_only=True),
    _list,
)
DELETE_STASHED_CONTEXT = AgentTool(
    "delete_stashed_context",
    "Delete from stash",
    "Delete stashed segments (protected ones too).",
    {"segment_ids": _IDS},
    ("segment_ids",),
    tool_hints(read_only=False, destructive=True, idempotent=True),
    _delete,
)
PROTECT_STASHED_CONTEXT = AgentTool(
    "protect_stashed_context",
    "Protect in stash",
    "Keep segments from expiry and cleanup (protected=false undoes it).",
    {"segment_ids": _IDS, "protected": {"type": "boolean", "default": True}},
    ("segment_ids",),
    tool_hints(read_only=False, idempotent=True),
    _protect,
)

#: The stash tools, in the order ``serve`` lists them; the frameworks offer the first three by default.
STASH_TOOLS: tuple[AgentTool, ...] = (
    STASH_CONTEXT,
    RETRIEVE_STASHED_CONTEXT,
    MERGE_STASHED_CONTEXT,
    LIST_STASHED_CONTEXT,
    DELETE_STASHED_CONTEXT,
    PROTECT_STASHED_CONTEXT,
)
