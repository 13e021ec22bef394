"""The tool choice behind :class:`~contextsieve.integrations.openai_agents.ContextSieveToolFilter`
(extra ``openai-agents``): one choice per model call of an Agents SDK run, made once and shared by every
tool the SDK asks about (:class:`CallChoices`). It keeps the tools of the filter's MCP servers and
function tools for the selector (a server not listed yet is listed once ahead, a changed list is synced
before the next choice), the tool results of each run, and the record of choices; a choice that fails
lets every tool through (``fail_open``) or raises :class:`~contextsieve.errors.ToolChoiceError`. It
also finds what the model called in its reply to a choice, for learning from use (:meth:`CallChoices.to_learn`).
:class:`EnabledByChoice` is a function tool's ``is_enabled`` asking the same choice."""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import logging
import threading
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from contextsieve.errors import InputError, MissingExtraError, ToolChoiceError, brief
from contextsieve.integrations.selector import DEFAULT_SERVER, ToolSelector, ToolSpec, learn_calls
from contextsieve.integrations.tool_choice import Choice, FailedChoice, failed_choice

try:
    from agents import FunctionTool, RunContextWrapper
except ImportError as e:  # pragma: no cover - exercised without the extra
    raise MissingExtraError(
        "the OpenAI Agents SDK integration needs openai-agents: pip install 'contextsieve[openai-agents]'"
    ) from e

__all__ = ["CallChoices", "EnabledByChoice", "Turn", "field_of", "mcp_spec"]

#: the integration's logger (its records keep the name of the module users import)
logger = logging.getLogger("contextsieve.integrations.openai_agents")

#: set while the filter lists a server ahead of its turn (its own answers are then all True)
_PRIMING: contextvars.ContextVar[bool] = contextvars.ContextVar("contextsieve_openai_agents_priming", default=False)
#: choices kept in :attr:`CallChoices.choices`
_HISTORY = 100
#: tool results kept per run (the selection reads the last 4)
_RESULTS = 8
#: replies recorded, remembered so that none is recorded twice (per filter)
_REPLIES = 1000
#: the integration's name in warnings and errors
_WHERE = "OpenAI Agents SDK ContextSieveToolFilter"


def field_of(item: object, key: str) -> Any:
    """A field of an input item, a dict or an object."""
    return item.get(key) if isinstance(item, Mapping) else getattr(item, key, None)


def mcp_spec(tool: Any, server: str) -> ToolSpec:
    """An MCP tool (``mcp.types.Tool`` of MCP 1 or 2) as contextsieve ranks it."""
    schema = getattr(tool, "input_schema", None)
    if schema is None:
        schema = getattr(tool, "inputSchema", None)
    return ToolSpec(str(tool.name), getattr(tool, "description", None) or "", dict(schema or {}), server)


@dataclass(frozen=True)
class Turn:
    """The answer for one model call of a run: ``names`` None lets every tool through; ``error`` is
    raised to every tool asked (``fail_open=False``). In ``key`` a message of ``None`` is a
    ``message_of`` that failed."""

    key: tuple[int, str | None, int]
    version: int
    names: frozenset[str] | None
    choice: Choice | None
    error: BaseException | None = None


class _Run:
    """What the filter keeps for one run (identified by its ``Usage`` object, which the run's context
    and every tool context of the run share)."""

    __slots__ = ("ref", "results", "count", "turn", "pending", "taught")

    def __init__(self, usage: object) -> None:
        self.ref = weakref.ref(usage)
        self.results: list[str] = []
        self.count = 0
        self.turn: Turn | None = None
        self.pending: tuple[tuple[int, str | None, int], asyncio.Future[Turn]] | None = None
        self.taught: tuple[Choice, set[str]] | None = None  # the latest choice learned from, its tools recorded


