"""contextsieve in Pydantic AI agents (extra ``pydantic-ai``: ``pydantic-ai-slim`` 2.68).

:class:`SelectedToolset` wraps a toolset (a ``FunctionToolset``, an ``MCPToolset``, which needs
``pydantic-ai-slim[mcp]``, a ``CombinedToolset`` of several) and offers, at each run step, only the
tools contextsieve chooses for the conversation's latest user prompt and the tool returns since it
(one contextsieve request per step). The rules and
references of a contextsieve agent chosen for the step are added to the instructions, and every
step's :class:`~contextsieve.integrations.tool_choice.Choice` is kept (:attr:`SelectedToolset.choices`).
A step whose choice fails (for any reason: the embedder, the cache, a tool description that is not
valid Unicode) is offered every wrapped tool, recorded as a
:class:`~contextsieve.integrations.tool_choice.FailedChoice`, logged once (a warning) and its error kept
in :attr:`SelectedToolset.last_error`; with ``fail_open=False`` the step raises
:class:`~contextsieve.errors.ToolChoiceError` instead. Learning from use: the tools the model calls
in its reply to a step's choice become examples of the step's message
(:meth:`~contextsieve.integrations.selector.ToolSelector.record_calls`, once per reply; see
:class:`SelectedToolset`).

:func:`stash_toolset` offers a :class:`~contextsieve.stash.store.StashStore` as tools: stash context, find
it again by meaning, merge it back (the MCP server's ``stash_context``,
``retrieve_stashed_context`` and ``merge_stashed_context``).
"""

from __future__ import annotations

import copy
import threading
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from contextsieve.errors import InputError, MissingExtraError, UnknownSegmentError, brief
from contextsieve.integrations.selector import SELECTOR_OPTIONS, SelectorOptions, ToolSelector, ToolSpec, learn_calls
from contextsieve.integrations.stash_tools import (
    FRAMEWORK_STASH_TOOLS,
    agent_namespace,
    stash_scope,
    stash_tool_defs,
)
from contextsieve.integrations.tool_choice import (
    Choice,
    FailedChoice,
    check_fail_open,
    error_text,
    failed_choice,
    logger,
)
from contextsieve.session.agent_tools import AgentTool
from contextsieve.stash.store import StashStore

try:
    import anyio.to_thread
    from pydantic_ai.exceptions import ModelRetry
    from pydantic_ai.messages import (
        InstructionPart,
        ModelMessage,
        ModelRequest,
        ModelResponse,
        ToolReturnPart,
        UserPromptPart,
    )
    from pydantic_ai.tools import AgentDepsT, RunContext, Tool
    from pydantic_ai.toolsets import AbstractToolset, FunctionToolset, WrapperToolset
    from pydantic_ai.toolsets.abstract import ToolsetTool
except ImportError as e:  # pragma: no cover - exercised without the extra
    raise MissingExtraError(
        "the Pydantic AI integration needs pydantic-ai-slim: pip install 'contextsieve[pydantic-ai]'"
    ) from e

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["KEPT_CHOICES", "SelectedToolset", "stash_toolset"]

_T = TypeVar("_T")

#: how many of the latest choices a :class:`SelectedToolset` keeps
KEPT_CHOICES = 100
#: characters of a tool return read for the query (the selection reads at most 16 sentences of 500)
_RESULT_CHARS = 8000
#: tool returns read per step (:meth:`ToolSelector.choose` reads the last 4)
_RESULTS = 4


#: from_tools keyword arguments that are options (:class:`SelectorOptions`, defined with
#: :class:`ToolSelector` and kept importable from here; the others are SelectedToolset's own arguments)
_OPTIONS = SELECTOR_OPTIONS
#: the integration's name in warnings and errors
_WHERE = "Pydantic AI SelectedToolset"


