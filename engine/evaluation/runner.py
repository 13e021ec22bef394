"""Running tasks through an engine as a host does, and scoring what each request offered: cold, and with the
other folds' tasks recorded first as the agent's history.

:func:`run_tasks` plays each :class:`~contextsieve.evaluation.tasks.Task` in a session: per step
``build_request(step message)`` (timed) and ``record_reply(request, "")`` (as the MCP gateway does), the
model played as calling, for each group the step needs, its first offered tool (by ``server/name``; a step
without its own needs calls each of the task's groups not called yet, at the first step that offers it),
and, when asked, what it called recorded (``learn``). :func:`evaluate` splits the tasks into folds (task
``i`` in fold ``i % K``) and scores each fold on a fresh engine: cold (nothing recorded) and with history
(each task of the other folds recorded first with :meth:`Engine.record_tool_calls`, its first message
and the tools it needs in order: what the gateway records when it forwards calls under a task).
:func:`scores` turns the runs into the measures (:class:`Scores`).

Nothing here writes an agent's own history: :func:`fold_engines` makes engines whose learned examples live
in their memory only (no cache folder, ``remember_requests=False``), sharing one memory of vectors.
"""

from __future__ import annotations

import statistics
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from contextsieve.agent.items import ItemKey
from contextsieve.errors import ContextSieveError, EvaluationWarning, InputError
from contextsieve.evaluation.tasks import Group, Task
from contextsieve.progress import note

if TYPE_CHECKING:
    from contextsieve.engine import Engine
    from contextsieve.retrieval.cache import EmbeddingCache
    from contextsieve.retrieval.embedding import TextEmbedder
    from contextsieve.session.offer import OfferConfig

__all__ = [
    "LEARN",
    "TaskRun",
    "Scores",
    "Evaluation",
    "run_tasks",
    "scores",
    "folds_of",
    "check_folds",
    "record_history",
    "evaluate",
    "SharedVectors",
    "fold_engines",
    "label",
]

#: What the played model's calls record while tasks run: its calls and the offer's misses
#: (``Session.record_outcome``), its calls as examples only (``record_tool_calls``), or nothing.
LEARN = ("outcome", "examples", None)

#: A step that left needs out: (the task, the step's index, the groups not offered, the tools offered).
MissHook = Callable[[Task, int, list[Group], frozenset[ItemKey]], None]


def label(key: ItemKey) -> str:
    """``server/name``: how a tool is named in measures (and the played model's order among a group's
    offered tools)."""
    return f"{key.server}/{key.name}"


@dataclass(frozen=True)
class TaskRun:
    """What one task's requests offered: per request the agent's tools offered, the size of the
    request's tools and the request's time (``build_request``, ms)."""

    task: Task
    offered: tuple[frozenset[ItemKey], ...]
    sizes: tuple[int, ...]
    ms: tuple[float, ...]

    @property
    def union(self) -> frozenset[ItemKey]:
        """Every tool some request of the task offered."""
        return frozenset().union(*self.offered)

    def missed(self) -> list[Group]:
        """The task's groups no request offered."""
        got = self.union
        return [g for g in self.task.needs if not got.intersection(g)]


@dataclass(frozen=True)
class Scores:
    """The measures of a set of task runs.

    Attributes:
        tasks, requests: how many were run.
        recall: share of a task's needed groups that some request of the task offered (a group counts
            when any of its tools was), averaged over tasks.
        all_found: share of tasks every group of which was offered.
        step_recall: share of a step's own needed groups offered at that step, averaged over the steps
            that need a tool (``None`` when no step carries its own needs).
        first_recall: share of a task's groups its first request (its message alone) offered.
        tools_per_request: tools offered per request (``Request.tools``, mean).
        tools_per_task: distinct tools offered over a task's requests (mean).
        precision: share of a request's offered tools that its task needs (a tool of one of its groups),
            averaged over the requests that offered a tool (``None`` when none did).
        p50_ms: median ``build_request`` time.
    """

    tasks: int
    requests: int
    recall: float
    all_found: float
    step_recall: float | None
    first_recall: float
    tools_per_request: float
    tools_per_task: float
    precision: float | None
    p50_ms: float

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class Evaluation:
    """:func:`evaluate`'s result: the runs of every task (in the tasks' order) cold and, with
    ``folds`` of 2 or more, with the other folds' tasks recorded first (else ``history`` is ``None``)."""

    folds: int
    cold: list[TaskRun]
    history: list[TaskRun] | None


