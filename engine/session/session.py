"""Sessions: their own context items, settings and history; the work is delegated.

A :class:`Session` is a thin facade: it holds a session's state and its lock, and each job lives in
a module of its own (:mod:`~contextsieve.session.session_items`: the items it holds;
:mod:`~contextsieve.session.requests`: building a request (the search of
:func:`contextsieve.selection.search.search`, the token budget and
:mod:`contextsieve.session.assembly`), the tool search and a tool result's proposals;
:mod:`~contextsieve.session.offer`: a stable offer; :mod:`~contextsieve.session.outcomes`: learning
from what the model did; :mod:`~contextsieve.session.explain`: why an item is in a request;
:mod:`~contextsieve.session.stash_link`: the stash's part).

A session given a :class:`~contextsieve.stash.store.StashStore` (seeds 000 + 004) can stash its messages
and tool results, keep its history under a token budget by stashing the oldest ones, and brings
the stashed segments relevant to each message back into the request (include mode ``stash``).
"""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from contextsieve.agent.agent import Agent
from contextsieve.agent.items import IncludeMode, ItemKey, Tool
from contextsieve.agent.settings import AgentSettings, SettingsOverrides
from contextsieve.errors import ContextSieveError, InputError, SessionFileError, brief, check_text
from contextsieve.fileio import atomic_write_bytes, read_user_file
from contextsieve.selection.chunk_store import ChunkStore
from contextsieve.selection.context import RequestContext
from contextsieve.session import requests
from contextsieve.session.assembly import Request, assemble
from contextsieve.session.explain import Explanation, explain_item
from contextsieve.session.messages import Message, new_message
from contextsieve.session.offer import OfferConfig, StableOffer
from contextsieve.session.outcomes import Outcomes, tool_keys
from contextsieve.session.requests import RequestBuilder, TokenCounts, ToolMatch
from contextsieve.session.session_items import SessionItems, tool_available
from contextsieve.session.stash_link import SessionStash, StashedMessage, StashSettings
from contextsieve.session.task_tools import TaskState

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from contextsieve.stash.results import StashResult
    from contextsieve.stash.store import StashStore

__all__ = ["Session"]

_F = TypeVar("_F", bound=Callable[..., Any])


def _locked(method: _F) -> _F:
    """Run ``method`` holding the session's lock, then the agent's (always in that order)."""

    @functools.wraps(method)
    def run(self: Session, *args: Any, **kwargs: Any) -> Any:
        with self._lock, self.agent.lock:
            return method(self, *args, **kwargs)

    return run  # type: ignore[return-value]


