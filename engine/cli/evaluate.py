"""``contextsieve eval``: tool selection measured on a user's own tasks against their agent file, cold and
with k-fold history, as a table or JSON (the scoring is :mod:`contextsieve.evaluation`'s)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from contextsieve.cli.agent_commands import TOOLS_HELP, load_engine

if TYPE_CHECKING:
    from contextsieve.evaluation.runner import Scores, TaskRun

__all__ = ["HELP", "DESCRIPTION", "add_parser", "run"]

HELP = "measure tool selection on your own tasks: recall, all found, tools per request, precision"
DESCRIPTION = """\
Measure tool selection on your own tasks against your agent file.

TASKS is a JSON Lines file, one task a line: {"message": "...", "tools": [...]} (one
request per task) or {"steps": [{"message": "...", "tools": [...]}, ...]} (an agent
loop, one request per step); tools as SERVER:TOOL or the offered name SERVER_TOOL, a
list in the list for "any one of these"; an optional "id".

Each task runs in a fresh session, one request per message; the model is played as
calling the needed tools it was offered. Printed: recall (share of needed tools
offered over the task), all found (share of tasks with every needed tool offered),
tools per request, and precision (share of offered tools the task needs); cold (no
history) and with K-fold history: task i is in fold i % K, and each fold is scored on
a fresh engine that first recorded the other folds' tasks as a host does
(record_tool_calls of a task's first message with its tools).

Your agent's own learned history is neither used nor changed: every engine of the
evaluation keeps what it learns in memory, and the tasks' messages are written
nowhere. Only the agent's items' vectors go to the embedding cache, as `index` does,
and the agent file's record to the agent registry (agents.sqlite in the data folder:
its path and identity, as every command that opens an agent file keeps them).
Tasks of one message in different folds are warned of: each finds the other's tools.
"""

_COLUMNS = (
    ("recall", "recall"),
    ("all found", "all_found"),
    ("tools/request", "tools_per_request"),
    ("precision", "precision"),
)


def add_parser(sub: Any) -> None:
    """The ``eval`` subcommand's parser."""
    e = sub.add_parser("eval", help=HELP, description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    e.add_argument("agent", type=Path, help="agent YAML file or agent folder")
    e.add_argument("tasks", type=Path, help="JSON Lines file of tasks (see above)")
    e.add_argument(
        "--folds",
        type=_folds,
        default=2,
        metavar="K",
        help="folds of the history measure (default 2; 0 or 1: cold only)",
    )
    e.add_argument("--json", action="store_true", help="print the measures (and each task's misses) as JSON")
    e.add_argument("--tools", type=Path, help=TOOLS_HELP)
    e.add_argument("--offline", action="store_true", help="do not ask the agent's MCP servers for their tools")


def _folds(text: str) -> int:
    try:
        k = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if k < 0:
        raise argparse.ArgumentTypeError(f"folds are 0 or more, got {k}")
    return k


def run(args: argparse.Namespace) -> None:
    """Run the evaluation and print it (table or JSON)."""
    from contextsieve.evaluation.runner import check_folds, evaluate, fold_engines, scores
    from contextsieve.evaluation.tasks import read_tasks

    engine = load_engine(args.agent, args.tools, args.offline, history=False)  # the agent's history: unopened
    tasks = read_tasks(args.tasks, engine.agent)  # checked before anything is embedded
    check_folds(tasks, args.folds)  # so are the folds
    result = evaluate(fold_engines(engine), tasks, args.folds)
    rows: list[tuple[str, list[TaskRun]]] = [("cold", result.cold)]
    if result.history is not None:
        rows.append((f"{result.folds}-fold history", result.history))
    measured = [(name, scores(runs)) for name, runs in rows]
    if args.json:
        print(json.dumps(_as_json(engine.agent.name, result.folds, measured, rows), indent=1, ensure_ascii=False))
        return
    first = measured[0][1]
    print(
        f"{engine.agent.name}: {first.tasks} tasks, {first.requests} requests, "
        + (f"history from {result.folds} folds" if result.history is not None else "cold only")
    )
    print("| history | " + " | ".join(c for c, _ in _COLUMNS) + " |")
    print("| --- | " + " | ".join("---:" for _ in _COLUMNS) + " |")
    for name, s in measured:
        print(f"| {name} | " + " | ".join(_cell(attr, getattr(s, attr)) for _, attr in _COLUMNS) + " |")


def _cell(attr: str, value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.1f}" if attr == "tools_per_request" else f"{value:.3f}"


def _as_json(
    agent: str, folds: int, measured: list[tuple[str, Scores]], rows: list[tuple[str, list[TaskRun]]]
) -> dict[str, Any]:
    keep = ("tasks", "requests", "recall", "all_found", "tools_per_request", "precision", "step_recall")
    out: dict[str, Any] = {"agent": agent, "folds": folds}
    for (name, s), (_, runs) in zip(measured, rows):
        key = "cold" if name == "cold" else "history"
        out[key] = {k: v for k, v in s.to_dict().items() if k in keep}
        out[key]["missed"] = [
            {"id": r.task.id, "tools": [[f"{k.server}:{k.name}" for k in g] for g in r.missed()]}
            for r in runs
            if r.missed()
        ]
    out.setdefault("history", None)
    return out
