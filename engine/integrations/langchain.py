"""contextsieve in LangChain agents (extra ``langchain``: ``langchain`` 1.5, ``langgraph`` 1.2).

:class:`ContextSieveMiddleware` is an agent middleware (``create_agent(..., middleware=[...])``) that
chooses, for each model call, which of the agent's tools the model gets: by contextsieve's selection
for the conversation's latest user turn and the tool results since, in place of
``LLMToolSelectorMiddleware``'s extra LLM call (same ``always_include`` and ``max_tools``). The rules
and references of a contextsieve agent chosen for the call are added to the system message, and
each call's choice is recorded on the agent's state under ``"contextsieve"`` (a list, one record
per model call: the tools sent, the proposed and dropped ones, and the request context).

A call whose choice fails (for any reason: the embedder, the cache, a text that is not valid Unicode)
gets every tool the agent gave it, its record says ``"failed_open": True`` with the error, one warning
is logged and :attr:`ContextSieveMiddleware.last_error` holds the exception; with ``fail_open=False``
the call raises :class:`~contextsieve.errors.ToolChoiceError` instead.

The stash as LangGraph's memory is :class:`contextsieve.integrations.langgraph_store.StashMemoryStore`
(a ``BaseStore``: ``create_agent(..., store=...)``).
"""

from __future__ import annotations

import asyncio
import json
import operator
import threading
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Annotated, Any

from contextsieve.errors import InputError, MissingExtraError, UnknownSegmentError, brief
from contextsieve.integrations.selector import ToolSelector, ToolSpec
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
from contextsieve.retrieval.embedding import TextEmbedder
from contextsieve.session.agent_tools import AgentTool
from contextsieve.session.offer import OfferConfig
from contextsieve.stash.store import StashStore

try:
    from langchain.agents.middleware.types import (
        AgentMiddleware,
        AgentState,
        ExtendedModelResponse,
        ModelRequest,
        ModelResponse,
    )
    from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
    from langchain_core.tools import BaseTool, StructuredTool, ToolException
    from langchain_core.utils.function_calling import convert_to_openai_tool
    from langgraph.types import Command
    from typing_extensions import NotRequired
except ImportError as e:  # pragma: no cover - exercised without the extra
    raise MissingExtraError(
        "the LangChain integration needs langchain and langgraph: pip install 'contextsieve[langchain]'"
    ) from e

__all__ = ["ContextSieveMiddleware", "ContextSieveState", "stash_tools", "tool_specs"]

#: the state key each model call's choice is recorded under
STATE_KEY = "contextsieve"


class ContextSieveState(AgentState[Any]):
    """The agent state with contextsieve's record: one :meth:`Choice.to_dict` per model call."""

    contextsieve: NotRequired[Annotated[list[dict[str, Any]], operator.add]]


def tool_specs(tools: Iterable[BaseTool], server: str = "tools") -> list[ToolSpec]:
    """LangChain tools as contextsieve ranks them: name, description and the JSON schema of their
    arguments (as the model gets it)."""
    specs = []
    for t in tools:
        fn = convert_to_openai_tool(t)["function"]
        specs.append(ToolSpec(t.name, t.description or "", fn.get("parameters") or {}, server))
    return specs


def _text(message: BaseMessage) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    parts = [p if isinstance(p, str) else p.get("text", "") for p in content if isinstance(p, (str, dict))]
    return "\n".join(p for p in parts if isinstance(p, str) and p)


def _turn(messages: Sequence[BaseMessage]) -> tuple[str, list[str]]:
    """The latest user turn's text and the texts of the tool results after it."""
    for i in range(len(messages) - 1, -1, -1):
        if isinstance(messages[i], HumanMessage):
            results = [_text(m) for m in messages[i + 1 :] if isinstance(m, ToolMessage)]
            return _text(messages[i]), results
    return "", []