class _Selection:
    """What every copy of one :class:`SelectedToolset` shares (Pydantic AI copies toolsets with
    ``dataclasses.replace`` per run step): the selector, the tools it was last synced to, the choices."""

    def __init__(
        self,
        selector: ToolSelector | None,
        always_include: tuple[str, ...],
        max_tools: int | None,
        sync: bool,
        options: dict[str, Any],
        fail_open: bool,
    ) -> None:
        self.selector = selector
        self.always_include = always_include
        self.max_tools = max_tools
        self.sync = sync
        self.options = options
        self.fail_open = fail_open
        self.specs: list[ToolSpec] | None = None
        self.key: tuple[Any, ...] | None = None
        self.choices: deque[Choice | FailedChoice] = deque(maxlen=KEPT_CHOICES)
        self.steps: dict[tuple[Any, ...], Choice | FailedChoice] = {}  # (run id, run step) -> its choice
        self.learned: dict[tuple[Any, ...], None] = {}  # the (run id, run step) whose reply was recorded
        self.last_error: Exception | None = None
        self.lock = threading.Lock()

    def choose(
        self, specs: list[ToolSpec], message: str, results: list[str], key: tuple[Any, ...]
    ) -> Choice | FailedChoice:
        """The choice for one step (runs in a worker thread: it embeds). A second call of the same step
        with the same query and tools returns the first one's choice (or failure)."""
        with self.lock:
            if key == self.key and self.choices:
                return self.choices[-1]
            try:
                if self.selector is None:
                    self.selector = ToolSelector.from_tools(
                        specs, always_include=self.always_include, max_tools=self.max_tools, **self.options
                    )
                    self.specs = copy.deepcopy(specs)
                elif self.sync and specs != self.specs:
                    self.selector.sync(specs)
                    self.specs = copy.deepcopy(specs)
                choice: Choice | FailedChoice = self.selector.choose(
                    message, tool_results=results, available=[s.name for s in specs]
                )
            except Exception as e:
                self.last_error = e
                choice = failed_choice(e, [s.name for s in specs], fail_open=self.fail_open, where=_WHERE)
            self.choices.append(choice)
            self.key = key
            _remember(self.steps, key[:2], choice)
            return choice

    def to_learn(self, ctx: RunContext[Any]) -> tuple[Choice, list[str]] | None:
        """The choice of ``ctx``'s step and the tools the model called in its reply to it, once per
        step (the reply is the last message, made in this run); ``None``: nothing (more) to record."""
        step = (ctx.run_id, ctx.run_step)
        reply = ctx.messages[-1] if ctx.messages else None
        if ctx.run_id is None or not isinstance(reply, ModelResponse) or reply.run_id != ctx.run_id:
            return None  # a reply of an earlier run (a resumed history): recorded by that run, if at all
        with self.lock:
            choice = self.steps.get(step)
            if step in self.learned or not isinstance(choice, Choice):
                return None
            _remember(self.learned, step, None)
        return choice, [c.tool_name for c in reply.tool_calls]

    def learn(self, choice: Choice, called: list[str]) -> None:
        """Record ``called`` against ``choice`` (in a worker thread: it embeds), failing open."""
        _, error = learn_calls(self.selector, choice, called)
        if error is not None:
            with self.lock:
                self.last_error = error

    def failed(self, error: Exception, names: list[str]) -> FailedChoice:
        """Record a step that failed before it reached :meth:`choose` (reading the messages or tools)."""
        with self.lock:
            self.last_error = error
            choice = failed_choice(error, names, fail_open=self.fail_open, where=_WHERE)
            self.choices.append(choice)
            self.key = None
            return choice


