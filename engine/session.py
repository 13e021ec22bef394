"""Sessions: their own context items, settings and history; requests are delegated.

A :class:`Session` holds session state (items added or removed, settings overrides, history) and
delegates the work: :func:`contextsieve.search.search` chooses agent-mode items (and records a trace),
:mod:`contextsieve.assembly` builds the LLM request and fits the token budget, and
:func:`contextsieve.explain.explain_item` reads the trace.
"""

from __future__ import annotations

import functools
import json
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from contextsieve.agent import Agent, AgentSettings
from contextsieve.assembly import Request, assemble, fit_budget, item_text
from contextsieve.chunking import query_chunks
from contextsieve.context import ContextEntry, Dropped, RequestContext
from contextsieve.errors import ContextSieveError, InputError, SessionFileError, check_text
from contextsieve.explain import Explanation, explain_item
from contextsieve.fileio import atomic_write_bytes
from contextsieve.items import IncludeMode, Item, ItemKey, ItemKind, Tool
from contextsieve.search import SearchTrace, context_settings, search
from contextsieve.store import ChunkStore

__all__ = ["Session", "Message", "Request"]

_SESSION_ORDER = {ItemKind.REFERENCE: 0, ItemKind.RULE: 1, ItemKind.TOOL: 2}  # always items: references, rules, tools
_MENTION = re.compile(r"@(ref|rule):([\w-]+)")


@dataclass(frozen=True)
class Message:
    """A chat message; assistant replies carry the request context they were produced with."""

    role: str
    content: str
    context: RequestContext | None = None
    created: float = field(default_factory=time.time)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"role": self.role, "content": self.content, "created": self.created}
        if self.context is not None:
            d["context"] = self.context.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Message:
        ctx = RequestContext.from_dict(d["context"]) if "context" in d else None
        return cls(d["role"], d["content"], ctx, d.get("created", 0.0))


_F = TypeVar("_F", bound=Callable[..., Any])


def _locked(method: _F) -> _F:
    """Run ``method`` holding the session's lock, then the agent's (always in that order)."""

    @functools.wraps(method)
    def run(self: Session, *args: Any, **kwargs: Any) -> Any:
        with self._lock, self.agent.lock:
            return method(self, *args, **kwargs)

    return run  # type: ignore[return-value]


def _capped(chunks: list[str], cap: int) -> tuple[list[str], str]:
    """At most ``cap`` query sentences: the first half and the last half of that many; and a note when cut."""
    if len(chunks) <= cap:
        return chunks, ""
    head = (cap + 1) // 2
    kept = chunks[:head] + chunks[len(chunks) - (cap - head) :]
    note = (
        f"the message has {len(chunks)} sentences; the first {head} and the last {cap - head} were searched "
        f"(max_query_chunks {cap})"
    )
    return kept, note


