"""The task a session's requests belong to, and the tools its later requests carry from it.

In an agent loop a model asks one step at a time, and what a step needs is often named only in the
task ("Create the branch fix/x and switch to it." then "Branch created."). :class:`TaskState` keeps a
task's first message and the tools its requests selected; :func:`task_entries` gives a later request
of the task the best tools of the task's first message that no request of the task selected yet,
from the servers that message ranks highest (``AgentSettings.task_tools`` / ``task_servers``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from contextsieve.agent import settings as agent_settings
from contextsieve.agent.agent import Agent, ItemTable
from contextsieve.agent.items import IncludeMode, ItemKey, ItemKind
from contextsieve.agent.settings import AgentSettings
from contextsieve.retrieval.query import Query
from contextsieve.selection.chunk_store import ChunkStore
from contextsieve.selection.context import ContextEntry
from contextsieve.selection.search import search

__all__ = [
    "TaskState",
    "task_entries",
    "task_ranking",
    "wanted",
    "moved_on",
    "step_settings",
    "example_gate",
    "opens_task",
    "TASK_RANKING_DEPTH",
    "MOVED_ON_RATIO",
]

#: A step whose own best tool is of another server than the task's best and matches the step at least
#: this share as well as the task's best tool matches the task has moved on: nothing is carried.
#: Chosen with ``python -m benchmarks.quality.tool_loop`` (0.8 and 0.9 select the same on its sets).
MOVED_ON_RATIO = 0.8
#: How many of the task message's best tools are kept to walk down (the tool search's own limit).
TASK_RANKING_DEPTH = 50


@dataclass
class TaskState:
    """One task of a session (from :meth:`Session.new_task`, or the session's start, to the next).

    Attributes:
        message: the task's first message (``None``: no request in this task yet).
        selected: the tools the task's requests selected (their keys).
        ranking: the task message's tools, best first by ranking score, as the search's entries
            (key, similarity, chunk, query chunk), computed at the task's second request and then kept.
        requests: requests built in this task.
        last: the message of the task's latest request.
        replied: whether a reply was recorded (``Session.record_reply``) since the task started: only
            then is a next request a step of this task (else it starts a task of its own).
        called: the tools the model called in this task so far, in order (what ``record_outcome`` and
            ``record_tool_calls`` told of its requests); a step's companions start from the latest.
    """

    message: str | None = None
    selected: set[ItemKey] = field(default_factory=set)
    ranking: list[ContextEntry] | None = None
    requests: int = 0
    replied: bool = False
    last: str | None = None
    called: list[ItemKey] = field(default_factory=list)

    def start(self) -> None:
        """Start over: the next request's message is the task's."""
        self.message, self.ranking, self.requests, self.replied, self.last = None, None, 0, False, None
        self.selected.clear()
        self.called.clear()

    def copy(self) -> "TaskState":
        """An independent copy (an explanation builds a request without changing the session's task)."""
        return TaskState(
            self.message, set(self.selected), self.ranking, self.requests, self.replied, self.last, list(self.called)
        )

    def told(self, message: str) -> str:
        """The message calls made after ``message`` are examples of: the task's first message when
        ``message`` is the latest request's and that request is a later step of the task (a step's words
        say little alone: "then post it there"), else ``message`` itself."""
        if self.requests > 1 and self.message is not None and message == self.last and message != self.message:
            return self.message
        return message

    def calls(self, message: str, keys: list[ItemKey]) -> None:
        """Note the tools the model called after a request of this task for ``message`` (one of its
        requests' messages; calls after another message are not this task's)."""
        if message is not None and message in (self.message, self.last):
            latest = list(dict.fromkeys(keys))  # a tool called again moves to the end: the latest is last
            self.called = [k for k in self.called if k not in latest] + latest

    def note(self, message: str, entries: tuple[ContextEntry, ...] | list[ContextEntry]) -> None:
        """Record a request of this task: its message (the first one is the task's) and its tools."""
        if self.message is None:
            self.message = message
        self.last = message
        self.requests += 1
        self.selected |= {e.key for e in entries if e.key.kind is ItemKind.TOOL}


def task_entries(
    settings: AgentSettings,
    state: TaskState,
    table: ItemTable,
    allowed: np.ndarray,
    chosen: set[ItemKey],
    own: list[ContextEntry],
) -> list[ContextEntry]:
    """The tools a later request of ``state``'s task carries from the task's first message (see the
    module docstring): at most ``settings.task_tools`` of them, none in ``chosen`` (this request's
    entries) or already selected in the task, each allowed by ``allowed`` (a bool per item of
    ``table``), with ``via="task"`` and their ranking score for the task's message (``state.ranking``,
    from :func:`task_ranking`). Nothing for the task's first request, without a ranking, or when the
    step has moved on (:func:`moved_on`; ``own``: the tools the request's own search chose, in its
    order)."""
    if not wanted(settings, state) or not state.ranking:
        return []
    servers: list[str] = []
    for e in state.ranking:
        if e.key.server not in servers:
            servers.append(e.key.server)
    top = set(servers[: settings.task_servers])
    if moved_on(own, top, state.ranking):
        return []
    out: list[ContextEntry] = []
    for e in state.ranking:
        if len(out) >= settings.task_tools:
            break
        i = table.position.get(e.key)
        if i is None or not allowed[i] or e.key.server not in top or e.key in chosen or e.key in state.selected:
            continue
        out.append(ContextEntry(e.key, IncludeMode.AGENT, e.score, e.chunk, e.query_chunk, None, "task"))
    return out


def moved_on(own: list[ContextEntry], top: set[str], ranking: list[ContextEntry]) -> bool:
    """Whether a step has moved on from its task: its own best tool (``own``, the search's order) is of
    none of the task's best servers ``top`` and matches the step at least :data:`MOVED_ON_RATIO` as
    well as the task's best tool matches the task (similarities). A step that says little ("Page
    open.", "Filled.") finds weak tools anywhere and has not moved on."""
    if not own or not ranking or own[0].key.server in top:
        return False
    return (own[0].score or 0.0) >= MOVED_ON_RATIO * (ranking[0].score or 0.0)


def wanted(settings: AgentSettings, state: TaskState) -> bool:
    """Whether a request of ``state``'s task now carries task tools: a later request of a task, with
    ``task_tools`` above 0 and tools searched as a domain of their own (not ``tool_domain="shared"``)."""
    return state.message is not None and state.requests > 0 and settings.task_tools > 0 and settings.own_tool_domain


def opens_task(task: TaskState | None) -> bool:
    """Whether the next request is a task's first (or outside a session's tasks, ``task`` ``None``): it
    asks for the whole task, so its offer is sized and gated as a wide one."""
    return task is None or task.requests == 0


def step_settings(settings: AgentSettings, task: TaskState | None) -> AgentSettings:
    """The settings a request's own search runs with. A task's first request (or a request outside
    a session's tasks, ``task`` ``None``) aims for ``tool_top_n`` tools: a whole task asks for
    several. A later request sizes its offer by its message (``tool_base_n``, ``tool_chunk_n``)."""
    if opens_task(task):
        return settings if settings.tool_base_n is None else settings.with_overrides(tool_base_n=None)
    return settings


def example_gate(task: TaskState | None) -> float:
    """The cosine from which a recorded example request counts for a request's own search: a task's first
    request (or a request outside a session's tasks, ``task`` ``None``) has a request's gate
    (:data:`~contextsieve.agent.settings.EXAMPLE_SIMILARITY`; the search raises it for a narrow offer), a
    later step of the task a narrow offer's (:data:`~contextsieve.agent.settings.NARROW_EXAMPLE_SIMILARITY`):
    its offer has few places, and its words are a part of the task, where an example is a whole task's
    message."""
    if opens_task(task):
        return agent_settings.EXAMPLE_SIMILARITY
    return agent_settings.NARROW_EXAMPLE_SIMILARITY


def task_ranking(
    store: ChunkStore,
    agent: Agent,
    settings: AgentSettings,
    query: Query,
    not_example: str | None = None,
) -> list[ContextEntry]:
    """The tools of a task's first message (its ``query``), best first: the tools domain's search with
    no cut-offs (as a tool search: no include score, no floor, no expansion) over every tool of the
    agent, without the examples whose hash is ``not_example`` (the task's message: what the task taught
    is not its evidence), the examples counting from a narrow offer's gate
    (:data:`~contextsieve.agent.settings.NARROW_EXAMPLE_SIMILARITY`: what a task carries takes places of its
    steps). The agent's lock is held by the caller."""
    tools = settings.for_tools()
    wide = tools.with_overrides(
        context_top_n=TASK_RANKING_DEPTH,
        context_top_k=100,  # the setting's range
        context_include_score=0.0,
        context_min_ratio=None,
        context_min_score=None,
        tool_base_n=None,
        expansion_depth=0,
        min_representation_floor=None,
        token_budget=None,
    )
    if not query.chunks:
        return []
    table = agent.table()
    entries, _ = search(
        store,
        table,
        table.tool.copy(),
        wide,
        query,
        agent.server_descriptions(),
        not_example=not_example,
        example_gate=agent_settings.NARROW_EXAMPLE_SIMILARITY,
    )
    return [e for e in entries if e.via == "query"]