class ContextSieveMiddleware(AgentMiddleware[ContextSieveState, Any, Any]):
    """Chooses each model call's tools (and rules and references) with contextsieve.

    Args:
        selector: the selector to use (e.g. ``ToolSelector(Engine.from_file(path).session())`` over an
            agent file, whose rules and references then go into the system message). Default: one
            built on the first model call from the agent's own tools (:meth:`ToolSelector.from_tools`
            with the arguments below), kept in step when the tools change.
        always_include: tool names always sent, not counted against ``max_tools`` (as
            ``LLMToolSelectorMiddleware``'s); with a given ``selector``, give them to it instead.
        max_tools: most tools chosen per call besides ``always_include`` (default ``None``: the
            selection's own cut: ``tool_top_n`` and its score threshold).
        offer: how tools are offered across calls (:class:`~contextsieve.OfferConfig`; default per
            call; ``OfferConfig(mode="stable")`` keeps the tools array the same within a task).
        embedder / cache_dir: :class:`~contextsieve.Engine`'s (default MiniLM and the user's cache).
        instructions: add the chosen rules and references to the system message (default ``True``).
        fail_open: when a call's choice fails (building or syncing the selector included), send that
            call every tool it was given, record a ``"failed_open"`` record and log one warning
            (default ``True``: never fewer tools than without contextsieve); ``False`` raises
            :class:`~contextsieve.errors.ToolChoiceError` (the error as its cause), which ends the run.

    Tools that are provider dicts (server-side tools) are always passed through. A call with no user
    message passes every tool through unchanged.
    """

    state_schema = ContextSieveState

    def __init__(
        self,
        selector: ToolSelector | None = None,
        *,
        always_include: Sequence[str] = (),
        max_tools: int | None = None,
        offer: OfferConfig | None = None,
        embedder: TextEmbedder | None = None,
        cache_dir: Any = None,
        instructions: bool = True,
        fail_open: bool = True,
    ) -> None:
        super().__init__()
        if selector is not None and not isinstance(selector, ToolSelector):
            raise InputError(f"selector must be a ToolSelector, got {brief(selector)}")
        if isinstance(always_include, str):
            raise InputError("always_include must be a list of tool names, not one str")
        self.selector = selector
        self._options: dict[str, Any] = {
            "always_include": tuple(always_include),
            "max_tools": max_tools,
            "offer": offer,
            "embedder": embedder,
            "cache_dir": cache_dir,
        }
        if max_tools is not None and (isinstance(max_tools, bool) or not isinstance(max_tools, int) or max_tools < 1):
            raise InputError(f"max_tools must be None or an int >= 1, got {brief(max_tools)}")
        self.instructions = instructions
        self.fail_open = check_fail_open(fail_open)
        self._synced: tuple[Any, ...] | None = None  # the tools the built selector holds
        self._same: tuple[int, ...] = ()  # their objects' ids (a cheap check per call)
        self._lock = threading.Lock()
        self.choices: list[Choice | FailedChoice] = []
        """The choices made so far by this middleware (newest last; the last 100); a call that failed
        open has a :class:`FailedChoice` (``failed_open`` ``True``, every tool, the error)."""
        self.last_error: Exception | None = None
        """The error of the latest call whose choice failed (``None`` while none failed)."""

    def _selector_for(self, tools: list[BaseTool]) -> ToolSelector:
        with self._lock:
            same = tuple(map(id, tools))
            if self.selector is not None and (self._synced is None or same == self._same):
                return self.selector  # a given selector, or the same tool objects as the last call
            specs = tool_specs(tools)
            shape = tuple((s.name, s.description, repr(s.input_schema)) for s in specs)
            if self.selector is None:
                self.selector = ToolSelector.from_tools(specs, **self._options)
            elif shape != self._synced:
                self.selector.sync(specs)
            self._synced, self._same = shape, same
            return self.selector

    def _prepare(self, request: ModelRequest[Any]) -> tuple[ModelRequest[Any], Choice | FailedChoice | None]:
        base = [t for t in request.tools if isinstance(t, BaseTool)]
        provider = [t for t in request.tools if not isinstance(t, BaseTool)]
        try:
            message, results = _turn(request.messages)
            if not base or not message.strip():
                return request, None
            selector = self._selector_for(base)
            choice = selector.choose(message, tool_results=results, available=[t.name for t in base])
        except Exception as e:  # fail open: this call gets the request's tools as they are
            with self._lock:
                self.last_error = e
            failed = failed_choice(
                e, [t.name for t in base], fail_open=self.fail_open, where="LangChain ContextSieveMiddleware"
            )
            with self._lock:
                self.choices = [*self.choices[-99:], failed]
            return request, failed
        by_name = {t.name: t for t in base}
        tools: list[BaseTool | dict[str, Any]] = [by_name[n] for n in choice.tools if n in by_name]
        overrides: dict[str, Any] = {"tools": tools + provider}
        extra = choice.instructions if self.instructions else ""
        if extra:
            old = request.system_message
            text = (_text(old) + "\n\n" + extra) if old is not None and _text(old) else extra
            overrides["system_message"] = SystemMessage(content=text)
        with self._lock:
            self.choices = [*self.choices[-99:], choice]
        return request.override(**overrides), choice

    def _learn(self, response: Any, choice: Choice | FailedChoice | None) -> None:
        """Learning from use: the tools the model called in ``response`` become examples of the choice's
        message (:meth:`ToolSelector.record_calls`); an error here is logged and never reaches the agent."""
        selector = self.selector
        if not isinstance(choice, Choice) or selector is None:
            return
        result = response.model_response.result if isinstance(response, ExtendedModelResponse) else response
        messages = result.result if isinstance(result, ModelResponse) else [result]
        called = [c.get("name") for m in messages if isinstance(m, AIMessage) for c in (m.tool_calls or [])]
        if not called:
            return
        try:
            selector.record_calls(choice, [n for n in called if isinstance(n, str)])
        except Exception as e:  # a hook fails open: the agent goes on without this lesson
            with self._lock:
                self.last_error = e
            logger.warning("contextsieve: the tools the model called were not recorded (%s)", error_text(e))

    @staticmethod
    def _recorded(response: Any, choice: Choice | FailedChoice | None) -> Any:
        if choice is None or isinstance(response, ExtendedModelResponse):
            return response
        if isinstance(response, AIMessage):
            response = ModelResponse(result=[response])
        return ExtendedModelResponse(model_response=response, command=Command(update={STATE_KEY: [choice.to_dict()]}))

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Any],
    ) -> Any:
        """Send the model only the chosen tools; record the choice on the state."""
        new, choice = self._prepare(request)
        response = handler(new)
        self._learn(response, choice)
        return self._recorded(response, choice)

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[Any]],
    ) -> Any:
        """As :meth:`wrap_model_call`; the choice runs in a worker thread (it embeds on the CPU)."""
        new, choice = await asyncio.to_thread(self._prepare, request)
        response = await handler(new)
        await asyncio.to_thread(self._learn, response, choice)
        return self._recorded(response, choice)