@dataclass(init=False)
class SelectedToolset(WrapperToolset[AgentDepsT]):
    """A toolset offering, per run step, only the tools of ``wrapped`` that contextsieve chooses.

    The query of a step is the latest user prompt of ``ctx.messages`` (its text parts) and the
    tool returns since it (the last 4 are read: they may point to more tools). Tools the model called
    in a response still waiting for its tool returns (a run resumed from such a history) are offered
    too. The rules and references chosen (:attr:`Choice.instructions`, empty without any) are added to
    the wrapped toolset's instructions.

    Args:
        wrapped: the toolset whose tools are chosen from (function tools, MCP servers, a
            ``CombinedToolset`` of several; its tool names are the ones the model sees).
        selector: the :class:`ToolSelector` to choose with (default ``None``: one built on the first
            step with :meth:`ToolSelector.from_tools` from the wrapped tools' names, descriptions and
            parameter schemas, and the ``options``).
        always_include: tool names always offered, not counted in ``max_tools`` (default none); only
            without ``selector`` (a selector has its own).
        max_tools: most tools chosen per step besides ``always_include`` (default ``None``: the
            selection's own cut); only without ``selector``.
        sync: keep the selector's tools equal to the wrapped toolset's when its tool list changes (an
            MCP server's, a ``FunctionToolset`` added to; checked every step, re-embedded only when
            changed). Default ``None``: on for a selector built here, off for a given one, whose
            tools the wrapped ones are matched to by name (a wrapped tool it does not know is never
            offered).
        **options: :meth:`ToolSelector.from_tools`'s other arguments (:class:`SelectorOptions`),
            e.g. ``embedder=``, ``cache_dir=False``, ``offer=OfferConfig(mode="stable")`` (the offer
            only grows within a task, so the tools sent stay the same from step to step), ``rules=``.
        fail_open: when a step's choice fails (building or syncing the selector included), offer that
            step every wrapped tool, record a :class:`FailedChoice` and log one warning (default
            ``True``: never fewer tools than without contextsieve); ``False`` raises
            :class:`~contextsieve.errors.ToolChoiceError` (the error as its cause), which ends the run.

    One instance is one contextsieve session (its offer and history span runs): give each
    conversation its own (``agent.run(..., toolsets=[SelectedToolset(...)])``). The choice runs in
    a worker thread, so the event loop is not blocked while the query is embedded.

    Learning from use: when the first tool of a model reply is called (:meth:`call_tool`), the tools
    that reply called become examples of the step's message (:meth:`ToolSelector.record_calls`: those
    the step's choice offered; no misses), once per reply (a durable replay of the step does not
    record it again). A reply from an earlier run (a resumed history with calls still to make) is not
    recorded, nor is a step that failed open. They are kept with the selector's engine's history (an
    agent made in code: in memory; see docs/selection.md) and forgotten with
    ``toolset.selector.session.store.forget_examples(key)`` (or ``contextsieve history AGENT --forget``
    for an agent file's engine). Recording fails open: its error is logged (one warning) and kept in
    :attr:`last_error`, and the tool runs all the same.

    Raises:
        InputError: a bad argument (an unknown option, ``max_tools`` < 1, ``options`` or
            ``always_include`` with a ``selector``...). An ``always_include`` name the wrapped toolset
            lacks fails the first step's choice (an :class:`InputError` in :attr:`last_error`, or the
            cause of the :class:`~contextsieve.errors.ToolChoiceError` with ``fail_open=False``).
    """

    _state: _Selection = field(repr=False)

    def __init__(
        self,
        wrapped: AbstractToolset[AgentDepsT],
        selector: ToolSelector | None = None,
        *,
        always_include: Iterable[str] = (),
        max_tools: int | None = None,
        sync: bool | None = None,
        fail_open: bool = True,
        _state: _Selection | None = None,
        **options: Unpack[SelectorOptions],
    ) -> None:
        if not isinstance(wrapped, AbstractToolset):
            raise InputError(f"wrapped must be a Pydantic AI toolset, got {brief(wrapped)}")
        self.wrapped = wrapped
        if _state is not None:  # a copy made by dataclasses.replace: share the original's state
            self._state = _state
            return
        if selector is not None and not isinstance(selector, ToolSelector):
            raise InputError(f"selector must be a contextsieve ToolSelector, got {brief(selector)}")
        always = () if isinstance(always_include, str) else tuple(always_include)
        if isinstance(always_include, str) or not all(isinstance(n, str) for n in always):
            raise InputError(f"always_include must be a list of tool names, got {brief(always_include)}")
        if max_tools is not None and (isinstance(max_tools, bool) or not isinstance(max_tools, int) or max_tools < 1):
            raise InputError(f"max_tools must be None or an int >= 1, got {brief(max_tools)}")
        if sync is not None and not isinstance(sync, bool):
            raise InputError(f"sync must be None, True or False, got {brief(sync)}")
        unknown = sorted(set(options) - _OPTIONS)
        if unknown:
            raise InputError(f"unknown option(s) {unknown}; ToolSelector.from_tools takes {sorted(_OPTIONS)}")
        if selector is not None and (options or always or max_tools is not None):
            raise InputError(
                "always_include, max_tools and from_tools options build a selector: pass them to it, not with one"
            )
        self._state = _Selection(
            selector,
            always,
            max_tools,
            selector is None if sync is None else sync,
            dict(options),
            check_fail_open(fail_open),
        )

    @property
    def selector(self) -> ToolSelector | None:
        """The selector (``None`` until the first step when it is built from the wrapped tools)."""
        return self._state.selector

    @property
    def choices(self) -> list[Choice | FailedChoice]:
        """The choices of the latest steps, oldest first (at most :data:`KEPT_CHOICES`); a step that
        failed open has a :class:`FailedChoice` (``failed_open`` ``True``, every tool, the error)."""
        return list(self._state.choices)

    @property
    def last_choice(self) -> Choice | FailedChoice | None:
        """The latest step's choice (``None`` before the first step)."""
        return self._state.choices[-1] if self._state.choices else None

    @property
    def fail_open(self) -> bool:
        """Whether a step whose choice fails gets every tool (``True``) or raises (``False``)."""
        return self._state.fail_open

    @property
    def last_error(self) -> Exception | None:
        """The error of the latest step whose choice, or recording of whose reply, failed (``None``
        while none failed)."""
        return self._state.last_error

    async def get_tools(self, ctx: RunContext[AgentDepsT]) -> dict[str, ToolsetTool[AgentDepsT]]:
        tools = await self.wrapped.get_tools(ctx)
        if not tools and self._state.selector is None:
            return {}
        try:
            message, results, pending = _query(ctx.messages)
            specs = [
                ToolSpec(n, t.tool_def.description or "", t.tool_def.parameters_json_schema) for n, t in tools.items()
            ]
            key = (ctx.run_id, ctx.run_step, message, tuple(results), tuple(tools))
        except Exception as e:  # the step's messages or tools cannot be read: fail open
            self._state.failed(e, list(tools))
            return dict(tools)
        choice = await anyio.to_thread.run_sync(self._state.choose, specs, message, results, key)
        if choice.failed_open:
            return dict(tools)
        names = [*choice.tools, *(n for n in pending if n not in choice.tools)]
        return {n: tools[n] for n in names if n in tools}

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[AgentDepsT], tool: ToolsetTool[AgentDepsT]
    ) -> Any:
        """Call the wrapped tool; the first call of a model reply first records the tools the reply
        called (learning from use, see the class; failing open)."""
        try:
            todo = self._state.to_learn(ctx)
        except Exception as e:  # the reply cannot be read: the tool runs all the same
            with self._state.lock:
                self._state.last_error = e
            logger.warning("contextsieve: the tools the model called were not recorded (%s)", error_text(e))
            todo = None
        if todo is not None:
            await anyio.to_thread.run_sync(self._state.learn, *todo)
        return await self.wrapped.call_tool(name, tool_args, ctx, tool)

    async def get_instructions(
        self, ctx: RunContext[AgentDepsT]
    ) -> str | InstructionPart | Sequence[str | InstructionPart] | None:
        inner = await super().get_instructions(ctx)
        choice = self.last_choice
        extra = choice.instructions if choice is not None else ""
        if not extra:
            return inner
        parts: list[str | InstructionPart] = (
            [] if inner is None else [inner] if isinstance(inner, (str, InstructionPart)) else list(inner)
        )
        return [*parts, extra]


