"""The stash store's MCP tools on ``contextsieve serve --stash PATH|URI`` (seed 004's names).

- ``stash_context(segments)``: store segments (``text`` and optional ``type``, ``topic``, ``source``,
  ``references``, ``expires_in_days``, ``protected``); returns ``segment_ids`` and the tokens stashed.
- ``retrieve_stashed_context(query, top_k=5, min_similarity=0, filters?)``: ``segments`` best first
  (``segment_id``, a preview of at most 500 characters, ``type``, ``similarity``, ``score``,
  ``timestamp``).
- ``merge_stashed_context(segment_ids, keep=true)``: the full texts and the tokens they add.
- ``list_stashed_context``, ``delete_stashed_context``, ``protect_stashed_context``.

Where segments go: a call that passes a ``session`` handle uses that session's own namespace (its
random handle; a client cannot name another session's segments), and so does a stateful connection
without one; a call of the stateless protocol (the SDK's default) without a handle uses the agent's
shared namespace ``agent:<name>``, kept in the store, so a host that never threads a handle finds
what it stashed, across calls, processes and restarts. ``ServeConfig.stash_session`` puts every call
into one named namespace instead, and ``ServeConfig.stash_cross_session`` lets retrieval search every
namespace; both are the operator's choice, off by default.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

from contextsieve.mcp.common import progress_reporter
from contextsieve.stash.store import StashStore

try:  # the tools' annotations are evaluated by the SDK, so Context must be a module global
    from mcp.server.mcpserver import Context
except ImportError:  # build_server raises MissingExtraError naming the extra
    Context = None  # type: ignore[assignment,misc]

__all__ = ["add_stash_tools"]

_T = TypeVar("_T")


def add_stash_tools(
    tool: Callable[[Any], Any],
    stash: StashStore,
    *,
    session_of: Callable[[Any, str | None], tuple[str, Any]],
    shared: str,
    state_of: Callable[[Any], dict[str, Any] | None],
    run: Callable[[Callable[[], Any]], Any],
    text: Callable[[Any, str], str],
    invalid: Callable[[str], Exception],
    fixed_session: str | None,
    cross_session: bool,
    max_segments: int,
) -> None:
    """Register the stash tools with ``tool`` (the server's registering decorator)."""

    def where(ctx: Any, session: str | None) -> tuple[str | None, str]:
        """(the handle to answer with, the stash session): a handle's own namespace, a stateful
        connection's, or, for a stateless call without a handle, the agent's ``shared`` one (no handle
        is made for it: nothing to keep in memory, nothing to evict)."""
        if session is None and state_of(ctx) is None:
            return None, fixed_session or shared
        handle, _ = session_of(ctx, session)
        return handle, fixed_session or handle

    def dumps(value: dict[str, Any]) -> str:
        return json.dumps(value, ensure_ascii=False)

    def stash_context(segments: list[dict[str, Any]], ctx: Context, session: str | None = None) -> str:
        """Stash context segments for later retrieval by meaning (the caller hands their text).

        Args:
            segments: objects with text (required) and optional type (message, code_block, file_content,
                error_log, debug_output, task_state, decision, research), topic, source, references (ids of
                stashed segments it refers to), supersedes (ids of stashed segments this one replaces: a newer
                fact or a corrected plan; retrieval then returns this one instead of them), expires_in_days,
                protected.
            session: the session handle of an earlier result; pass it back to keep to that session's own
                segments. Without it, calls of the default (stateless) protocol stash to and retrieve from
                this agent's shared stash.

        Returns JSON: segment_ids (one per segment; an already stashed text gets its existing id),
        stashed_count, duplicates, tokens_stashed, secrets_redacted (credentials replaced by a placeholder
        before storage, counted by kind), and may_supersede ({new id: stashed id} of new segments that
        restate a stashed one, when the server proposes them: stash the text again with supersedes to
        replace it).
        """
        if not isinstance(segments, list) or not segments:
            raise invalid("segments must be a non-empty list of objects with a text")
        if len(segments) > max_segments:
            raise invalid(f"at most {max_segments} segments per call")
        handle, name = where(ctx, session)
        progress = progress_reporter(ctx)
        r = run(lambda: stash.stash(segments, session=name, progress=progress))
        return dumps({"session": handle, **r.to_dict()})

    def retrieve_stashed_context(
        query: str,
        ctx: Context,
        top_k: int = 5,
        min_similarity: float = 0.0,
        filters: dict[str, Any] | None = None,
        session: str | None = None,
        include_superseded: bool = False,
    ) -> str:
        """Find stashed segments relevant to a query (meaning, keywords and recency together), best first.

        Args:
            query: the current task, question or recent messages.
            top_k: results (1-1000, default 5).
            min_similarity: leave out segments whose cosine similarity is below this (default 0).
            filters: any of type/types, topic/topics, source/sources, start_time, end_time (ISO 8601 with
                offset), protected.
            session: the session handle of an earlier result; pass it back to keep to that session's own
                segments. Without it, calls of the default (stateless) protocol stash to and retrieve from
                this agent's shared stash.
            include_superseded: also return segments that a newer one superseded (default false: only the
                newest of each chain).

        Returns JSON: segments (segment_id, text preview of at most 500 characters, type, similarity, keyword,
        score, why (the score's dense, keyword and recency parts), timestamp, stashed_at, tokens, topic,
        source, and supersedes / superseded_by where a segment replaced or was replaced by others),
        total_found. Merge the ones you need with merge_stashed_context.
        """
        q = text(query, "query")
        handle, name = where(ctx, session)
        found = run(
            lambda: stash.retrieve(
                q,
                session=name,
                top_k=top_k,
                min_similarity=min_similarity,
                filters=filters,
                cross_session=cross_session,
                include_superseded=include_superseded,
            )
        )
        rows = [h.to_dict(stash.config.preview_chars) for h in found]
        return dumps({"session": handle, "segments": rows, "total_found": len(rows)})

    def merge_stashed_context(
        segment_ids: list[str], ctx: Context, keep: bool = True, session: str | None = None
    ) -> str:
        """The full texts of stashed segments, to put back into the active context.

        Args:
            segment_ids: ids from retrieve_stashed_context or stash_context.
            keep: keep them in the stash (default true); false removes them once merged.
            session: the session handle of an earlier result; pass it back to keep to that session's own
                segments. Without it, calls of the default (stateless) protocol stash to and retrieve from
                this agent's shared stash.

        Returns JSON: merged_count, tokens_added, removed_from_stash, segments (segment_id, type, tokens, text).
        """
        handle, name = where(ctx, session)
        m = run(lambda: stash.merge(segment_ids, session=name, keep=keep))
        return dumps({"session": handle, **m.to_dict()})

    def list_stashed_context(
        ctx: Context,
        filters: dict[str, Any] | None = None,
        limit: int = 20,
        offset: int = 0,
        session: str | None = None,
    ) -> str:
        """List this session's stashed segments, newest first (previews, no full texts).

        Args:
            filters: as for retrieve_stashed_context.
            limit: how many (1-10000, default 20).
            offset: how many to skip (default 0).
            session: the session handle of an earlier result; pass it back to keep to that session's own
                segments. Without it, calls of the default (stateless) protocol stash to and retrieve from
                this agent's shared stash.
        """
        handle, name = where(ctx, session)
        segs = run(lambda: stash.list(session=name, filters=filters, limit=limit, offset=offset))
        rows = [{**s.to_dict(text=False), "text": s.preview(stash.config.preview_chars)} for s in segs]
        for row in rows:
            row.pop("session", None)
        return dumps({"session": handle, "segments": rows})

    def delete_stashed_context(segment_ids: list[str], ctx: Context, session: str | None = None) -> str:
        """Delete stashed segments of this session (protected ones too).

        Args:
            segment_ids: the ids to delete.
            session: the session handle of an earlier result; pass it back to keep to that session's own
                segments. Without it, calls of the default (stateless) protocol stash to and retrieve from
                this agent's shared stash.
        """
        handle, name = where(ctx, session)
        n = run(lambda: stash.delete(segment_ids, session=name))
        return dumps({"session": handle, "deleted": n})

    def protect_stashed_context(
        segment_ids: list[str], ctx: Context, protected: bool = True, session: str | None = None
    ) -> str:
        """Protect stashed segments from cleanup and expiry (or lift the protection with protected=false).

        Args:
            segment_ids: the ids.
            protected: true (default) to protect, false to unprotect.
            session: the session handle of an earlier result; pass it back to keep to that session's own
                segments. Without it, calls of the default (stateless) protocol stash to and retrieve from
                this agent's shared stash.
        """
        if not isinstance(protected, bool):
            raise invalid("protected must be true or false")
        handle, name = where(ctx, session)
        call = stash.protect if protected else stash.unprotect
        n = run(lambda: call(segment_ids, session=name))
        return dumps({"session": handle, "changed": n, "protected": protected})

    for fn in (
        stash_context,
        retrieve_stashed_context,
        merge_stashed_context,
        list_stashed_context,
        delete_stashed_context,
        protect_stashed_context,
    ):
        tool(fn)