class Session:
    """A chat session over an agent.

    At creation it holds the agent's ``always`` items: references, then rules (each by priority, then
    name), then tools (server, then tool order). The user may add or remove any item; an ``always``
    item removed stays removed for this session, and adding it back makes it ``manual``.

    Args:
        agent: the agent (the source of truth for items).
        store: chunk vectors of the agent's items (shared by the agent's sessions).
        preset: ``"aggressive"``, ``"normal"`` or ``"conservative"`` (see :data:`contextsieve.agent.PRESETS`).
        token_counter: counts the tokens of texts for ``token_budget`` (default: the embedding model's
            tokenizer, a proxy for the LLM's; pass the provider's counter for exact budgets).
        settings: overrides of the agent's settings for this session only (they win over the preset).
    """

    def __init__(
        self,
        agent: Agent,
        store: ChunkStore,
        *,
        preset: str | None = None,
        token_counter: Callable[[Sequence[str]], list[int]] | None = None,
        **settings: Any,
    ) -> None:
        self.agent = agent
        self.store = store
        self.settings: AgentSettings = agent.settings.with_overrides(preset, **settings)
        self._token_counter = token_counter
        self._token_memo: dict[ItemKey, tuple[Item, int]] = {}
        self._lock = threading.RLock()
        self.history: list[Message] = []
        table = agent.table()
        always = [table.items[i] for i in np.flatnonzero(table.always)]  # rules, references, tools
        self._items: dict[ItemKey, IncludeMode] = {
            it.key: IncludeMode.ALWAYS
            for it in sorted(always, key=lambda it: _SESSION_ORDER[it.kind])  # stable
        }

    # -- session items ----------------------------------------------------------------------------

    @_locked
    def items(self) -> list[tuple[ItemKey, IncludeMode]]:
        """Session items in order (always items as created, then manual items in the order added)."""
        return list(self._items.items())

    @_locked
    def add(self, key: ItemKey | str) -> None:
        """Add an item as ``manual`` (unknown keys raise :class:`~contextsieve.errors.UnknownItemError`)."""
        item = self.agent.get(key)
        self._items.setdefault(item.key, IncludeMode.MANUAL)

    @_locked
    def remove(self, key: ItemKey | str) -> None:
        """Remove an item from this session (it stays removed, even if ``always``)."""
        item = self.agent.get(key)
        self._items.pop(item.key, None)

    @_locked
    def update_settings(self, preset: str | None = None, **settings: Any) -> None:
        """Override settings (or apply a preset) for this session from now on."""
        self.settings = self.settings.with_overrides(preset, **settings)

    def _searchable(self) -> np.ndarray:
        """Per item position: whether search may choose it now (agent mode, not in the session, and,
        for a tool, usable in this session)."""
        table = self.agent.table()
        mask = table.agent.copy()
        if self.agent.autonomous:
            mode = self.settings.tool_permission
            if mode == "always":
                mask &= ~table.tool
            elif mode == "tool":
                mask &= ~table.needs_permission
        for key in self._items:
            pos = table.position.get(key)
            if pos is not None:
                mask[pos] = False
        return mask

    def _tool_available(self, tool: Tool) -> bool:
        """Whether the session may offer ``tool``: autonomous sessions drop tools that would need approval."""
        if not self.agent.autonomous:
            return True
        mode = self.settings.tool_permission
        return mode == "never" or (mode == "tool" and not self.agent.permission_required(tool))

    # -- requests ---------------------------------------------------------------------------------

    def _mentions(self, message: str) -> str:
        """Add ``@ref:name`` / ``@rule:name`` items as manual; return the message without them."""
        for kind, name in _MENTION.findall(message):
            self.add(ItemKey(ItemKind.REFERENCE if kind == "ref" else ItemKind.RULE, name))
        return " ".join(_MENTION.sub(" ", message).split())

    def _search(self, chunks: Sequence[str]) -> tuple[list[ContextEntry], SearchTrace]:
        return search(
            self.store, self.agent.table(), self._searchable(), self.settings, chunks, self.agent.server_descriptions()
        )

    def build_request(self, message: str) -> Request:
        """The request for ``message``: session items, plus agent-mode items chosen for this message only.

        Safe to call from several threads: requests of one session run one at a time; requests of
        different sessions embed their messages in parallel and hold the agent (which waits with its
        changes) only while they select and assemble.
        """
        if not isinstance(message, str):
            raise InputError(f"message must be a str, got {type(message).__name__}")
        check_text(message, "the message")
        with self._lock:
            query = self._mentions(message)
            qchunks, cap_note = _capped(query_chunks(query), self.settings.max_query_chunks)
            with self.agent.lock:
                searching = bool(qchunks) and bool(self._searchable().any())
            if searching:
                self.store.embed_query(qchunks)  # kept by the store: the search below finds it there
            with self.agent.lock:
                return self._build(query, qchunks, cap_note)

    def _build(self, query: str, qchunks: list[str], cap_note: str) -> Request:
        entries = [
            ContextEntry(k, m, priority=getattr(self.agent.get(k), "priority", None)) for k, m in self._items.items()
        ]
        found, trace = self._search(qchunks)
        entries += found
        s = self.settings
        recorded = context_settings(s)
        tokens: int | None = None
        dropped: list[Dropped] = []
        notes: list[str] = [cap_note] if cap_note else []
        if s.token_budget is not None:
            recorded["token_budget"] = s.token_budget
            entries, tokens, dropped, budget_notes = fit_budget(
                entries, s.token_budget, lambda e: self._item_tokens(e.key)
            )
            notes += budget_notes
        ctx = RequestContext(tuple(entries), query, tuple(qchunks), recorded, tokens, tuple(dropped), tuple(notes))
        return assemble(
            self.agent, ctx, query, ((m.role, m.content) for m in self.history), self._tool_available, trace
        )

    @_locked
    def request_for(self, ctx: RequestContext, message: str) -> Request:
        """Rebuild the exact LLM request for a stored context (items are looked up now, by key)."""
        return assemble(self.agent, ctx, message, ((m.role, m.content) for m in self.history), self._tool_available)

    def _item_tokens(self, key: ItemKey) -> int:
        """Tokens the item adds to the request (its message, or its tool definition), memoised per item."""
        item = self.agent.get(key)
        memo = self._token_memo.get(key)
        if memo is not None and memo[0] is item:
            return memo[1]
        counter = self._token_counter or self.store.embedder.count_tokens
        n = int(counter([item_text(item)])[0])
        self._token_memo[key] = (item, n)
        return n

    @_locked
    def expand_from(self, text: str, *, max_chunks: int = 16) -> RequestContext:
        """Items a tool result points to: ``text`` is split into sentences, as a message is, and they
        search the agent-mode items not in the session by the same pipeline (max over sentences, so
        each thing the result mentions can pull its own item).

        Returns a :class:`RequestContext` of proposals (``via="tool-result"``); nothing is added to the
        session. At most ``max_chunks`` sentences are used (the first ones; default 16), each cut at
        500 characters.
        """
        if not isinstance(text, str):
            raise InputError(f"text must be a str, got {type(text).__name__}")
        check_text(text, "the tool result")
        if isinstance(max_chunks, bool) or not isinstance(max_chunks, int) or max_chunks < 1:
            raise InputError(f"max_chunks must be a positive int, got {max_chunks!r}")
        chunks = query_chunks(text)[:max_chunks]
        entries, _ = self._search(chunks)
        proposals = tuple(
            ContextEntry(
                e.key,
                e.mode,
                e.score,
                e.chunk,
                e.query_chunk,
                e.priority,
                "tool-result" if e.via == "query" else e.via,
                e.pulled_by,
            )
            for e in entries
        )
        return RequestContext(
            proposals, text[:200], tuple(chunks), {**context_settings(self.settings), "source": "tool-result"}
        )

    @_locked
    def explain(self, message: str, key: ItemKey | str) -> Explanation:
        """Why ``key`` is or is not in the request for ``message`` (the session is left unchanged): the
        request is built once and its search trace read (item scores per query sentence, the rank of
        its best chunk against the top-K chunk cut, its rank among the grouped items against the
        include score and top-N, promotion, expansion, token-budget drops)."""
        item = self.agent.get(key)
        saved = dict(self._items)
        try:
            request = self.build_request(message)
            in_session = self._items.get(item.key)
        finally:
            self._items = saved
        available = not isinstance(item, Tool) or self._tool_available(item)
        return explain_item(
            item.key,
            request,
            session_mode=in_session,
            include_mode=self.agent.include_mode(item),
            tool_available=available,
        )

    @_locked
    def record_reply(self, request: Request, reply: str) -> Message:
        """Append the user message and the assistant reply (carrying its request context) to the history."""
        self.history.append(Message("user", request.message))
        msg = Message("assistant", reply, request.context)
        self.history.append(msg)
        return msg

    # -- persistence ------------------------------------------------------------------------------

    @_locked
    def to_dict(self) -> dict[str, Any]:
        return {
            "settings": {
                k: dict(v) if k == "tool_settings" and v is not None else v for k, v in self.settings.__dict__.items()
            },
            "items": [{"key": str(k), "mode": m.value} for k, m in self._items.items()],
            "history": [m.to_dict() for m in self.history],
        }

    def save(self, path: str | Path) -> None:
        """Write history, items and settings as JSON (temp file + rename)."""
        atomic_write_bytes(Path(path), json.dumps(self.to_dict(), indent=1).encode("utf-8"))

    @classmethod
    def load(cls, path: str | Path, agent: Agent, store: ChunkStore) -> Session:
        """Read a session saved by :meth:`save` for ``agent``; :class:`SessionFileError` if the file
        cannot be read or does not fit the agent (unknown items or settings)."""
        try:
            d = json.loads(Path(path).read_text(encoding="utf-8"))
            s = cls(agent, store, **d["settings"])
            items = {ItemKey.parse(i["key"]): IncludeMode(i["mode"]) for i in d["items"]}
            for k in items:
                agent.get(k)
            s._items = items
            s.history = [Message.from_dict(m) for m in d["history"]]
        except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError, ContextSieveError) as e:
            raise SessionFileError(f"cannot load session {path}: {e}") from e
        return s