def _remember(kept: dict[tuple[Any, ...], _T], key: tuple[Any, ...], value: _T) -> None:
    """Keep ``key`` in ``kept`` as the newest of at most :data:`KEPT_CHOICES`."""
    kept.pop(key, None)
    kept[key] = value
    while len(kept) > KEPT_CHOICES:
        del kept[next(iter(kept))]


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    texts = [c if isinstance(c, str) else getattr(c, "content", None) for c in content]
    return "\n".join(t for t in texts if isinstance(t, str) and t)


def _clean(text: str, limit: int | None = None) -> str:
    """Text the selection can read: cut at ``limit`` characters, lone surrogates replaced (the query
    only; nothing is changed in the conversation)."""
    text = text[:limit] if limit is not None else text
    return text.encode("utf-8", "replace").decode("utf-8")


def _query(messages: Sequence[ModelMessage]) -> tuple[str, list[str], list[str]]:
    """(the latest user prompt's text, the texts of the last tool returns after it, the tools called
    by a final response whose returns are still to come)."""
    pending: list[str] = []
    if messages and isinstance(messages[-1], ModelResponse):
        pending = [c.tool_name for c in messages[-1].tool_calls]
    returns: list[ToolReturnPart] = []  # newest first
    prompt = ""
    for m in reversed(messages):
        if isinstance(m, ModelRequest):
            for p in reversed(m.parts):
                if isinstance(p, UserPromptPart):
                    prompt = _text(p.content)
                    break
                if isinstance(p, ToolReturnPart):
                    returns.append(p)
            else:
                continue
            break
    texts = [_clean(r.model_response_str(), _RESULT_CHARS) for r in reversed(returns[:_RESULTS])]
    return _clean(prompt), texts, pending


