"""contextsieve in the OpenAI Agents SDK (extra ``openai-agents``: ``openai-agents`` 0.24).

:class:`ContextSieveToolFilter` chooses, for each model call, which tools the model gets, by
contextsieve's selection for the conversation's latest user message (and, with
:class:`ContextSieveHooks`, the tool results since). It plugs into the SDK's own hooks:

- MCP servers: it is a dynamic ``tool_filter`` (``MCPServerStdio(..., tool_filter=sieve)``; one
  filter may serve every server of an agent). The SDK lists each server's tools before every model
  call and asks the filter once per tool; the filter makes one choice per model call over the tools
  of all its servers and answers every tool from it. Without a ``selector`` it builds one from the
  tools it sees (name, description, ``inputSchema``; the server's name as the group) and keeps it in
  step when a server's list changes.
- Plain function tools: :meth:`ContextSieveToolFilter.function_tools` returns copies whose
  ``is_enabled`` asks the same choice (the SDK evaluates ``is_enabled`` before every model call).
- Rules and references of a contextsieve agent: :meth:`ContextSieveToolFilter.instructions` is a
  dynamic ``instructions`` callable that adds the ones chosen for the call to the system prompt.

Each choice is recorded (:attr:`ContextSieveToolFilter.last_choice`, :attr:`~ContextSieveToolFilter.choices`:
the tools chosen, those the tool results proposed, those ``max_tools`` cut, and the request context
saying why each is in). Learning from use: with :class:`ContextSieveHooks` (``on_llm_end``) the tools
the model calls in its reply to a choice become examples of the choice's message
(:meth:`ContextSieveToolFilter.record_response`, :meth:`ToolSelector.record_calls`).

The stash: :func:`stash_tools` gives the agent ``stash_context``, ``retrieve_stashed_context`` and
``merge_stashed_context`` as function tools over a :class:`~contextsieve.stash.store.StashStore` (the same
tools ``contextsieve serve --stash`` offers over MCP). It is deliberately *not* an SDK ``Session``:
a ``Session`` must give back every conversation item verbatim and in order (function calls and
their outputs included, a repeated ``"ok"`` twice), while the stash keeps one copy of an exact text
per session, replaces credentials by placeholders before storing, and is read by meaning, not by
position. A ``Session`` over it would be a lossy ``SQLiteSession``; keep the history in one of the
SDK's sessions and give the model the stash as memory it reads and writes by meaning.

What the SDK's hooks cannot express (see also the limits in :class:`ContextSieveToolFilter`):

- The filter's context holds the run's input (``run_context.turn_input``: the input the run was
  started with, history of an SDK session included), not the items generated during the run, so the
  tool results of the run reach the selection only through :class:`ContextSieveHooks` (``on_tool_end``)
  or :meth:`ContextSieveToolFilter.add_tool_result` from the user's own hooks.
- The filter is asked per tool and per server, never with the whole list nor told when a listing
  starts: the full list is read from the server's ``cached_tools`` (filled before filtering), a
  server of the agent not listed yet is listed once ahead, and a server without ``cached_tools`` is
  known by the tools asked about so far.
- The SDK catches a filter's exceptions and leaves the tool out (logged), so a failing selection
  cannot surface as an error there: by default (``fail_open=True``) every tool is offered instead
  (whatever failed: ``message_of``, listing, building or syncing the selector, choosing), the call is
  recorded as a :class:`~contextsieve.integrations.tool_choice.FailedChoice`, one warning is logged and
  :attr:`ContextSieveToolFilter.last_error` holds the error. With ``fail_open=False`` a
  :class:`~contextsieve.errors.ToolChoiceError` is raised: the SDK then drops every MCP tool (logging
  each), while a function tool's ``is_enabled`` or :meth:`ContextSieveToolFilter.instructions` fails
  the run with it.
- A filter only says yes or no: the tools reach the model in the servers' order (MCP tools first,
  then function tools), not in the choice's order, and a tool cannot be renamed or re-described.

The per-call choice itself (the tools kept for the selector, each run's tool results, failing open) is
:class:`~contextsieve.integrations.openai_agents_choice.CallChoices`, which the filter holds.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import json
import os
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypedDict

from contextsieve.errors import ContextSieveError, InputError, MissingExtraError, ToolArgumentError, brief
from contextsieve.integrations.openai_agents_choice import CallChoices, EnabledByChoice, field_of
from contextsieve.integrations.selector import DEFAULT_SERVER, ToolSelector, ToolSpec
from contextsieve.integrations.stash_tools import (
    FRAMEWORK_STASH_TOOLS,
    agent_namespace,
    stash_scope,
    stash_tool_defs,
)
from contextsieve.integrations.tool_choice import Choice, FailedChoice, check_fail_open, error_text, logger
from contextsieve.retrieval.embedding import TextEmbedder
from contextsieve.session.agent_tools import AgentTool
from contextsieve.session.offer import OfferConfig
from contextsieve.stash.options import DEFAULT_SESSION
from contextsieve.stash.segment import check_session
from contextsieve.stash.store import StashStore

try:
    from agents import FunctionTool, ModelResponse, RunContextWrapper, RunHooks
    from agents.mcp import ToolFilterContext
except ImportError as e:  # pragma: no cover - exercised without the extra
    raise MissingExtraError(
        "the OpenAI Agents SDK integration needs openai-agents: pip install 'contextsieve[openai-agents]'"
    ) from e

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = [
    "ContextSieveToolFilter",
    "ContextSieveHooks",
    "FilterOptions",
    "latest_user_message",
    "stash_tools",
]


class FilterOptions(TypedDict, total=False):
    """The keyword arguments a :class:`ContextSieveToolFilter` builds its selector with when it is
    given none (:meth:`ToolSelector.from_tools`'s of these names; each optional). With a given
    ``selector`` give them to it instead: passing both is an :class:`InputError`.

    Attributes:
        always_include: tool names always sent, not counted against ``max_tools`` (default none).
        max_tools: most tools chosen per call besides ``always_include`` (default ``None``: the
            selection's own cut, ``tool_top_n`` and its score threshold).
        offer: how tools are offered across calls (:class:`~contextsieve.OfferConfig`; default per
            call; ``OfferConfig(mode="stable")`` keeps the tools array the same within a task).
        embedder: :class:`~contextsieve.Engine`'s embedder (default ``None``: MiniLM).
        cache_dir: :class:`~contextsieve.Engine`'s embedding cache (default ``None``: the user's cache).
    """

    always_include: Iterable[str]
    max_tools: int | None
    offer: OfferConfig | None
    embedder: TextEmbedder | None
    cache_dir: str | os.PathLike[str] | bool | None


#: the names of :class:`FilterOptions`
_FILTER_OPTIONS = ("always_include", "max_tools", "offer", "embedder", "cache_dir")


def latest_user_message(run_context: RunContextWrapper[Any]) -> str:
    """The text of the latest user message of the run's input (``run_context.turn_input``, which the
    SDK sets before it lists the tools of a model call); ``""`` when it holds none. Text parts of a
    multi-part message are joined by newlines; images and files are left out."""
    items = getattr(run_context, "turn_input", None) or []
    for item in reversed(items):
        if field_of(item, "role") != "user" or field_of(item, "type") not in (None, "message"):
            continue
        content = field_of(item, "content")
        if isinstance(content, str):
            return content
        parts = [field_of(p, "text") for p in content or []]
        return "\n".join(p for p in parts if isinstance(p, str) and p)
    return ""


class ContextSieveToolFilter:
    """One contextsieve choice of tools per model call, for the SDK's MCP servers and function tools.

    Use it as the ``tool_filter`` of the agent's MCP servers, and (optionally) wrap the agent's
    function tools with :meth:`function_tools`, its instructions with :meth:`instructions`, and pass
    :class:`ContextSieveHooks` to ``Runner.run(..., hooks=...)`` so tool results count::

        sieve = ContextSieveToolFilter(always_include=["get_current_time"])
        server = MCPServerStdio(params={...}, name="workspace", tool_filter=sieve)
        agent = Agent(name="assistant", mcp_servers=[server], tools=sieve.function_tools([...]))
        await Runner.run(agent, "...", hooks=ContextSieveHooks(sieve))

    Args:
        selector: the selector to use (e.g. ``ToolSelector(Engine.from_file(path).session())`` over an
            agent file, whose rules and references :meth:`instructions` then adds). Default ``None``:
            one built on the first model call from the tools the filter sees
            (:meth:`ToolSelector.from_tools` with ``**options``).
        **options: how that selector is built (:class:`FilterOptions`, each described there):
            ``always_include`` (tool names always sent, not counted against ``max_tools``),
            ``max_tools``, ``offer``, ``embedder`` and ``cache_dir``. With a given ``selector`` give
            them to it instead (passing both is an :class:`InputError`).
        message_of: the message a model call's tools are chosen for, from the run context (default
            :func:`latest_user_message`). A call without one lets every tool through; one that raises
            or returns something else than a str fails the call's choice (see ``fail_open``).
        sync: keep the selector's tools equal to what the servers list (default ``True``: new tools
            are added, changed ones replaced, dropped ones removed); ``False`` leaves a given
            selector's agent as it is (tools it does not know are then never sent).
        fail_open: when a choice fails for any reason (``message_of``, listing a server ahead,
            building or syncing the selector, choosing), let every tool through for that call, record
            a :class:`FailedChoice` in :attr:`choices`, log one warning and keep the error in
            :attr:`last_error` (default ``True``, as without contextsieve); ``False`` raises
            :class:`~contextsieve.errors.ToolChoiceError` (the error as its cause): the SDK then
            leaves each MCP tool out (and logs), while a function tool's ``is_enabled`` or
            :meth:`instructions` fails the run with it.

    Learning from use: :class:`ContextSieveHooks` hands each model reply to :meth:`record_response`,
    which records the tools the reply called as examples of the choice's message (see there).

    Limits: one choice per (run, agent, message, tool results recorded); a server whose list changes
    in the middle of a model call makes a new choice, so servers asked before it answered from the
    old one. Tools are matched by their own names: with ``mcp_config={"include_server_in_tool_names":
    True}`` two servers' tools of one name are both sent when either is chosen. An approval resume
    lists the tools again and gets the same choice only if the selection is unchanged.

    Thread- and task-safe: runs may share one filter; each run's choices are its own.
    """

    def __init__(
        self,
        selector: ToolSelector | None = None,
        *,
        message_of: Callable[[RunContextWrapper[Any]], str] | None = None,
        sync: bool = True,
        fail_open: bool = True,
        **options: Unpack[FilterOptions],
    ) -> None:
        unknown = [k for k in options if k not in _FILTER_OPTIONS]
        if unknown:
            raise TypeError(f"ContextSieveToolFilter.__init__() got an unexpected keyword argument {unknown[0]!r}")
        always_include: Iterable[str] = options.get("always_include", ())
        max_tools, offer = options.get("max_tools"), options.get("offer")
        embedder, cache_dir = options.get("embedder"), options.get("cache_dir")
        if selector is not None and not isinstance(selector, ToolSelector):
            raise InputError(f"selector must be a ToolSelector, got {brief(selector)}")
        if isinstance(always_include, str):
            raise InputError("always_include must be a list of tool names, not one str")
        always = tuple(always_include)
        if not all(isinstance(n, str) for n in always):
            raise InputError(f"always_include must hold tool names, got {brief(always)}")
        if max_tools is not None and (isinstance(max_tools, bool) or not isinstance(max_tools, int) or max_tools < 1):
            raise InputError(f"max_tools must be None or an int >= 1, got {brief(max_tools)}")
        if offer is not None and not isinstance(offer, OfferConfig):
            raise InputError(f"offer must be an OfferConfig, got {brief(offer)}")
        given = {"always_include": always, "max_tools": max_tools, "offer": offer, "embedder": embedder}
        if selector is not None and (any(given.values()) or cache_dir is not None):
            named = [k for k, v in given.items() if v] + (["cache_dir"] if cache_dir is not None else [])
            raise InputError(f"with a selector, give {', '.join(named)} to the ToolSelector itself")
        if message_of is not None and not callable(message_of):
            raise InputError(f"message_of must be callable, got {brief(message_of)}")
        if not isinstance(sync, bool):
            raise InputError(f"sync must be True or False, got {brief(sync)}")
        self._state = CallChoices(
            self,
            selector,
            {**given, "cache_dir": cache_dir},
            message_of or latest_user_message,
            sync,
            check_fail_open(fail_open),
        )

    @property
    def selector(self) -> ToolSelector | None:
        """The selector choosing (``None`` until the first choice builds one, without a given selector)."""
        return self._state.selector

    @selector.setter
    def selector(self, value: ToolSelector | None) -> None:
        self._state.selector = value

    @property
    def fail_open(self) -> bool:
        """Whether a failed choice lets every tool through (see the class's ``fail_open``)."""
        return self._state.fail_open

    @fail_open.setter
    def fail_open(self, value: bool) -> None:
        self._state.fail_open = value

    @property
    def choices(self) -> list[Choice | FailedChoice]:
        """The choices made so far (newest last; the last 100); a model call that failed open has a
        :class:`FailedChoice` (``failed_open`` ``True``, every tool, the error)."""
        return self._state.choices

    @choices.setter
    def choices(self, value: list[Choice | FailedChoice]) -> None:
        self._state.choices = value

    @property
    def last_error(self) -> Exception | None:
        """The error of the latest model call whose choice, or recording of whose reply
        (:meth:`record_response`), failed (``None`` while none failed)."""
        return self._state.last_error

    @last_error.setter
    def last_error(self, value: Exception | None) -> None:
        self._state.last_error = value

    @property
    def last_choice(self) -> Choice | FailedChoice | None:
        """The latest choice made (``None`` before the first): ``.tools``, ``.proposed``, ``.dropped``,
        ``.request.context.grouped_text()`` for why each item is in, ``.to_dict()``; a
        :class:`FailedChoice` (``.failed_open``, ``.error``; ``.request`` ``None``) when it failed open."""
        return self._state.last_choice()

    # -- the SDK's hooks ---------------------------------------------------------------------------

    async def __call__(self, context: ToolFilterContext, tool: Any) -> bool:
        """The MCP ``tool_filter``: whether ``tool`` of ``context.server_name`` is sent to this model
        call (one choice per call answers every tool of every server using this filter)."""
        return await self._state.allows(context.server_name, context.agent, context.run_context, tool)

    def function_tools(self, tools: Iterable[FunctionTool]) -> list[FunctionTool]:
        """Copies of ``tools`` whose ``is_enabled`` also asks this filter's choice (a tool's own
        ``is_enabled`` still applies first; one that is ``False`` is returned as it is). Their names,
        descriptions and parameter schemas join the selection (group :data:`DEFAULT_SERVER`)."""
        if isinstance(tools, FunctionTool):
            raise InputError("function_tools takes a list of FunctionTool, not one")
        out: list[FunctionTool] = []
        specs: list[ToolSpec] = []
        for t in tools:
            if not isinstance(t, FunctionTool):
                raise InputError(f"function_tools takes FunctionTool objects (@function_tool), got {brief(t)}")
            if t.is_enabled is False:
                out.append(t)
                continue
            wrapped = copy.copy(t)
            wrapped.is_enabled = EnabledByChoice(self._state, t.name, t.is_enabled)
            out.append(wrapped)
            specs.append(ToolSpec(t.name, t.description or "", t.params_json_schema or {}, DEFAULT_SERVER))
        self._state.add_function_tools(specs)
        return out

    def instructions(self, base: str = "") -> Callable[[RunContextWrapper[Any], Any], Awaitable[str]]:
        """A dynamic ``Agent(instructions=...)``: ``base`` (default ``""``) followed by the rules and
        references chosen for the call (:attr:`Choice.instructions`; nothing more without any)."""
        if not isinstance(base, str):
            raise InputError(f"base must be a str, got {brief(base)}")

        async def instructions(run_context: RunContextWrapper[Any], agent: Any) -> str:
            turn = await self._state.turn(run_context, agent)
            extra = turn.choice.instructions if turn.choice is not None else ""
            return "\n\n".join(p for p in (base, extra) if p)

        return instructions

    def add_tool_result(self, context: RunContextWrapper[Any], result: object) -> None:
        """Record a tool result of the run of ``context`` (a run or tool context): the next model
        call's choice reads it (tools it points to are proposed). :class:`ContextSieveHooks` calls this."""
        self._state.add_tool_result(context, result)

    async def record_response(self, context: RunContextWrapper[Any], agent: Any, response: ModelResponse) -> None:
        """Learning from use: the tools the model called in ``response`` (its function calls; the
        SDK's ``on_llm_end``, which :class:`ContextSieveHooks` passes on) become examples of the message
        of the choice the call of ``agent`` got (:meth:`ToolSelector.record_calls`: those it offered; no
        misses). Each reply is recorded once (a resumed run handing it on again records nothing), each
        tool once per choice; nothing for a call that failed open or got no choice of this filter. Kept
        with the selector's engine's history (an agent made in code: in memory; see
        docs/selection.md), forgotten with ``sieve.selector.session.store.forget_examples(key)`` (or
        ``contextsieve history AGENT --forget`` for an agent file's engine). Fails open: an error is
        logged (one warning) and kept in :attr:`last_error`, never raised into the run."""
        try:
            todo = self._state.to_learn(context, agent, response)
        except Exception as e:  # the reply cannot be read: the run goes on without this lesson
            self.last_error = e
            logger.warning("contextsieve: the tools the model called were not recorded (%s)", error_text(e))
            return
        if todo is not None:
            await asyncio.to_thread(self._state.learn, *todo)


class ContextSieveHooks(RunHooks[Any]):
    """Run hooks that hand each tool result to ``sieve`` (:meth:`ContextSieveToolFilter.add_tool_result`),
    so the next model call's choice reads them, and each model reply
    (:meth:`ContextSieveToolFilter.record_response`), so the tools it called are learned:
    ``Runner.run(agent, input, hooks=ContextSieveHooks(sieve))``. Subclass it (calling
    ``super().on_tool_end`` and ``super().on_llm_end``) to add hooks of your own."""

    def __init__(self, sieve: ContextSieveToolFilter) -> None:
        if not isinstance(sieve, ContextSieveToolFilter):
            raise InputError(f"sieve must be a ContextSieveToolFilter, got {brief(sieve)}")
        self.sieve = sieve

    async def on_tool_end(self, context: RunContextWrapper[Any], agent: Any, tool: Any, result: object) -> None:
        """Record the result of a tool call of the run."""
        self.sieve.add_tool_result(context, result)

    async def on_llm_end(self, context: RunContextWrapper[Any], agent: Any, response: ModelResponse) -> None:
        """Record the tools the model called in its reply (learning from use; fails open)."""
        await self.sieve.record_response(context, agent, response)


# -- the stash as function tools ---------------------------------------------------------------------


def stash_tools(
    store: StashStore,
    *,
    agent: object = None,
    session: str | Callable[[RunContextWrapper[Any]], str] | None = None,
    max_segments: int = 1000,
    cross_session: bool = False,
    tools: Sequence[str] = FRAMEWORK_STASH_TOOLS,
) -> list[FunctionTool]:
    """The stash as function tools for an ``Agent(tools=...)`` (by default ``stash_context``,
    ``retrieve_stashed_context`` and ``merge_stashed_context``): the definitions of
    :mod:`contextsieve.session.agent_tools`, the same names, descriptions, argument schemas and results as
    ``contextsieve serve --stash`` offers. The store's work runs in a worker thread.

    Args:
        store: the stash store (``StashStore.open(path)``).
        agent: whose stash it is (an :class:`~contextsieve.Agent`, :class:`~contextsieve.Engine` or
            :class:`~contextsieve.integrations.selector.ToolSelector`): the tools read and write its own
            namespace, ``agent:<identity>``, as ``contextsieve serve`` does.
        session: instead of ``agent``, the stash namespace the tools read and write, or a function of
            the run context giving it per run (e.g. ``lambda ctx: ctx.context.user_id``), so users of
            one agent keep to their own segments (one of ``agent`` and ``session`` is needed).
        max_segments: most segments one ``stash_context`` call may carry (default 1,000).
        cross_session: retrieval searches every session of the store (default False).
        tools: which stash tools, by name (any of :data:`~contextsieve.session.stash_agent_tools.STASH_TOOLS`).

    A bad argument or a store error reaches the model as the tool's output ``"Error: <why>"`` (as the
    SDK answers a failing function tool).
    """
    if callable(session) and agent is not None:
        raise InputError("stash_tools: give agent= (its own namespace) or session= (a namespace you name), not both")
    base = stash_scope(
        store,
        session=DEFAULT_SESSION if callable(session) else agent_namespace(agent, session, "stash_tools"),
        max_segments=max_segments,
        cross_session=cross_session,
    )

    def make(tool: AgentTool) -> FunctionTool:
        async def invoke(ctx: RunContextWrapper[Any], raw: str) -> str:
            try:
                try:
                    arguments = json.loads(raw or "{}")
                except ValueError as e:
                    raise ToolArgumentError(f"{tool.name}: the arguments are not JSON ({e})") from e
                name = check_session(session(ctx)) if callable(session) else base.session
                result = await asyncio.to_thread(tool.call, dataclasses.replace(base, session=name), arguments)
            except ContextSieveError as e:  # what the model reads, as the SDK does for a function tool's error
                return f"Error: {e}"
            return json.dumps(result, ensure_ascii=False)

        return FunctionTool(
            name=tool.name,
            description=tool.description,
            params_json_schema=tool.input_schema(),
            on_invoke_tool=invoke,
            strict_json_schema=False,
        )

    return [make(t) for t in stash_tool_defs(tools)]