class Session:
    """A chat session over an agent.

    At creation it holds the agent's ``always`` items: references, then rules (each by priority, then
    name), then tools (server, then tool order). The user may add or remove any item; an ``always``
    item removed stays removed for this session, and adding it back makes it ``manual``.

    Args:
        agent: the agent (the source of truth for items).
        store: chunk vectors of the agent's items (shared by the agent's sessions).
        preset: ``"aggressive"``, ``"normal"``, ``"conservative"`` or ``"reference"`` (see
            :data:`contextsieve.agent.settings.PRESETS`).
        token_counter: counts the tokens of texts for ``token_budget`` and ``history_budget`` (default:
            the embedding model's tokenizer, a proxy for the LLM's; pass the provider's counter for exact
            budgets).
        stash: this session's stash for its pruned context: a :class:`SessionStash` (the store, the
            session's name in it and :class:`StashSettings`), or a stash store alone (a new random
            name, default settings); default none. :meth:`Engine.session
            <contextsieve.engine.Engine.session>` takes the three apart.
        settings: overrides of the agent's settings for this session only (they win over the preset).
    """

    def __init__(
        self,
        agent: Agent,
        store: ChunkStore,
        *,
        preset: str | None = None,
        token_counter: Callable[[Sequence[str]], list[int]] | None = None,
        stash: SessionStash | StashStore | None = None,
        offer: OfferConfig | None = None,
        **settings: Unpack[SettingsOverrides],
    ) -> None:
        self.agent = agent
        if offer is not None and not isinstance(offer, OfferConfig):
            raise InputError(f"offer must be an OfferConfig, got {brief(offer)}")
        self.offer = offer or OfferConfig()
        self._stable = StableOffer(self.offer)
        self._task = TaskState()
        self._outcomes = Outcomes()
        self.store = store
        self.settings: AgentSettings = agent.settings.with_overrides(preset, **settings)
        self._tokens = TokenCounts(token_counter, store)
        self._lock = threading.RLock()
        self.history: list[Message] = []
        self._stash = stash if isinstance(stash, SessionStash) else SessionStash(stash)
        self._builder = RequestBuilder(agent, store, self._stash, self._tokens)
        self._turn_start: int | None = None  # where the user message of the request being answered goes
        self._items = SessionItems(agent)

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
        self._items.sync(self.agent)
        return self._items.items()

    @_locked
    def record_tool_calls(self, message: str, calls: Iterable[ItemKey | str]) -> None:
        """Learning from use: the LLM called these tools after ``message``, so keep ``message`` as an
        example request of each (seeds 000/001). Later requests are scored against a tool's examples
        too (its example chunks, max-pooled with its own; at most ``ChunkConfig.max_examples`` per
        tool, newest first), so a request like this one finds the tools chosen for it. When ``message`` is
        the latest request's and that request is a later step of this session's task, the calls become
        examples of the task's first message (a step's words say little alone).

        Args:
            message: the user message the calls answered (the request's ``context.message``).
            calls: tools as :class:`ItemKey`, ``"tool:SERVER:NAME"`` or ``"SERVER:NAME"``.

        Raises:
            UnknownItemError: a call names no tool of the agent. InputError: a blank message or one with
            lone surrogates. Nothing is recorded then.
        """
        if not isinstance(message, str):
            raise InputError(f"record_tool_calls takes the user message as a str, got {brief(message)}")
        keys = tool_keys(self.agent, calls, "record_tool_calls")
        if keys:
            with self._lock:
                if isinstance(message, str):
                    self._task.calls(message, keys)
                    message = self._task.told(message)
            self.store.record_examples(message, keys)

    def record_outcome(
        self, request: Request, called: Iterable[ItemKey | str], failed: Iterable[ItemKey | str] = ()
    ) -> dict[str, list[str]]:
        """Learning from what the model did with a request's offer (issue: tools offered and never
        called crowd out the ones needed). For ``request`` (built by this session):

        - each tool called and not failed becomes an example of it (as :meth:`record_tool_calls`:
          similar requests find it again);
        - each tool the request *selected* (include mode ``agent``) that the model did not call becomes
          a miss of it: a later request this close to the message loses it up to ``outcome_weight`` of
          ranking score (see :class:`~contextsieve.agent.settings.AgentSettings`); a later call of the tool for
          the same message removes the miss;
        - failed calls are counted, neither examples nor misses;
        - for a later step of a task (the request context's ``task_step``), the calls become examples of
          the task's first message instead of the step's (a step's words say little alone), and no
          misses are recorded (a tool the task offered early may be called at a later step).

        Kept where the examples are (the agent's ``history.sqlite`` in the data folder for an agent loaded
        from a file, else memory; the request's text only with ``remember_requests``); a search reads at
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
        done, bad = self._outcomes.checked(self.agent, request, called, failed)
        step = bool(request.context.settings.get("task_step"))
        with self._lock:
            task_message = request.task
            if step and task_message is None and request.message in (self._task.message, self._task.last):
                task_message = self._task.message  # rebuilt from a stored context, of the task under way
        recorded = Outcomes.learn(self.agent, self.store, request, done, bad, task_message, step)
        with self._lock:
            self._outcomes.count(self.agent, request, done, bad)
            self._task.calls(request.message, [k for k in done if k not in bad])
        return recorded

    @property
    def outcomes(self) -> dict[str, dict[str, int]]:
        """Per tool key, what :meth:`record_outcome` saw in this session: how many times it was
        offered, called, and failed (a copy)."""
        with self._lock:
            return self._outcomes.copy()

    def forget_outcomes(self, key: ItemKey | str | None = None) -> int:
        """Delete the recorded misses of one tool (or of every tool of the agent); returns how many."""
        tool = None if key is None else tool_keys(self.agent, [key], "forget_outcomes")[0]
        return self.store.forget_examples(tool, "misses")

    @_locked
    def replace_items(self, items: Iterable[tuple[ItemKey | str, IncludeMode | str]]) -> None:
        """Set the session items as a whole, in order (what :meth:`items` returned, e.g. kept elsewhere
        and brought back). Every key is checked against the agent first: an unknown key
        (:class:`~contextsieve.errors.UnknownItemError`) or mode (:class:`InputError`) changes nothing."""
        self._items.replace(self.agent, items)

    @_locked
    def add(self, key: ItemKey | str) -> None:
        """Add an item as ``manual`` (unknown keys raise :class:`~contextsieve.errors.UnknownItemError`)."""
        self._items.add(self.agent, key)

    @_locked
    def remove(self, key: ItemKey | str) -> None:
        """Remove an item from this session (it stays removed, even if ``always``)."""
        self._items.remove(self.agent, key)

    @_locked
    def update_settings(self, preset: str | None = None, **settings: Unpack[SettingsOverrides]) -> None:
        """Override settings (or apply a preset) for this session from now on."""
        self.settings = self.settings.with_overrides(preset, **settings)

    def tool_available(self, tool: Tool) -> bool:
        """Whether this session may offer ``tool``: an autonomous agent's sessions drop tools that
        would need approval (``tool_permission``)."""
        return tool_available(self.agent, self.settings, tool)

    # -- requests ---------------------------------------------------------------------------------

    def query_chunks(self, message: str) -> list[str]:
        """The texts a request for ``message`` embeds: its sentences and, when a domain searches by
        steps, the task's steps (see :func:`contextsieve.retrieval.text.split_query`), at most
        ``max_query_chunks`` of each (``@rule:`` / ``@ref:`` mentions are not removed here)."""
        return list(requests.query_of(message, self.settings, self.agent).chunks)

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
        with self._lock:
            return requests.search_tools(self.store, self.agent, self.settings, query, limit)

    def _build_request(self, message: str) -> Request:
        """:meth:`build_request` under the session's lock, with the settings in force."""
        self._items.sync(self.agent)  # always items the agent gained since (a server listed late)
        query = self._items.take_mentions(self.agent, message)
        if self._task.requests and not self._task.replied:  # no reply since: the last request was a task of its own
            self._task.start()
        request = self._builder.build(query, self.settings, self._items, (m.sent() for m in self.history), self._task)
        self._turn_start = len(self.history)
        if self.offer.mode != "stable":
            return request
        return self._stable.apply(request, self.agent, lambda message, limit: self.search_tools(message, limit))

    def new_task(self) -> None:
        """Start a new task: the next request's message is the task's, and a stable offer
        (:class:`OfferConfig`) starts over from the next request (unless its ``span`` is the session).
        A task's later requests (after a reply to it was recorded with :meth:`record_reply`) are its
        steps: they size their offer by their message and carry ``task_tools`` of the task's tools (see
        :class:`AgentSettings`). A request made with no reply recorded since the last one starts a new
        task by itself."""
        with self._lock:
            if self.offer.span == "task":
                self._stable.new_task()
            self._task.start()

    def continue_task(self) -> None:
        """The next request is a step of the current task, as after :meth:`record_reply` (for a replay
        of a recorded session, whose replies are already in the history: the inspect page). Without a
        request in the task yet, the next request starts it."""
        with self._lock:
            self._task.replied = True

    @_locked
    def request_for(self, ctx: RequestContext, message: str) -> Request:
        """Rebuild the exact LLM request for a stored context (items are looked up now, by key; stashed
        segments deleted from the stash since are left out)."""
        texts = self._stash.texts_of(ctx)
        return assemble(self.agent, ctx, message, (m.sent() for m in self.history), self.settings, None, texts)

    @_locked
    def expand_from(self, text: str, *, max_chunks: int = 16) -> RequestContext:
        """Items a tool result points to: ``text`` is split into sentences, as a message is, and they
        search the agent-mode items not in the session by the same pipeline (max over sentences, so
        each thing the result mentions can pull its own item).

        Returns a :class:`RequestContext` of proposals (``via="tool-result"``); nothing is added to the
        session. At most ``max_chunks`` sentences are used (the first ones; default 16), each cut at
        500 characters.
        """
        mask = self._items.searchable(self.agent, self.settings)
        return requests.expand_from(self.store, self.agent, mask, self.settings, text, max_chunks)

    @_locked
    def explain(self, message: str, key: ItemKey | str, *, new_task: bool = False) -> Explanation:
        """Why ``key`` is or is not in the request for ``message`` (the session is left unchanged): the
        request is built once and its search trace read (item scores per query sentence, the rank of
        its best chunk against the top-K chunk cut, its rank among the grouped items against the
        include score and top-N, promotion, expansion, token-budget drops).

        ``key`` may also be ``stash:<segment id>``: why a stashed segment is or is not brought back.
        ``new_task``: explain the request as a task's first (as after :meth:`new_task`, what MCP's
        ``select_context`` builds for each user message); default ``False``: as the session's next
        request (a step of its task when a reply was recorded since)."""
        if isinstance(key, str) and key.startswith("stash:"):
            return self._explain_stashed(message, key[len("stash:") :])
        item = self.agent.get(key)
        saved, notes, turn, task = dict(self._items.modes), list(self._stash.notes), self._turn_start, self._task
        self._task = TaskState() if new_task else task.copy()
        try:
            request = self.build_request(message)
            in_session = self._items.modes.get(item.key)
        finally:
            self._items.modes, self._stash.notes, self._turn_start, self._task = saved, notes, turn, task
        available = not isinstance(item, Tool) or self.tool_available(item)
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
        saved, notes, turn, task = dict(self._items.modes), list(self._stash.notes), self._turn_start, self._task
        self._task = task.copy()
        try:
            request = self.build_request(message)
        finally:
            self._items.modes, self._stash.notes, self._turn_start, self._task = saved, notes, turn, task
        return self._stash.explain(segment_id, request.context, request.message, request.stash_trace)

    @_locked
    def record_reply(self, request: Request, reply: str) -> Message:
        """Append the user message and the assistant reply (carrying its request context) to the history
        (then, with a ``history_budget``, stash the oldest messages while the history is over it).

        Raises:
            InputError: ``request`` is no :class:`Request`, or ``reply`` is no str or holds lone
                surrogates (as :meth:`add_message`). Nothing is appended then."""
        if not isinstance(request, Request):
            raise InputError(f"record_reply takes the Request the reply answers, got {brief(request)}")
        new_message("assistant", reply)  # checked as add_message checks it
        at = self._turn_start if self._turn_start is not None else len(self.history)
        self.history.insert(min(at, len(self.history)), Message("user", request.message))  # before its tool results
        self._turn_start = None
        self._task.replied = True  # the task goes on: the next request is one of its steps
        msg = Message("assistant", reply, request.context)
        self.history.append(msg)
        self._keep_history_budget()
        return msg

    @_locked
    def add_message(self, role: str, content: str, *, name: str | None = None) -> Message:
        """Append a message to the history: ``user``, ``assistant``, or ``tool`` (a tool result; ``name``
        the tool). With a ``history_budget``, the oldest messages are then stashed while over it."""
        msg = new_message(role, content, name)
        self.history.append(msg)
        self._keep_history_budget()
        return msg

    # -- the stash --------------------------------------------------------------------------------

    @_locked
    def stash(self, segments: Iterable[object], *, show_progress: bool = False) -> StashResult:
        """Stash segments in this session's part of the stash (what
        :meth:`~contextsieve.stash.store.StashStore.stash` takes: a text, a mapping or a ``NewSegment``, or a
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
        counter = self._tokens.counter or self.store.embedder.count_tokens
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
            "settings": self.settings.as_dict(),
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
            # a regular file only (a FIFO would wait forever), of any size (save writes no cap)
            d = json.loads(read_user_file(Path(path), "the session file", None).decode("utf-8"))
            s = cls(
                agent,
                store,
                stash=SessionStash(stash, d.get("stash_session"), stash_settings),
                **d["settings"],
            )
            s._items.replace(agent, [(ItemKey.parse(i["key"]), IncludeMode(i["mode"])) for i in d["items"]])
            s.history = [Message.from_dict(m) for m in d["history"]]
        except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError, ContextSieveError) as e:
            raise SessionFileError(f"cannot load session {path}: {e}") from e
        return s
