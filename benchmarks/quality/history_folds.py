"""Learning from history in the tool benchmarks (``--history-folds K`` of :mod:`benchmarks.quality.tool_loop`
and :mod:`benchmarks.quality.tool_selection`): the sets' tasks as :mod:`contextsieve.evaluation` tasks, and
the rows of their tables, cold and with history.

The scoring is the package's (:func:`contextsieve.evaluation.runner.evaluate`, also behind ``contextsieve eval``):
a set's tasks are split into K folds by position (task ``i`` in fold ``i % K``); each fold is scored on a
fresh engine with nothing recorded (``cold``) and on a fresh engine that first recorded every task of the
other folds through the path a host uses, ``Engine.record_tool_calls(task's first message, the tools its
annotation needs, in order)`` (``K folds``). The rows hold every task of the set, each scored once per
column.
"""

from __future__ import annotations

import argparse
import random
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.common import cpu_line
from contextsieve.agent.items import ItemKey, ItemKind
from contextsieve.evaluation.runner import Scores, TaskRun, evaluate, scores
from contextsieve.evaluation.tasks import Step, Task

__all__ = [
    "key",
    "ordered_groups",
    "as_task",
    "history_rows",
    "loop_columns",
    "one_request_table",
    "add_example_arguments",
    "set_example_constants",
    "LOOP_COLUMNS",
]

#: The loop table's columns, in order (see :mod:`benchmarks.quality.tool_loop`).
LOOP_COLUMNS = ("union R", "all found", "step R", "first R", "prec", "tools/step", "tools/task", "p50 ms")


def key(tool: str) -> ItemKey:
    """The key of a benchmark tool id ``server/name``."""
    server, name = tool.split("/", 1)
    return ItemKey(ItemKind.TOOL, name, server)


def ordered_groups(q: dict[str, Any]) -> tuple[tuple[ItemKey, ...], ...]:
    """A task's or step's needed groups as annotated (``relevant_groups``, else each of ``relevant``
    alone), in their order."""
    raw = q.get("relevant_groups") or [[r] for r in q.get("relevant", [])]
    return tuple(dict.fromkeys(tuple(key(t) for t in dict.fromkeys(g)) for g in raw))


def as_task(q: dict[str, Any], *, loop: bool = True) -> Task:
    """A benchmark task (``query``, ``relevant``/``relevant_groups``, optional ``steps`` of ``text`` with
    their own needs or none) as an evaluation task: its steps when ``loop`` and it has them, else its
    query as one request needing the whole task's groups."""
    needs = ordered_groups(q)
    if loop and q.get("steps"):
        steps = tuple(Step(s["text"], ordered_groups(s) if "relevant" in s else None) for s in q["steps"])
    else:
        steps = (Step(q["query"], needs),)
    return Task(steps, needs, str(q.get("id", "")))


def add_example_arguments(ap: argparse.ArgumentParser) -> None:
    """``--example-gate``, ``--narrow-example-gate`` and ``--example-score``: how close a recorded example
    must be to count, and what it then ranks at, for this run (see :func:`set_example_constants`)."""
    ap.add_argument(
        "--example-gate",
        type=float,
        metavar="COS",
        help="for this run: the cosine from which a recorded example counts for a request on its own or a "
        "task's first request (contextsieve.agent.settings.EXAMPLE_SIMILARITY, default 0.4)",
    )
    ap.add_argument(
        "--narrow-example-gate",
        type=float,
        metavar="COS",
        help="for this run: the same for a task's later steps and the tools a task carries "
        "(contextsieve.agent.settings.NARROW_EXAMPLE_SIMILARITY, default 0.5)",
    )
    ap.add_argument(
        "--example-score",
        type=float,
        metavar="S",
        help="for this run: the ranking score of an example matched at its gate, rising linearly to 1 "
        "(contextsieve.agent.settings.EXAMPLE_SCORE, default 0.3; equal to the gate: the example's own cosine)",
    )