def _recall(offered: frozenset[ItemKey], groups: Sequence[Group]) -> float:
    return sum(1 for g in groups if offered.intersection(g)) / len(groups) if groups else 1.0


def run_tasks(
    engine: Engine,
    tasks: Sequence[Task],
    *,
    settings: Mapping[str, Any] | None = None,
    offer: OfferConfig | None = None,
    learn: str | None = None,
    per_session: int = 1,
    on_miss: MissHook | None = None,
    on_task: Callable[[], None] | None = None,
) -> list[TaskRun]:
    """Every task through ``engine`` (see the module docstring), in order: ``per_session`` tasks in a row
    share a session (each starts with ``Session.new_task``), made with ``offer`` and ``settings``;
    ``learn`` is one of :data:`LEARN`; ``on_miss`` hears of each annotated step that left a need out;
    ``on_task`` is called after each task (progress)."""
    if learn not in LEARN:
        raise InputError(f"learn must be one of {LEARN}, got {learn!r}")
    if per_session < 1:
        raise InputError(f"per_session must be at least 1, got {per_session}")
    runs = []
    session = None
    for i, task in enumerate(tasks):
        if session is None or i % per_session == 0:
            session = engine.session(offer=offer, **dict(settings or {}))
        session.new_task()
        offered_steps, sizes, ms = [], [], []
        called_task: set[ItemKey] = set()
        for n, step in enumerate(task.steps):
            t = time.perf_counter()
            request = session.build_request(step.message)
            ms.append((time.perf_counter() - t) * 1e3)
            session.record_reply(request, "")
            names = request.names
            offered = frozenset(names[d["name"]] for d in request.tools if d["name"] in names)
            offered_steps.append(offered)
            sizes.append(len(request.tools))
            if step.needs is not None:
                need = list(step.needs)
                lost = [g for g in need if not offered.intersection(g)]
                if lost and on_miss is not None:
                    on_miss(task, n, lost, offered)
            else:  # no per-step needs: the model calls a needed tool the first time it is offered
                need = [g for g in task.needs if offered.intersection(g) and not called_task.intersection(g)]
            called = [min(offered.intersection(g), key=label) for g in need if offered.intersection(g)]
            called_task.update(called)
            if learn == "outcome":
                session.record_outcome(request, called)
            elif learn == "examples" and called:
                session.record_tool_calls(request.message, called)
        runs.append(TaskRun(task, tuple(offered_steps), tuple(sizes), tuple(ms)))
        if on_task is not None:
            on_task()
    return runs


def scores(runs: Sequence[TaskRun]) -> Scores:
    """The measures of ``runs`` (see :class:`Scores`)."""
    if not runs:
        raise InputError("no task runs to score")
    union, every, step, first, per_task, precision = [], [], [], [], [], []
    for run in runs:
        needs = run.task.needs
        members = {k for g in needs for k in g}
        got = run.union
        union.append(_recall(got, needs))
        every.append(float(all(got.intersection(g) for g in needs)))
        first.append(_recall(run.offered[0], needs))
        per_task.append(len(got))
        for s, offered in zip(run.task.steps, run.offered):
            if s.needs:
                step.append(_recall(offered, s.needs))
            if offered:
                precision.append(len(offered & members) / len(offered))
    sizes = [n for run in runs for n in run.sizes]
    return Scores(
        tasks=len(runs),
        requests=len(sizes),
        recall=statistics.fmean(union),
        all_found=statistics.fmean(every),
        step_recall=statistics.fmean(step) if step else None,
        first_recall=statistics.fmean(first),
        tools_per_request=statistics.fmean(sizes),
        tools_per_task=statistics.fmean(per_task),
        precision=statistics.fmean(precision) if precision else None,
        p50_ms=statistics.median([t for run in runs for t in run.ms]),
    )