def stash_tools(
    store: StashStore,
    *,
    agent: object = None,
    session: str | None = None,
    max_segments: int = 1000,
    cross_session: bool = False,
    tools: Sequence[str] = FRAMEWORK_STASH_TOOLS,
) -> list[StructuredTool]:
    """The stash as LangChain tools for any LangChain or LangGraph agent (by default ``stash_context``,
    ``retrieve_stashed_context`` and ``merge_stashed_context``): the definitions of
    :mod:`contextsieve.session.agent_tools`, the same names, descriptions, argument schemas and results (JSON
    text) as ``contextsieve serve --stash`` offers.

    Args:
        store: the stash store (:meth:`StashStore.open`); the caller closes it.
        agent: whose stash it is (an :class:`~contextsieve.Agent`, :class:`~contextsieve.Engine` or
            :class:`~contextsieve.integrations.selector.ToolSelector`): every call stashes to and retrieves
            from its own namespace, ``agent:<identity>``, as ``contextsieve serve`` does.
        session: instead of ``agent``, the stash namespace every call uses (one of the two is needed).
        max_segments: most segments one ``stash_context`` call may carry (default 1,000).
        cross_session: retrieval searches every session of the store (default False).
        tools: which stash tools, by name (any of :data:`~contextsieve.session.stash_agent_tools.STASH_TOOLS`).

    A bad argument of the model's (a value out of range, an unknown segment id...) comes back to the
    model as the tool's message (``ToolException``, ``handle_tool_error``); a failing store raises.
    """
    namespace = agent_namespace(agent, session, "stash_tools")
    scope = stash_scope(store, session=namespace, max_segments=max_segments, cross_session=cross_session)

    def make(tool: AgentTool) -> StructuredTool:
        def call(**arguments: Any) -> str:
            try:
                return json.dumps(tool.call(scope, arguments), ensure_ascii=False)
            except (InputError, UnknownSegmentError) as e:  # the model can fix it: it reads why
                raise ToolException(str(e)) from e

        return StructuredTool(
            name=tool.name,
            description=tool.description,
            args_schema=tool.input_schema(),
            func=call,
            handle_tool_error=True,
        )

    return [make(t) for t in stash_tool_defs(tools)]
