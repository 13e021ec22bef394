"""Sessions: their own context items, settings and history; requests are delegated.

A :class:`Session` holds session state (items added or removed, settings overrides, history) and
delegates the work: :func:`contextsieve.selection.search.search` chooses agent-mode items (and records a trace),
:mod:`contextsieve.session.assembly` builds the LLM request and fits the token budget, and
:func:`contextsieve.session.explain.explain_item` reads the trace.

A session given a :class:`~contextsieve.stash.StashStore` (seeds 000 + 004) can stash its messages
and tool results, keep its history under a token budget by stashing the oldest ones, and brings
the stashed segments relevant to each message back into the request (include mode ``stash``).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from contextsieve.agent.agent import Agent
from contextsieve.agent.items import IncludeMode, Item, ItemKey, ItemKind, Tool
from contextsieve.agent.settings import AgentSettings, SettingsOverrides
from contextsieve.errors import ContextSieveError, InputError, SessionFileError, brief, check_text
from contextsieve.fileio import atomic_write_bytes
from contextsieve.retrieval.text import query_chunks, split_query
from contextsieve.selection.chunk_store import ChunkStore
from contextsieve.selection.context import ContextEntry, Dropped, RequestContext, StashedEntry
from contextsieve.selection.search import SearchTrace, context_settings, search
from contextsieve.session.assembly import Request, assemble, fit_budget, item_text, stashed_text, tool_definition
from contextsieve.session.explain import Explanation, explain_item
from contextsieve.session.stash_link import SessionStash, StashedMessage, StashSettings

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from contextsieve.stash import Retrieved, RetrieveTrace, StashResult, StashStore

__all__ = ["Session", "Message", "Request", "StashSettings", "ToolMatch"]  # StashSettings: from session_stash

_SESSION_ORDER = {ItemKind.REFERENCE: 0, ItemKind.RULE: 1, ItemKind.TOOL: 2}  # always items: references, rules, tools
_MENTION = re.compile(r"@(ref|rule):([\w-]+)")


_ROLES = ("user", "assistant", "tool")


@dataclass(frozen=True)
class Message:
    """A chat message; assistant replies carry the request context they were produced with.

    Attributes:
        role: ``user``, ``assistant`` or ``tool`` (a tool result; sent to the LLM as a user message
            ``"Tool result (<name>): ..."``).
        created: when it was written (seconds since the epoch).
        name: the tool, for tool results.
    """

    role: str
    content: str
    context: RequestContext | None = None
    created: float = field(default_factory=time.time)
    name: str | None = None

    def sent(self) -> tuple[str, str]:
        """``(role, content)`` as the LLM gets it."""
        if self.role == "tool":
            return "user", f"Tool result ({self.name or 'tool'}): {self.content}"
        return self.role, self.content

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"role": self.role, "content": self.content, "created": self.created}
        if self.name is not None:
            d["name"] = self.name
        if self.context is not None:
            d["context"] = self.context.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Message:
        ctx = RequestContext.from_dict(d["context"]) if "context" in d else None
        return cls(d["role"], d["content"], ctx, d.get("created", 0.0), d.get("name"))


_F = TypeVar("_F", bound=Callable[..., Any])


def _locked(method: _F) -> _F:
    """Run ``method`` holding the session's lock, then the agent's (always in that order)."""

    @functools.wraps(method)
    def run(self: Session, *args: Any, **kwargs: Any) -> Any:
        with self._lock, self.agent.lock:
            return method(self, *args, **kwargs)

    return run  # type: ignore[return-value]


@dataclass(frozen=True)
class OfferConfig:
    """How a session offers tools across its requests (for hosts without deferred loading: the MCP
    gateway, Chat Completions, frameworks); the deferred offers of :meth:`Request.anthropic` /
    :meth:`Request.openai_responses` keep the prompt cache by other means.

    Attributes:
        mode: ``"request"`` (default): each request offers its own selection, so the tools array
            changes from request to request (and with it the provider's prompt cache). ``"stable"``:
            within a task the offer only grows: a tool once offered stays, newly selected ones are
            appended in the order they were first selected, so consecutive requests send the same
            tools array unless something new is needed (:meth:`Session.new_task` starts over).
        budget: most tools a stable offer holds (default 30). Over it, the tools selected longest
            ago (by the last request that selected them; never one this request selected) are
            dropped first, which changes the array once.
        prefill: a stable offer's first request of a task also offers the best ``prefill`` tools of
            a tool search for its message (:meth:`Session.search_tools`, after the selected ones;
            within the budget), so that later steps of the task find theirs already offered and the
            array stays the same (default 0: off; more tools in context from the first step on, measured
            in ``benchmarks.tool_offers``).
        grow: after a task's first request, add at most this many of a request's selected tools (its
            best by score) that are not offered yet (default None: every selected tool). With
            ``prefill``, later steps mostly find their tools offered and the array rarely changes.
    """

    mode: str = "request"
    budget: int = 30
    prefill: int = 0
    grow: int | None = None

    def __post_init__(self) -> None:
        if self.mode not in ("request", "stable"):
            raise InputError(f"offer mode must be 'request' or 'stable', got {brief(self.mode)}")
        if isinstance(self.budget, bool) or not isinstance(self.budget, int) or not 1 <= self.budget <= 1000:
            raise InputError(f"offer budget must be an int from 1 to 1000, got {brief(self.budget)}")
        if isinstance(self.prefill, bool) or not isinstance(self.prefill, int) or not 0 <= self.prefill <= self.budget:
            raise InputError(f"offer prefill must be an int from 0 to the budget, got {brief(self.prefill)}")
        if self.grow is not None and (isinstance(self.grow, bool) or not isinstance(self.grow, int) or self.grow < 0):
            raise InputError(f"offer grow must be None or an int >= 0, got {brief(self.grow)}")


@dataclass(frozen=True)
class ToolMatch:
    """A tool :meth:`Session.search_tools` found: the tool, its ranking score (dense similarity plus
    the keyword term, as selection ranks) and its definition as offered to a model
    (:func:`~contextsieve.session.assembly.tool_definition`: ``definition["name"]`` is the name a model calls)."""

    tool: Tool
    score: float
    definition: dict[str, Any] = field(default_factory=dict, compare=False)


def _query(message: str, steps: bool, cap: int) -> tuple[list[str], int, str]:
    """The query chunks of a message (see :func:`contextsieve.retrieval.text.split_query`), how many are
    sentences, and a note when there were more than ``cap`` sentences (then the capped sentences are
    searched without steps) ; at most ``cap`` steps follow the sentences."""
    chunks, n = split_query(message, steps=steps)
    sentences, note = _capped(chunks[:n], cap)
    if note:
        return sentences, len(sentences), note
    return sentences + chunks[n:][:cap], n, ""


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
        preset: ``"aggressive"``, ``"normal"``, ``"conservative"`` or ``"reference"`` (see
            :data:`contextsieve.agent.agent.PRESETS`).
        token_counter: counts the tokens of texts for ``token_budget`` and ``history_budget`` (default:
            the embedding model's tokenizer, a proxy for the LLM's; pass the provider's counter for exact
            budgets).
        stash: a stash store for this session's pruned context (default none).
        stash_session: the session name in the stash (default: a new random name; give the same name
            to find a session's segments again after a restart).
        stash_settings: how requests use the stash (:class:`StashSettings`; default its defaults).
        settings: overrides of the agent's settings for this session only (they win over the preset).
    """

    def __init__(
        self,
        agent: Agent,
        store: ChunkStore,
        *,
        preset: str | None = None,
        token_counter: Callable[[Sequence[str]], list[int]] | None = None,
        stash: StashStore | None = None,
        stash_session: str | None = None,
        stash_settings: StashSettings | None = None,
        offer: OfferConfig | None = None,
        **settings: Unpack[SettingsOverrides],
    ) -> None:
        self.agent = agent
        if offer is not None and not isinstance(offer, OfferConfig):
            raise InputError(f"offer must be an OfferConfig, got {brief(offer)}")
        self.offer = offer or OfferConfig()
        self._offered: dict[str, int] = {}  # stable offer: tool prompt name -> the last request that selected it
        self._outcomes: dict[str, dict[str, int]] = {}  # tool key -> offered / called / failed (record_outcome)
        self._requests = 0
        self.store = store
        self.settings: AgentSettings = agent.settings.with_overrides(preset, **settings)
        self._token_counter = token_counter
        self._token_memo: dict[ItemKey, tuple[Item, int]] = {}
        self._lock = threading.RLock()
        self.history: list[Message] = []
        self._stash = SessionStash(stash, stash_session, stash_settings)
        self._turn_start: int | None = None  # where the user message of the request being answered goes
        table = agent.table()
        always = [table.items[i] for i in np.flatnonzero(table.always)]  # rules, references, tools
        self._items: dict[ItemKey, IncludeMode] = {
            it.key: IncludeMode.ALWAYS
            for it in sorted(always, key=lambda it: _SESSION_ORDER[it.kind])  # stable
        }

    def add_note(self, note: str) -> None:
        """A note the next request's context carries (``context.notes``), e.g. what happened to the
        session between requests."""
        if not isinstance(note, str):
            raise InputError(f"a note must be a str, got {type(note).__name__}")
        with self._lock:
            self._stash.notes.append(check_text(note, "the note"))

    @property
    def stash_store(self) -> StashStore | None:
        """The session's stash store (``None``: no stash)."""
        return self._stash.store

    @property
    def stash_session(self) -> str:
        """The session's name in the stash."""
        return self._stash.session

    @property
    def stash_settings(self) -> StashSettings:
        """How requests use the stash (:class:`StashSettings`)."""
        return self._stash.settings

    # -- session items ----------------------------------------------------------------------------

    @_locked
    def items(self) -> list[tuple[ItemKey, IncludeMode]]:
        """Session items in order (always items as created, then manual items in the order added)."""
        return list(self._items.items())

    @_locked
    def record_tool_calls(self, message: str, calls: Iterable[ItemKey | str]) -> None:
        """Learning from use: the LLM called these tools after ``message``, so keep ``message`` as an
        example request of each (seeds 000/001). Later requests are scored against a tool's examples
        too (its example chunks, max-pooled with its own; at most ``ChunkConfig.max_examples`` per
        tool, newest first), so a request like this one finds the tools chosen for it.

        Args:
            message: the user message the calls answered (the request's ``context.message``).
            calls: tools as :class:`ItemKey`, ``"tool:SERVER:NAME"`` or ``"SERVER:NAME"``.

        Raises:
            UnknownItemError: a call names no tool of the agent. InputError: a blank message or one with
            lone surrogates. Nothing is recorded then.
        """
        keys = self._tool_keys(calls, "record_tool_calls")
        if keys:
            self.store.record_examples(message, keys)

    def _tool_keys(self, calls: Iterable[ItemKey | str], what: str) -> list[ItemKey]:
        """Tools named as :class:`ItemKey`, ``"tool:SERVER:NAME"``, ``"SERVER:NAME"`` or the offered
        name ``"SERVER_NAME"``; :class:`UnknownItemError` for a tool the agent does not have."""
        if isinstance(calls, (str, ItemKey)):
            raise InputError(f"{what} takes a list of tools, not one")
        offered = self.agent.tool_names()
        keys: list[ItemKey] = []
        for c in calls:
            if isinstance(c, str) and ":" not in c:  # the name a model called it by
                keys.append(offered.key(c))
                continue
            if isinstance(c, str) and c.count(":") == 1 and c.split(":")[0] not in {k.value for k in ItemKind}:
                c = "tool:" + c  # SERVER:NAME
            key = ItemKey.parse(c) if isinstance(c, str) else c
            if not isinstance(key, ItemKey) or key.kind is not ItemKind.TOOL:
                raise InputError(f"{what} takes tools, got {c!r:.80}")
            self.agent.get(key)  # UnknownItemError when the agent has no such tool
            keys.append(key)
        return list(dict.fromkeys(keys))

    def record_outcome(
        self, request: Request, called: Iterable[ItemKey | str], failed: Iterable[ItemKey | str] = ()
    ) -> dict[str, list[str]]:
        """Learning from what the model did with a request's offer (issue: tools offered and never
        called crowd out the ones needed). For ``request`` (built by this session):

        - each tool called and not failed becomes an example of it (as :meth:`record_tool_calls`:
          similar requests find it again);
        - each tool the request *selected* (include mode ``agent``) that the model did not call becomes
          a miss of it: a later request this close to the message loses it up to ``outcome_weight`` of
          ranking score (see :class:`~contextsieve.agent.agent.AgentSettings`); a later call of the tool for
          the same message removes the miss;
        - failed calls are counted, neither examples nor misses.

        Kept where the examples are (``usage.sqlite`` with ``remember_requests``, else memory), at
        most ``ChunkConfig.max_examples`` of each kind per tool, newest first. :attr:`outcomes` counts
        them per tool for this session; ``explain`` shows the effect; ``outcome_weight=0`` turns it
        off; :meth:`forget_outcomes` deletes the misses.

        Args:
            called: the tools the model called after this request (any form :meth:`record_tool_calls`
                takes, or the offered name ``SERVER_TOOL``).
            failed: those of ``called`` whose call failed.

        Returns:
            ``{"examples": [...], "misses": [...], "failed": [...]}``: the tool keys recorded as each.

        Raises:
            InputError: ``failed`` names a tool not in ``called``, or ``request`` has no message.
            UnknownItemError: a tool the agent does not have. Nothing is recorded then.
        """
        if not isinstance(request, Request):
            raise InputError(f"record_outcome takes a Request, got {brief(request)}")
        done = self._tool_keys(called, "called")
        bad = self._tool_keys(failed, "failed")
        if not set(bad) <= set(done):
            raise InputError(f"failed names tools that were not called: {[str(k) for k in bad if k not in done]}")
        message = request.message
        if not message.strip():
            raise InputError("record_outcome needs a request with a message")
        selected = [
            e.key for e in request.context.entries if e.key.kind is ItemKind.TOOL and e.mode is IncludeMode.AGENT
        ]
        good = [k for k in done if k not in bad]
        missed = [k for k in selected if k not in done and self.agent.has(k)]
        if good:
            self.store.record_examples(message, good)
        if missed:
            self.store.record_examples(message, missed, "misses")
        with self._lock:
            offered = {request.names[t["name"]] for t in request.tools if t["name"] in request.names}
            for key in (k for k in dict.fromkeys([*offered, *done]) if self.agent.has(k)):
                n = self._outcomes.setdefault(str(key), {"offered": 0, "called": 0, "failed": 0})
                n["offered"] += key in offered
                n["called"] += key in done
                n["failed"] += key in bad
        return {"examples": [str(k) for k in good], "misses": [str(k) for k in missed], "failed": [str(k) for k in bad]}

    @property
    def outcomes(self) -> dict[str, dict[str, int]]:
        """Per tool key, what :meth:`record_outcome` saw in this session: how many times it was
        offered, called, and failed (a copy)."""
        with self._lock:
            return {k: dict(v) for k, v in self._outcomes.items()}

    def forget_outcomes(self, key: ItemKey | str | None = None) -> int:
        """Delete the recorded misses of one tool (or of every tool of the agent); returns how many."""
        tool = None if key is None else self._tool_keys([key], "forget_outcomes")[0]
        return self.store.forget_examples(tool, "misses")

    @_locked
    def replace_items(self, items: Iterable[tuple[ItemKey | str, IncludeMode | str]]) -> None:
        """Set the session items as a whole, in order (what :meth:`items` returned, e.g. kept elsewhere
        and brought back). Every key is checked against the agent first: an unknown key
        (:class:`~contextsieve.errors.UnknownItemError`) or mode (:class:`InputError`) changes nothing."""
        new: dict[ItemKey, IncludeMode] = {}
        for key, mode in items:
            try:
                m = IncludeMode(mode)
            except ValueError as e:
                raise InputError(f"unknown include mode {brief(mode)}") from e
            new[self.agent.get(key).key] = m
        self._items = new

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
    def update_settings(self, preset: str | None = None, **settings: Unpack[SettingsOverrides]) -> None:
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

    def _search(self, chunks: Sequence[str], n_sentences: int | None = None) -> tuple[list[ContextEntry], SearchTrace]:
        return search(
            self.store,
            self.agent.table(),
            self._searchable(),
            self.settings,
            chunks,
            self.agent.server_descriptions(),
            n_sentences,
        )

    def query_chunks(self, message: str) -> list[str]:
        """The texts a request for ``message`` embeds: its sentences and, when a domain searches by
        steps, the task's steps (see :func:`contextsieve.retrieval.text.split_query`), at most
        ``max_query_chunks`` of each (``@rule:`` / ``@ref:`` mentions are not removed here)."""
        return self._query(message)[0]

    def _query(self, message: str) -> tuple[list[str], int, str]:
        s = self.settings
        steps = s.query_split == "steps" or (
            s.own_tool_domain and s.for_tools().query_split == "steps" and bool(self.agent.tools)
        )
        return _query(message, steps, s.max_query_chunks)

    def build_request(
        self, message: str, *, preset: str | None = None, **overrides: Unpack[SettingsOverrides]
    ) -> Request:
        """The request for ``message``: session items, plus agent-mode items chosen for this message only.

        Args:
            message: the user's message (``@rule:NAME`` / ``@ref:NAME`` mentions add items to the session).
            preset / overrides: settings for this request only (as :meth:`update_settings` takes them,
                validated the same way); the session's own settings are untouched.

        Safe to call from several threads: requests of one session run one at a time; requests of
        different sessions embed their messages in parallel and hold the agent (which waits with its
        changes) only while they select and assemble.
        """
        if not isinstance(message, str):
            raise InputError(f"message must be a str, got {type(message).__name__}")
        check_text(message, "the message")
        if preset is None and not overrides:
            with self._lock:
                return self._build_request(message)
        with self._lock:
            own = self.settings
            self.settings = own.with_overrides(preset, **overrides)  # validated before anything runs
            try:  # every reader of self.settings holds self._lock: nobody else sees this request's settings
                return self._build_request(message)
            finally:
                self.settings = own

    def search_tools(self, query: str, limit: int = 5) -> list[ToolMatch]:
        """The ``limit`` (1-50, default 5) tools this session may use that best fit ``query`` (whatever their include
        mode), best first: the selection's own search (dense and keyword together) over the tools,
        with no score threshold and no expansion. For a host's search tool; nothing is added to the
        session."""
        if not isinstance(query, str):
            raise InputError(f"query must be a str, got {type(query).__name__}")
        check_text(query, "the query")
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 50:
            raise InputError(f"limit must be an int from 1 to 50, got {limit!r}")
        with self._lock:
            base = self.settings.for_tools()
            settings = base.with_overrides(
                context_top_n=limit,
                context_top_k=min(100, max(base.context_top_k, 4 * limit)),  # the setting's range
                context_include_score=0.0,
                expansion_depth=0,
                min_representation_floor=None,
                token_budget=None,
            )
            chunks = query_chunks(query)[: settings.max_query_chunks]
            if chunks:
                self.store.embed_query(chunks)  # outside the agent's lock, as requests embed
            with self.agent.lock:
                table = self.agent.table()
                allowed = table.tool.copy()
                for i in np.flatnonzero(allowed).tolist():
                    it = table.items[i]
                    if isinstance(it, Tool) and not self._tool_available(it):
                        allowed[i] = False
                entries, _ = search(self.store, table, allowed, settings, chunks, self.agent.server_descriptions())
                names = self.agent.tool_names()
                out = []
                for e in entries[:limit]:
                    tool = self.agent.get(e.key)
                    if isinstance(tool, Tool):
                        out.append(ToolMatch(tool, float(e.score or 0.0), tool_definition(tool, names)))
                return out

    def _build_request(self, message: str) -> Request:
        """:meth:`build_request` under the session's lock, with the settings in force."""
        query = self._mentions(message)
        qchunks, n_sentences, cap_note = self._query(query)
        with self.agent.lock:
            searching = bool(qchunks) and bool(self._searchable().any())
        qvec = self.store.embed_query(qchunks) if searching else None  # the search below finds it kept
        have = None if qvec is None or cap_note else (qchunks[:n_sentences], qvec[:n_sentences])
        items_model = getattr(self.store.embedder, "model_id", None) if self.stash_store is not None else None
        retrieved, stash_trace = self._stash.retrieve(query, self.stash_settings.top_k, have, items_model)
        with self.agent.lock:
            request = self._build(query, qchunks, cap_note, retrieved, n_sentences, stash_trace)
        self._turn_start = len(self.history)
        return self._stable(request) if self.offer.mode == "stable" else request

    def new_task(self) -> None:
        """Start a new task: a stable offer (:class:`OfferConfig`) starts over from the next request."""
        with self._lock:
            self._offered.clear()

    def _stable(self, request: Request) -> Request:
        """``request`` with the session's stable offer as its tools (see :class:`OfferConfig`)."""
        self._requests += 1
        defs = {t["name"]: t for t in request.catalog}
        first = not self._offered
        chosen = [t["name"] for t in request.tools]
        if not first and self.offer.grow is not None:
            names = self.agent.tool_names()
            score = {names.name(e.key): e.score or 0.0 for e in request.context.entries if e.key.kind is ItemKind.TOOL}
            fresh = sorted((n for n in chosen if n not in self._offered), key=lambda n: -score.get(n, 0.0))
            chosen = [n for n in chosen if n in self._offered or n in fresh[: self.offer.grow]]
        for t in request.tools:
            defs.setdefault(t["name"], t)
        for n in chosen:
            self._offered[n] = self._requests  # a new name is appended; a known one keeps its place
        if first and self.offer.prefill and request.message.strip():
            room = self.offer.budget - len(self._offered)
            for m in self.search_tools(request.message, limit=min(50, self.offer.prefill))[: max(0, room)]:
                name = m.definition["name"]
                if name in defs:
                    self._offered.setdefault(name, 0)  # 0: selected by no request yet, the first to go
        over = len(self._offered) - self.offer.budget
        if over > 0:
            now = set(chosen)
            oldest = sorted((n for n in self._offered if n not in now), key=lambda n: self._offered[n])[:over]
            for n in oldest:
                del self._offered[n]
        gone = [n for n in self._offered if n not in defs]  # a tool the agent no longer has
        for n in gone:
            del self._offered[n]
        return dataclasses.replace(request, tools=[defs[n] for n in self._offered])

    def _build(
        self,
        query: str,
        qchunks: list[str],
        cap_note: str,
        retrieved: Sequence[Retrieved] = (),
        n_sentences: int | None = None,
        stash_trace: RetrieveTrace | None = None,
    ) -> Request:
        entries = [
            ContextEntry(k, m, priority=getattr(self.agent.get(k), "priority", None)) for k, m in self._items.items()
        ]
        found, trace = self._search(qchunks, n_sentences)
        entries += found
        s = self.settings
        recorded = context_settings(s)
        tokens: int | None = None
        dropped: list[Dropped] = []
        notes: list[str] = [cap_note] if cap_note else []
        notes += self._stash.notes
        self._stash.notes = []
        stashed, stash_texts, stash_dropped = self._stash.entries(retrieved)
        dropped += stash_dropped
        if retrieved:
            recorded["stash"] = self._stash.recorded_settings()
        if s.token_budget is not None:
            recorded["token_budget"] = s.token_budget
            kept, tokens, budget_dropped, budget_notes = fit_budget(
                [*entries, *stashed],
                s.token_budget,
                lambda e: (
                    self._stashed_tokens(e, stash_texts) if isinstance(e, StashedEntry) else self._item_tokens(e.key)
                ),
            )
            entries = [e for e in kept if isinstance(e, ContextEntry)]
            stashed = [e for e in kept if isinstance(e, StashedEntry)]
            dropped += budget_dropped
            notes += budget_notes
        ctx = RequestContext(
            tuple(entries), query, tuple(qchunks), recorded, tokens, tuple(dropped), tuple(notes), tuple(stashed)
        )
        return assemble(
            self.agent,
            ctx,
            query,
            (m.sent() for m in self.history),
            self._tool_available,
            trace,
            stash_texts,
            stash_trace,
        )

    @_locked
    def request_for(self, ctx: RequestContext, message: str) -> Request:
        """Rebuild the exact LLM request for a stored context (items are looked up now, by key; stashed
        segments deleted from the stash since are left out)."""
        texts = self._stash.texts_of(ctx)
        return assemble(self.agent, ctx, message, (m.sent() for m in self.history), self._tool_available, None, texts)

    def _stashed_tokens(self, e: StashedEntry, texts: dict[str, str]) -> int:
        counter = self._token_counter or self.store.embedder.count_tokens
        return int(counter([stashed_text(e, texts[e.segment_id])])[0])

    def _item_tokens(self, key: ItemKey) -> int:
        """Tokens the item adds to the request (its message, or its tool definition), memoised per item."""
        item = self.agent.get(key)
        memo = self._token_memo.get(key)
        if memo is not None and memo[0] is item:
            return memo[1]
        counter = self._token_counter or self.store.embedder.count_tokens
        n = int(counter([item_text(item, self.agent.tool_names())])[0])
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
        include score and top-N, promotion, expansion, token-budget drops).

        ``key`` may also be ``stash:<segment id>``: why a stashed segment is or is not brought back."""
        if isinstance(key, str) and key.startswith("stash:"):
            return self._explain_stashed(message, key[len("stash:") :])
        item = self.agent.get(key)
        saved, notes, turn = dict(self._items), list(self._stash.notes), self._turn_start
        try:
            request = self.build_request(message)
            in_session = self._items.get(item.key)
        finally:
            self._items, self._stash.notes, self._turn_start = saved, notes, turn
        available = not isinstance(item, Tool) or self._tool_available(item)
        return explain_item(
            item.key,
            request,
            session_mode=in_session,
            include_mode=self.agent.include_mode(item),
            tool_available=available,
            item=item,
        )

    def _explain_stashed(self, message: str, segment_id: str) -> Explanation:
        """Why a stashed segment is or is not in the request for ``message``: the request is built once
        and its retrieve trace read (see :meth:`SessionStash.explain`)."""
        self._stash.owned(segment_id)  # UnknownSegmentError before any work
        saved, notes, turn = dict(self._items), list(self._stash.notes), self._turn_start
        try:
            request = self.build_request(message)
        finally:
            self._items, self._stash.notes, self._turn_start = saved, notes, turn
        return self._stash.explain(segment_id, request.context, request.message, request.stash_trace)

    @_locked
    def record_reply(self, request: Request, reply: str) -> Message:
        """Append the user message and the assistant reply (carrying its request context) to the history
        (then, with a ``history_budget``, stash the oldest messages while the history is over it)."""
        at = self._turn_start if self._turn_start is not None else len(self.history)
        self.history.insert(min(at, len(self.history)), Message("user", request.message))  # before its tool results
        self._turn_start = None
        msg = Message("assistant", reply, request.context)
        self.history.append(msg)
        self._keep_history_budget()
        return msg

    @_locked
    def add_message(self, role: str, content: str, *, name: str | None = None) -> Message:
        """Append a message to the history: ``user``, ``assistant``, or ``tool`` (a tool result; ``name``
        the tool). With a ``history_budget``, the oldest messages are then stashed while over it."""
        if role not in _ROLES:
            raise InputError(f"role must be one of {', '.join(_ROLES)}, got {brief(role)}")
        if not isinstance(content, str):
            raise InputError(f"content must be a str, got {type(content).__name__}")
        check_text(content, f"the {role} message")
        if name is not None and (not isinstance(name, str) or role != "tool"):
            raise InputError("name is the tool's name, a str, for tool messages only")
        msg = Message(role, content, name=name)
        self.history.append(msg)
        self._keep_history_budget()
        return msg

    # -- the stash --------------------------------------------------------------------------------

    @_locked
    def stash(self, segments: Iterable[object], *, show_progress: bool = False) -> StashResult:
        """Stash segments in this session's part of the stash (what
        :meth:`~contextsieve.stash.StashStore.stash` takes: a text, a mapping or a ``NewSegment``, or a
        list of them)."""
        return self._stash.stash(segments, show_progress=show_progress)

    def _latest_turn(self) -> int:
        """Index of the latest turn's first message: while a request is being answered, the first
        message added since it was built; else the last user message (len(history) if none)."""
        if self._turn_start is not None:
            return min(self._turn_start, len(self.history))
        for i in range(len(self.history) - 1, -1, -1):
            if self.history[i].role == "user":
                return i
        return len(self.history)

    @_locked
    def stash_history(self, count: int | None = None) -> StashResult:
        """Move the oldest ``count`` messages and tool results of the history into the stash (default:
        all before the latest turn; never the latest turn). Each becomes a ``message`` segment with
        the message's time, source ``session:<role>`` (``tool:<name>`` for tool results).

        All or nothing: if stashing fails, the history is unchanged.
        """
        limit = self._latest_turn()
        if count is None:
            count = limit
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise InputError(f"count must be an int >= 0, got {brief(count)}")
        return self._stash_messages(min(count, limit))

    def _stash_messages(self, n: int) -> StashResult:
        """Move the oldest ``n`` history messages into the stash (all or none)."""
        moved = [StashedMessage(m.content, m.role, m.name, m.created) for m in self.history[:n]]
        result = self._stash.stash_messages(moved)
        del self.history[:n]
        if self._turn_start is not None:
            self._turn_start = max(0, self._turn_start - n)
        return result

    def _keep_history_budget(self) -> None:
        counter = self._token_counter or self.store.embedder.count_tokens
        n, freed = self._stash.over_budget([m.sent()[1] for m in self.history], self._latest_turn(), counter)
        if n == 0:
            return
        result = self._stash_messages(n)
        self._stash.notes.append(
            f"{n} message{'s' if n != 1 else ''} ({freed} tokens) moved to the stash to keep the history under "
            f"{self.stash_settings.history_budget} tokens ({result.stashed} stored, {result.duplicates} already there)"
        )

    # -- persistence ------------------------------------------------------------------------------

    @_locked
    def to_dict(self) -> dict[str, Any]:
        return {
            "settings": {
                k: dict(v) if k == "tool_settings" and v is not None else v for k, v in self.settings.__dict__.items()
            },
            "items": [{"key": str(k), "mode": m.value} for k, m in self._items.items()],
            "history": [m.to_dict() for m in self.history],
            "stash_session": self.stash_session,
        }

    def save(self, path: str | Path) -> None:
        """Write history, items and settings as JSON (temp file + rename)."""
        atomic_write_bytes(Path(path), json.dumps(self.to_dict(), indent=1).encode("utf-8"))

    @classmethod
    def load(
        cls,
        path: str | Path,
        agent: Agent,
        store: ChunkStore,
        *,
        stash: StashStore | None = None,
        stash_settings: StashSettings | None = None,
    ) -> Session:
        """Read a session saved by :meth:`save` for ``agent`` (with ``stash``, it finds its stashed
        segments again); :class:`SessionFileError` if the file cannot be read or does not fit the agent
        (unknown items or settings)."""
        try:
            d = json.loads(Path(path).read_text(encoding="utf-8"))
            s = cls(
                agent,
                store,
                stash=stash,
                stash_session=d.get("stash_session"),
                stash_settings=stash_settings,
                **d["settings"],
            )
            items = {ItemKey.parse(i["key"]): IncludeMode(i["mode"]) for i in d["items"]}
            for k in items:
                agent.get(k)
            s._items = items
            s.history = [Message.from_dict(m) for m in d["history"]]
        except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError, ContextSieveError) as e:
            raise SessionFileError(f"cannot load session {path}: {e}") from e
        return s