def folds_of(n: int, k: int) -> list[list[int]]:
    """The task indexes of each of ``k`` folds: task ``i`` is in fold ``i % k``."""
    return [[i for i in range(n) if i % k == f] for f in range(k)]


def record_history(engine: Engine, tasks: Sequence[Task]) -> None:
    """Each task as the agent's history, through the path a host uses: ``engine.record_tool_calls(first
    message, the tools it needs in order)`` (:meth:`Task.tools_in_order`)."""
    for task in tasks:
        tools = task.tools_in_order()
        if tools:
            engine.record_tool_calls(task.message, tools)


def check_folds(tasks: Sequence[Task], folds: int) -> None:
    """:class:`InputError` for ``folds`` that are no whole number of 0 or more, or more than the tasks."""
    if isinstance(folds, bool) or not isinstance(folds, int) or folds < 0:
        raise InputError(f"folds must be a whole number, 0 or more, got {folds!r}")
    if folds > 1 and len(tasks) < folds:
        raise InputError(f"{folds} folds need at least {folds} tasks, got {len(tasks)} (0 folds: cold only)")


def _warn_alike(tasks: Sequence[Task], folds: int) -> None:
    """An :class:`~contextsieve.errors.EvaluationWarning` naming tasks of one message (as the history keys
    it: :func:`~contextsieve.agent.usage.example_hash`) in different folds, whose history then holds the
    other's tools for the very message (identical tasks in one fold are scored alike, cold or not)."""
    from contextsieve.agent.usage import example_hash

    first: dict[str, int] = {}
    alike: list[str] = []
    for i, task in enumerate(tasks):
        j = first.setdefault(example_hash(task.message), i)
        if j != i and j % folds != i % folds:
            alike.append(f"{tasks[j].id!r} and {task.id!r}")
    if alike:
        warnings.warn(
            f"{len(alike)} tasks have the message of a task in another fold ({', '.join(alike[:3])}"
            + (", ..." if len(alike) > 3 else "")
            + "): with history each finds the other's tools recorded for its own words, so the history row "
            "reads better than a new task would",
            EvaluationWarning,
            stacklevel=3,
        )


def evaluate(make_engine: Callable[[], Engine], tasks: Sequence[Task], folds: int = 2, **run: Any) -> Evaluation:
    """``tasks`` cold and with ``folds``-fold history (see the module docstring); ``run``: the keyword
    arguments of :func:`run_tasks`. ``make_engine`` gives a fresh engine (nothing recorded) per call.
    ``folds`` 0 or 1: cold only, every task on one engine. A run of over :data:`PROGRESS_EVERY` seconds
    says how far it is (:func:`contextsieve.progress.note`: on stderr from the CLI)."""
    tasks = list(tasks)
    check_folds(tasks, folds)
    if "on_task" in run:
        raise InputError("evaluate counts the tasks itself: on_task is not one of its arguments")
    if folds <= 1:
        return Evaluation(folds, run_tasks(make_engine(), tasks, on_task=_Ticker(len(tasks), 0), **run), None)
    _warn_alike(tasks, folds)
    ticker = _Ticker(2 * len(tasks), (folds - 1) * len(tasks))
    cold: list[TaskRun | None] = [None] * len(tasks)
    warm: list[TaskRun | None] = [None] * len(tasks)
    for f, held in enumerate(folds_of(len(tasks), folds)):
        history = [t for i, t in enumerate(tasks) if i % folds != f]
        for out, recorded in ((cold, []), (warm, history)):
            engine = make_engine()
            record_history(engine, recorded)
            ticker.recorded(len(recorded))
            for i, r in zip(held, run_tasks(engine, [tasks[i] for i in held], on_task=ticker, **run)):
                out[i] = r
    return Evaluation(folds, [r for r in cold if r is not None], [r for r in warm if r is not None])