def set_example_constants(args: argparse.Namespace) -> str:
    """Set the module constants :data:`contextsieve.agent.settings.EXAMPLE_SIMILARITY` (``--example-gate``),
    :data:`~contextsieve.agent.settings.NARROW_EXAMPLE_SIMILARITY` (``--narrow-example-gate``) and
    :data:`~contextsieve.agent.settings.EXAMPLE_SCORE` (``--example-score``) for the rest of this process
    (an option not given leaves its constant as it is); the search reads them at each request, so the
    run measures the change. Returns a line saying what was set ("" when nothing was)."""
    from contextsieve.agent import settings

    given = {
        "EXAMPLE_SIMILARITY": (args.example_gate, "--example-gate"),
        "NARROW_EXAMPLE_SIMILARITY": (args.narrow_example_gate, "--narrow-example-gate"),
        "EXAMPLE_SCORE": (args.example_score, "--example-score"),
    }
    for name, (value, flag) in given.items():
        if value is not None:
            if not 0.0 <= value < 1.0:
                raise SystemExit(f"{flag} must be in [0, 1), got {value}")
            setattr(settings, name, value)
    if all(value is None for value, _ in given.values()):
        return ""
    return (
        f"examples count from cosine {settings.EXAMPLE_SIMILARITY} (a narrow offer "
        f"{settings.NARROW_EXAMPLE_SIMILARITY}), ranked from {settings.EXAMPLE_SCORE} there"
    )


def loop_columns(s: Scores) -> dict[str, float | None]:
    """The loop table's cells of ``s``."""
    return {
        "union R": s.recall,
        "all found": s.all_found,
        "step R": s.step_recall,
        "first R": s.first_recall,
        "prec": s.precision,
        "tools/step": s.tools_per_request,
        "tools/task": s.tools_per_task,
        "p50 ms": s.p50_ms,
    }


def history_rows(
    make_engine: Callable[[], Any], tasks: list[Task], folds: int, **run: Any
) -> list[tuple[str, Scores, list[TaskRun]]]:
    """``(label, scores, runs)`` cold and with ``folds``-fold history (labels ``cold`` and ``K folds``)."""
    result = evaluate(make_engine, tasks, folds, **run)
    rows = [("cold", scores(result.cold), result.cold)]
    if result.history is not None:
        rows.append((f"{folds} folds", scores(result.history), result.history))
    return rows


def one_request_table(
    folders: list[Path], folds: int, *, sample: int, split: str | None, variant: str | None, vectors_only: bool = False
) -> None:
    """``tool_selection --history-folds K``: the default pipeline, one request per task (its whole query),
    cold and with history, every data folder in one table (a folder of more than ``sample`` tasks: the
    same fixed sample as the other tables, ``random.Random(0)``; ``split``: only its queries of that
    split). Columns as ``tool_selection``'s: R@sel (recall of the task's groups), all@sel, n (tools
    offered), then prec (:class:`~contextsieve.evaluation.runner.Scores`'s precision) and the request p50.
    ``vectors_only``: each engine keeps its history in a file of its own without the requests' text (a
    host's default ``history.sqlite``: its examples have no words for the keyword index), else in memory
    with the text (what ``contextsieve eval`` does)."""
    from benchmarks.quality.tool_selection import catalog_agent, load, load_servers
    from contextsieve import Embedder
    from contextsieve.engine import Engine

    emb = Embedder(variant=variant)
    print(cpu_line(), flush=True)
    rows = []
    for folder in folders:
        tools, queries = load(folder)
        if split:
            queries = [q for q in queries if q.get("split") == split]
        if len(queries) > sample:
            queries = random.Random(0).sample(queries, sample)
        agent = catalog_agent(tools, load_servers(folder), "eval")
        with tempfile.TemporaryDirectory(prefix="tool-selection-") as cache:  # the tools' vectors, shared
            made = iter(range(10**9))

            def fresh() -> Engine:
                history = Path(cache) / f"history-{next(made)}.sqlite" if vectors_only else None  # noqa: B023
                engine = Engine(agent, embedder=emb, cache_dir=cache, history=history)  # noqa: B023
                engine.index()
                return engine

            name = f"{folder.name}{f' {split}' if split else ''}, {len(queries)} tasks"
            name += ", history as vectors" if vectors_only else ""
            for history, s, _ in history_rows(fresh, [as_task(q, loop=False) for q in queries], folds):
                rows.append((name, history, s))
                print(f"  {name}, {history}: " + _one_request_cells(s), flush=True)
    print("\n| data | history | R@sel | all@sel | n | prec | p50 ms |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, history, s in rows:
        print(f"| {name} | {history} | " + _one_request_cells(s).replace(", ", " | ") + " |")


def _one_request_cells(s: Scores) -> str:
    precision = "-" if s.precision is None else f"{s.precision:.3f}"
    return f"{s.recall:.3f}, {s.all_found:.3f}, {s.tools_per_request:.1f}, {precision}, {s.p50_ms:.1f}"