class CallChoices:
    """The state and the choices of one :class:`~contextsieve.integrations.openai_agents.ContextSieveToolFilter`
    (``owner``: the tools of the MCP servers whose ``tool_filter`` it is are its tools).

    Args:
        owner: the filter (the MCP servers' ``tool_filter``).
        selector: the selector to use, or ``None``: one built on the first choice with ``options``
            (:meth:`ToolSelector.from_tools`' keyword arguments).
        options: ``always_include``, ``max_tools``, ``offer``, ``embedder``, ``cache_dir`` for a built selector.
        message_of: the message a model call's tools are chosen for, from the run context.
        sync: keep the selector's tools equal to what the servers list.
        fail_open: a failed choice lets every tool through (``True``) or raises ``ToolChoiceError``.

    Thread- and task-safe: runs may share it; each run's choices are its own.
    """

    def __init__(
        self,
        owner: object,
        selector: ToolSelector | None,
        options: dict[str, Any],
        message_of: Callable[[RunContextWrapper[Any]], str],
        sync: bool,
        fail_open: bool,
    ) -> None:
        self.owner = owner
        self.selector = selector
        self._options = options
        self._message_of = message_of
        self._sync = sync
        self.fail_open = fail_open
        self._lock = threading.RLock()  # the filter's state (taken briefly, also on the event loop)
        self._build = threading.Lock()  # building and syncing the selector (worker threads only)
        self._tools: dict[str, dict[str, ToolSpec]] = {}  # server -> name -> spec: what the selector should hold
        self._dirty: set[str] = set()  # servers whose tools changed since the selector last synced
        self._version = 0
        self._primed: set[str] = set()
        self._runs: dict[int, _Run] = {}
        self._replies: dict[tuple[str, tuple[str, ...]], Literal[True]] = {}  # (message, call ids) recorded
        self.choices: list[Choice | FailedChoice] = []
        """The choices made so far (newest last; the last 100)."""
        self.last_error: Exception | None = None
        """The error of the latest model call whose choice failed (``None`` while none failed)."""

    def last_choice(self) -> Choice | FailedChoice | None:
        """The latest choice made (``None`` before the first)."""
        with self._lock:
            return self.choices[-1] if self.choices else None

    async def allows(self, server: str, agent: Any, run_context: RunContextWrapper[Any], tool: Any) -> bool:
        """Whether ``tool`` of the MCP server ``server`` is sent to this model call of ``agent`` (the
        MCP ``tool_filter``'s answer)."""
        if _PRIMING.get():
            return True
        spec = mcp_spec(tool, server)
        with self._lock:
            known = self._tools.get(spec.server, {}).get(spec.name) == spec
        if not known:
            self._absorb(agent, spec)
        turn = await self.turn(run_context, agent, skip=spec.server)
        return turn.names is None or spec.name in turn.names

    def add_function_tools(self, specs: list[ToolSpec]) -> None:
        """Function tools (group :data:`DEFAULT_SERVER`) join the selection; a changed one replaces its
        old spec."""
        with self._lock:
            group = self._tools.setdefault(DEFAULT_SERVER, {})
            for s in specs:
                if group.get(s.name) != s:
                    group[s.name] = s
                    self._dirty.add(DEFAULT_SERVER)
                    self._version += 1

    def add_tool_result(self, context: RunContextWrapper[Any], result: object) -> None:
        """Record a tool result of the run of ``context`` (the last :data:`_RESULTS` are kept)."""
        run = self._run(context)
        with self._lock:
            run.results = [*run.results[-(_RESULTS - 1) :], _result_text(result)]
            run.count += 1

    def to_learn(self, context: RunContextWrapper[Any], agent: Any, response: Any) -> tuple[Choice, list[str]] | None:
        """The choice of the run's current model call of ``agent`` and the tools the model called in
        ``response`` (its function calls) that are not recorded yet: each reply once (by its call ids
        and the choice's message, across runs), each tool once per choice; ``None``: nothing to record
        (no call, no choice of this agent's call, a call that failed open)."""
        calls = [i for i in field_of(response, "output") or () if field_of(i, "type") == "function_call"]
        names = [n for n in (field_of(i, "name") for i in calls) if isinstance(n, str)]
        if not names:
            return None
        run = self._run(context)
        with self._lock:
            turn = run.turn
            choice = turn.choice if turn is not None and turn.key[0] == id(agent) else None
            if choice is None:
                return None
            reply = (choice.request.message, tuple(str(field_of(i, "call_id")) for i in calls))
            if reply in self._replies:
                return None
            self._replies[reply] = True
            while len(self._replies) > _REPLIES:
                del self._replies[next(iter(self._replies))]
            if run.taught is None or run.taught[0] is not choice:
                run.taught = (choice, set())
            new = [n for n in dict.fromkeys(names) if n not in run.taught[1]]
            run.taught[1].update(new)
        return (choice, new) if new else None

    def learn(self, choice: Choice, called: list[str]) -> None:
        """Record ``called`` against ``choice`` (in a worker thread: it embeds), failing open."""
        _, error = learn_calls(self.selector, choice, called)
        if error is not None:
            with self._lock:
                self.last_error = error

    def _run(self, context: RunContextWrapper[Any]) -> _Run:
        usage = context.usage
        with self._lock:
            run = self._runs.get(id(usage))
            if run is None or run.ref() is not usage:
                for key in [k for k, r in self._runs.items() if r.ref() is None]:
                    del self._runs[key]
                run = self._runs[id(usage)] = _Run(usage)
            return run

    def _absorb(self, agent: Any, spec: ToolSpec) -> None:
        """A tool not known yet (or changed): take its server's whole list when the server has it
        (``cached_tools`` holds the listing being filtered), else add the one tool."""
        server = _server_named(agent, spec.server)
        listed = getattr(server, "cached_tools", None) if server is not None else None
        specs = [mcp_spec(t, spec.server) for t in listed or []]
        with self._lock:
            if any(s == spec for s in specs):
                self._replace(spec.server, specs)
            else:
                group = self._tools.setdefault(spec.server, {})
                group[spec.name] = spec
                self._dirty.add(spec.server)
                self._version += 1

    def _replace(self, server: str, specs: list[ToolSpec]) -> None:
        new = {s.name: s for s in specs}
        if self._tools.get(server) != new:
            self._tools[server] = new
            self._dirty.add(server)
            self._version += 1

    async def _refresh(self, run_context: RunContextWrapper[Any], agent: Any, skip: str | None) -> None:
        """Take the current lists of this filter's servers of ``agent``; list once ahead a server
        never listed (but ``skip``, the one being listed), so the first call's choice sees them all."""
        for server in getattr(agent, "mcp_servers", None) or ():
            if getattr(server, "tool_filter", None) is not self.owner:
                continue
            name = server.name
            listed = getattr(server, "cached_tools", None)
            with self._lock:
                prime = listed is None and name != skip and name not in self._primed
                if prime:
                    self._primed.add(name)
            if prime:
                token = _PRIMING.set(True)
                try:
                    await server.list_tools(run_context, agent)
                except Exception as e:  # not connected, failing: known by its tools when it is listed
                    logger.warning("contextsieve: could not list the tools of MCP server %r ahead: %s", name, e)
                finally:
                    _PRIMING.reset(token)
                listed = getattr(server, "cached_tools", None)
            if listed is not None:
                specs = [mcp_spec(t, name) for t in listed]
                with self._lock:
                    self._replace(name, specs)

    def _available(self, agent: Any) -> list[str] | None:
        """The names of the tools ``agent`` could get through this filter (None: no agent to ask)."""
        if agent is None:
            return None
        names: list[str] = []
        with self._lock:
            for server in getattr(agent, "mcp_servers", None) or ():
                if getattr(server, "tool_filter", None) is self.owner:
                    names.extend(self._tools.get(server.name, {}))
        for t in getattr(agent, "tools", None) or ():
            if isinstance(t, FunctionTool) and isinstance(t.is_enabled, EnabledByChoice) and t.is_enabled.owner is self:
                names.append(t.name)
        return names

    async def turn(self, run_context: RunContextWrapper[Any], agent: Any, skip: str | None = None) -> Turn:
        """The run's answer for the current model call: made once, shared by every tool asked."""
        run = self._run(run_context)
        failure: Exception | None = None
        message: str | None
        try:
            message = self._message_of(run_context)
            if not isinstance(message, str):
                raise InputError(f"message_of must return a str, got {brief(message)}")
        except Exception as e:  # failed: the call's choice fails open in _compute (one warning, not one per tool)
            message, failure = None, e
        with self._lock:
            key = (id(agent), message, run.count)
            turn = run.turn
            if turn is not None and turn.key == key and turn.version == self._version:
                return self._answer(turn)
            pending = run.pending
            if pending is None or pending[0] != key or pending[1].done():
                task = asyncio.ensure_future(self._compute(run, run_context, agent, message, key, skip, failure))
                run.pending = pending = (key, task)
        return self._answer(await asyncio.shield(pending[1]))

    def _answer(self, turn: Turn) -> Turn:
        if turn.error is not None:
            raise turn.error
        return turn

    async def _compute(
        self,
        run: _Run,
        run_context: RunContextWrapper[Any],
        agent: Any,
        message: str | None,
        key: tuple[int, str | None, int],
        skip: str | None,
        failure: Exception | None = None,
    ) -> Turn:
        with self._lock:
            results = tuple(run.results)
        try:
            await self._refresh(run_context, agent, skip)
            with self._lock:
                version = self._version
            if failure is not None:
                raise failure
            if message is None or not message.strip():  # (None only with a failure)
                turn = Turn(key, version, None, None)
            else:
                available = self._available(agent)
                choice = await asyncio.to_thread(self._select, message, results, available)
                turn = Turn(key, version, frozenset(choice.tools), choice)
                with self._lock:
                    self.choices = [*self.choices[-(_HISTORY - 1) :], choice]
        except Exception as e:
            with self._lock:
                self.last_error = e
                version = self._version
            every = self._every(agent)
            try:
                failed = failed_choice(e, every, fail_open=self.fail_open, where=_WHERE)
            except ToolChoiceError as raised:  # fail_open=False: every tool asked gets it
                turn = Turn(key, version, None, None, raised)
            else:
                with self._lock:
                    self.choices = [*self.choices[-(_HISTORY - 1) :], failed]
                turn = Turn(key, version, None, None)
        with self._lock:
            run.turn = turn
        return turn

    def _every(self, agent: Any) -> list[str]:
        """The names of every tool the call may get through this filter (those of ``agent``, or every
        tool known without one), for the record of a call that failed open."""
        names = self._available(agent)
        if names is None:
            with self._lock:
                names = [n for group in self._tools.values() for n in group]
        return names

    def _select(self, message: str, results: tuple[str, ...], available: list[str] | None) -> Choice:
        """Build or sync the selector, then choose (in a worker thread: it embeds on the CPU)."""
        with self._build:
            with self._lock:
                dirty = {s: list(self._tools.get(s, {}).values()) for s in self._dirty}
                every = [s for group in self._tools.values() for s in group.values()]
            if self.selector is None:
                self.selector = ToolSelector.from_tools(every, **self._options)
            elif self._sync and dirty:
                self.selector.sync([s for specs in dirty.values() for s in specs], servers=list(dirty))
            with self._lock:
                self._dirty.difference_update(dirty)
            selector = self.selector
        return selector.choose(message, tool_results=results, available=available)