#: Seconds between two progress notes of a long evaluation (the first after as long).
PROGRESS_EVERY = 10.0


class _Ticker:
    """Counts an evaluation's task runs and recorded tasks, and notes how far it is every
    :data:`PROGRESS_EVERY` seconds (nothing for a short one)."""

    def __init__(self, runs: int, recorded: int) -> None:
        self.runs, self.total_recorded = runs, recorded
        self.done = self.done_recorded = 0
        self.next = time.monotonic() + PROGRESS_EVERY

    def __call__(self) -> None:
        self.done += 1
        self._maybe_note()

    def recorded(self, n: int) -> None:
        self.done_recorded += n
        self._maybe_note()

    def _maybe_note(self) -> None:
        now = time.monotonic()
        if now < self.next:
            return
        self.next = now + PROGRESS_EVERY
        text = f"evaluating: {self.done:,} of {self.runs:,} task runs"
        if self.total_recorded:
            text += f", {self.done_recorded:,} of {self.total_recorded:,} tasks recorded as history"
        note(text)


class SharedVectors:
    """An embedder whose vectors are kept in memory by text, shared by every engine given it (the folds'
    engines embed each text once). ``cache``, when given, is read first and never written: the agent's
    embedding cache, so its items are not embedded again (the messages of the tasks never reach a disk)."""

    def __init__(self, inner: TextEmbedder, cache: EmbeddingCache | None = None) -> None:
        self.inner = inner
        self.cache = cache
        self._memo: dict[str, np.ndarray] = {}

    @property
    def model_id(self) -> str | None:
        return self.inner.model_id

    def embed(self, texts: Sequence[str], *, show_progress: bool = False) -> np.ndarray:
        todo = [t for t in dict.fromkeys(texts) if t not in self._memo]
        if todo and self.cache is not None:
            for i, v in self.cache.get(todo).items():
                self._memo[todo[i]] = v
            todo = [t for t in todo if t not in self._memo]
        if todo:
            for t, v in zip(todo, self.inner.embed(todo, show_progress=show_progress)):
                self._memo[t] = v
        if not texts:
            return self.inner.embed([])
        return np.stack([self._memo[t] for t in texts])

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        return self.inner.count_tokens(texts)


def fold_engines(engine: Engine) -> Callable[[], Engine]:
    """Fresh engines over ``engine``'s agent (same chunking, index settings and summarizer) that keep what
    they learn in memory only and embed through one :class:`SharedVectors` reading ``engine``'s
    embedding cache: :func:`evaluate`'s ``make_engine``. ``engine`` is indexed first (its cache filled
    with its items' vectors, as ``contextsieve index`` does, and it reads its learned history then unless
    made with ``history=False``, as ``contextsieve eval`` makes it); that history is never written, and
    the fresh engines neither read nor write it."""
    from contextsieve.engine import Engine

    engine.index()
    shared = SharedVectors(engine.embedder, engine.store.cache)
    store = engine.store

    def make() -> Engine:
        fresh = Engine(
            engine.agent,
            embedder=shared,
            cache_dir=False,
            chunking=store.config,
            summarizer=store.summarizer,
            index=store.index_config,
            remember_requests=False,
            history=False,  # in memory: an agent loaded from a file would keep it under its identity
        )
        if fresh.store.usage().persistent:  # never: the guard that keeps the agent's own history untouched
            raise ContextSieveError("an evaluation engine would keep its history in a file; nothing was run")
        return fresh

    return make