# -- the stash ------------------------------------------------------------------------------------------


def stash_toolset(
    store: StashStore,
    *,
    agent: object = None,
    session: str | None = None,
    max_segments: int = 1000,
    cross_session: bool = False,
    tools: Sequence[str] = FRAMEWORK_STASH_TOOLS,
) -> FunctionToolset[Any]:
    """The stash store as tools (by default ``stash_context``, ``retrieve_stashed_context`` and
    ``merge_stashed_context``): the definitions of :mod:`contextsieve.session.agent_tools`, the same names,
    descriptions, argument schemas and results as ``contextsieve serve --stash`` offers.

    Args:
        store: the store (:meth:`StashStore.open`); the caller closes it.
        agent: whose stash it is (an :class:`~contextsieve.Agent`, :class:`~contextsieve.Engine` or
            :class:`~contextsieve.integrations.selector.ToolSelector`): every call stashes to and retrieves
            from its own namespace, ``agent:<identity>``, as ``contextsieve serve`` does.
        session: instead of ``agent``, the stash namespace every call uses (one of the two is needed).
        max_segments: most segments one ``stash_context`` call may carry (default 1,000).
        cross_session: retrieval searches every session of the store (default False).
        tools: which stash tools, by name (any of :data:`~contextsieve.session.stash_agent_tools.STASH_TOOLS`).

    A bad argument of the model's (a value out of range, a blank text, an unknown segment id...) is a
    ``ModelRetry`` with the reason; a failing store raises its :class:`~contextsieve.errors.StashError`.

    Raises:
        InputError: ``store`` is not a :class:`StashStore`, a bad ``session``, ``max_segments`` or tool name.
    """
    namespace = agent_namespace(agent, session, "stash_toolset")
    scope = stash_scope(store, session=namespace, max_segments=max_segments, cross_session=cross_session)

    def make(tool: AgentTool) -> Tool[Any]:
        def call(**arguments: Any) -> dict[str, Any]:
            try:
                return tool.call(scope, arguments)
            except (InputError, UnknownSegmentError) as e:  # the model can fix it: it reads why
                raise ModelRetry(str(e)) from e

        return Tool.from_schema(call, name=tool.name, description=tool.description, json_schema=tool.input_schema())

    return FunctionToolset([make(t) for t in stash_tool_defs(tools)])