class EnabledByChoice:
    """A function tool's ``is_enabled`` asking the filter's choice (after the tool's own)."""

    def __init__(self, owner: CallChoices, name: str, inner: Any) -> None:
        self.owner = owner
        self.name = name
        self.inner = inner

    async def __call__(self, run_context: RunContextWrapper[Any], agent: Any) -> bool:
        if callable(self.inner):
            own = self.inner(run_context, agent)
            if inspect.isawaitable(own):
                own = await own
            if not own:
                return False
        turn = await self.owner.turn(run_context, agent)
        return turn.names is None or self.name in turn.names


def _result_text(result: object) -> str:
    """The text of a tool's output: a str as it is, the ``text`` of text parts (``{"type": "input_text",
    "text": ...}`` dicts, as MCP tools return, or ``ToolOutputText`` objects) joined by newlines, other
    parts (images, files) left out; anything else as ``str``."""
    if isinstance(result, str):
        return result
    if isinstance(result, (list, tuple)):
        return "\n".join(t for t in (_result_text(r) for r in result) if t)
    text = field_of(result, "text")
    if isinstance(text, str):
        return text
    if field_of(result, "type") is not None:
        return ""  # an image or file part
    return str(result)


def _server_named(agent: Any, name: str) -> Any:
    for server in getattr(agent, "mcp_servers", None) or ():
        if getattr(server, "name", None) == name:
            return server
    return None
