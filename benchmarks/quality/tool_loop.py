"""Tool selection in an agent loop: one request per step of a task, in one session, on several catalogs.

    python -m benchmarks.quality.tool_loop [--limit N] [--sets mcp_live,mcp_tasks] [--configs "defaults,top_n"]
    python -m benchmarks.quality.tool_loop --sets mcp_live --configs defaults --misses defaults  # the steps missed
    python -m benchmarks.quality.tool_loop --ranks --configs "-"  # where the steps' needed tools rank
    python -m benchmarks.quality.tool_loop --history-folds 2 --configs "defaults"  # cold and with history
    python -m benchmarks.quality.tool_loop --history-folds 2 --example-gate 0.5  # one gate for every request

Sets (:data:`SETS`; each one :class:`Engine` over its catalog, every tool in ``agent`` mode, the
default embedder):

- ``mcp_live``: the tools that real MCP servers listed (``benchmarks/data/mcp_live``) and its
  hand-written multi-step tasks, each step annotated with the tools it needs;
- ``mcp_tasks``: the hand-written 10-server catalog with the step annotations of
  ``benchmarks/data/loop_steps/mcp_tasks.jsonl``;
- ``mcp_catalog~``: the 584 real tools of ``benchmarks/data/mcp_catalog`` with its tasks split into
  steps by :func:`benchmarks.quality.tool_offers.steps` (sentences and "then"/"and" clauses): an
  approximation (``~``): the tasks carry no step text and no per-step needs, so its per-step recall
  is not measured.

Each task runs in one session (a fresh one per task unless ``--tasks-per-session``;
:meth:`Session.new_task` at each task's start): per step ``build_request(step text)`` (timed),
``record_reply(request, "")`` (as the MCP gateway does), and the model is played as calling, for
each group the step needs, the first offered member (by name; on a set without per-step needs, each
of the task's groups not called yet, at the first step that offers it): with ``learn="outcome"``
``record_outcome(request, called)`` (the called tools become examples, the request's other selected
tools misses), with ``"examples"`` ``record_tool_calls``, with ``None`` nothing. Recorded outcomes are
kept by the engine (learning across the set's tasks, in file order, as a host's usage log would);
each configuration runs on a fresh engine (the tools' vectors from a shared temporary embedding
cache), so nothing learned and no query vector carries over from one to the next. The loop itself is
:func:`contextsieve.evaluation.runner.run_tasks` (what ``contextsieve eval`` runs too).

``--history-folds K`` (:mod:`benchmarks.quality.history_folds`): each set's tasks in K folds (task ``i``
in fold ``i % K``), each fold scored on a fresh engine cold (nothing recorded first: row ``cold``) and on
a fresh engine that first recorded every task of the other folds as a host does,
``Engine.record_tool_calls(task's first message, the tools its annotation needs, in order)`` (row
``K folds``); both rows cover every task of the set.

Configurations are :data:`CONFIGS` (name, session settings, :class:`OfferConfig` arguments or
``None``, what is learned): add a row to measure another.

Columns: ``union R`` = share of a task's needed tool groups that some step offered (``Request.tools``;
a group counts when any member was offered), averaged over tasks; ``all found`` = share of tasks
whose every group was offered at some step; ``step R`` = share of a step's own needed groups offered
at that step, averaged over the steps that need a tool; ``first R`` = share of the task's groups the
first request (the user's message alone) offered; ``prec`` = share of a request's offered tools that
its task needs (a member of one of its groups), averaged over the requests; ``tools/step`` = tools
offered per request (mean); ``tools/task`` = distinct tools offered over a task's steps (mean);
``p50 ms`` = median request time (``build_request``; indicative on a shared machine).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.common import DATA, cpu_line
from benchmarks.quality.history_folds import (
    LOOP_COLUMNS,
    add_example_arguments,
    as_task,
    history_rows,
    loop_columns,
    set_example_constants,
)
from benchmarks.quality.tool_offers import steps as regex_steps
from benchmarks.quality.tool_selection import catalog_agent, groups, load, load_servers
from contextsieve.evaluation.runner import label


@dataclass(frozen=True)
class Config:
    """One configuration: session settings, the offer (``OfferConfig`` keyword arguments, ``None`` for
    the default per-request offer) and what the played model's calls record (``"outcome"``,
    ``"examples"`` or ``None``)."""

    name: str
    settings: dict[str, Any] = field(default_factory=dict)
    offer: dict[str, Any] | None = None
    learn: str | None = "outcome"


#: The selection before issue 41: every request aims for ``tool_top_n`` tools, none carried from the task.
BEFORE: dict[str, Any] = {"tool_base_n": None, "task_tools": 0}

#: The configurations measured, in table order (``--configs`` picks by name).
CONFIGS: tuple[Config, ...] = (
    Config("defaults"),
    Config("defaults, nothing learned", learn=None),
    Config("defaults, calls as examples only", learn="examples"),
    Config("before: 10 tools a request, none carried", BEFORE),
    Config("before, nothing learned", BEFORE, learn=None),
    Config("6 tools a request, none carried, nothing learned", {**BEFORE, "tool_top_n": 6}, learn=None),
    Config("later steps sized 5+1, none carried, nothing learned", {"task_tools": 0}, learn=None),
    Config("sized 5+2, 2 carried, nothing learned", {"tool_chunk_n": 2}, learn=None),
    Config("sized 6+1, 2 carried, nothing learned", {"tool_base_n": 6}, learn=None),
    Config("sized 4+1, 2 carried, nothing learned", {"tool_base_n": 4}, learn=None),
    Config("1 carried, nothing learned", {"task_tools": 1}, learn=None),
    Config("3 carried, nothing learned", {"task_tools": 3}, learn=None),
    Config("2 carried from 1 server, nothing learned", {"task_servers": 1}, learn=None),
    Config("+ server profile 0.2, nothing learned", {"server_weight": 0.2}, learn=None),
    Config("+ server profile 0.5, nothing learned", {"server_weight": 0.5}, learn=None),
    Config("tool_top_n=5", {"tool_top_n": 5}),
    Config("aggressive preset", {"preset": "aggressive"}),
    Config("stable (budget 30)", offer={"mode": "stable", "budget": 30}),
    Config("stable prefill 20 grow 1", offer={"mode": "stable", "budget": 30, "prefill": 20, "grow": 1}),
)


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _annotated(catalog: str, queries: Path | None = None) -> Callable[[], tuple[list[dict], dict[str, str], list]]:
    def load_set() -> tuple[list[dict], dict[str, str], list]:
        tools, qs = load(DATA / catalog)
        return tools, load_servers(DATA / catalog), _read_jsonl(queries) if queries else qs

    return load_set


def _regex_split(catalog: str) -> Callable[[], tuple[list[dict], dict[str, str], list]]:
    def load_set() -> tuple[list[dict], dict[str, str], list]:
        tools, qs = load(DATA / catalog)
        for q in qs:
            q["steps"] = [{"text": s} for s in regex_steps(q["query"])]  # no per-step needs
        return tools, load_servers(DATA / catalog), qs

    return load_set


#: name -> loader of (tools, server descriptions, tasks with ``steps``).
SETS: dict[str, Callable[[], tuple[list[dict], dict[str, str], list]]] = {
    "mcp_live": _annotated("mcp_live"),
    "mcp_tasks": _annotated("mcp_tasks", DATA / "loop_steps" / "mcp_tasks.jsonl"),
    "mcp_catalog~": _regex_split("mcp_catalog"),
}


def run_set(engine: Any, tasks: list[dict], config: Config, per_session: int, misses: list | None = None) -> dict:
    """Every task of a set under one configuration on ``engine`` (fresh: nothing learned, no query
    vector kept), scored by :mod:`contextsieve.evaluation`; the table's columns (see the module
    docstring). ``misses``, when given, receives ``(task id, step number, step text, [needed groups not
    offered], offered tools)`` per step that left one of its needs out."""
    from contextsieve.evaluation.runner import run_tasks, scores

    runs = run_tasks(engine, [as_task(q) for q in tasks], on_miss=_miss_hook(misses), **_run_args(config, per_session))
    return loop_columns(scores(runs))


def _run_args(config: Config, per_session: int) -> dict[str, Any]:
    """:func:`contextsieve.evaluation.runner.run_tasks`'s arguments for ``config``."""
    from contextsieve import OfferConfig

    offer = OfferConfig(**config.offer) if config.offer else None
    return {"settings": config.settings, "offer": offer, "learn": config.learn, "per_session": per_session}


def _miss_hook(misses: list | None) -> Callable[..., None] | None:
    """What collects ``misses`` (see :func:`run_set`) from :func:`run_tasks`' report of each step."""
    if misses is None:
        return None

    def hear(task: Any, n: int, lost: list, offered: frozenset) -> None:
        need = [sorted(map(label, g)) for g in lost]
        misses.append((task.id, n, task.steps[n].message, need, sorted(map(label, offered))))

    return hear


#: Rank buckets of :func:`ranks` (a needed group's best member's rank in a tool search).
BUCKETS = ((1, "1"), (3, "2-3"), (6, "4-6"), (10, "7-10"), (20, "11-20"), (50, "21-50"))


def ranks(engine: Any, name_of: dict[str, str], tasks: list[dict]) -> dict[str, dict[str, int]]:
    """Where the tools each annotated step needs rank: for every needed group of a step, the rank of
    its best member in a tool search (:meth:`Session.search_tools`, 50 tools, no cut-offs) for the
    step's text, for the task's first message, and the better of the two; ``">50"`` past the 50th.
    Says what a per-step offer can reach: a group no text ranks high is found by neither."""
    session = engine.session()
    out: dict[str, dict[str, int]] = {w: {} for w in ("step", "task", "better")}

    def order(text: str) -> list[str]:
        return [name_of[m.definition["name"]] for m in session.search_tools(text, 50)]

    def bucket(rank: int) -> str:
        return next((label for top, label in BUCKETS if rank <= top), ">50")

    for task in tasks:
        whole = order(task["query"])
        for step in task["steps"]:
            if not step.get("relevant"):
                continue
            own = order(step["text"])
            for g in groups(step):
                r_step = min((own.index(t) + 1 for t in g if t in own), default=99)
                r_task = min((whole.index(t) + 1 for t in g if t in whole), default=99)
                for w, r in (("step", r_step), ("task", r_task), ("better", min(r_step, r_task))):
                    out[w][bucket(r)] = out[w].get(bucket(r), 0) + 1
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, help="at most N tasks per set (the first N)")
    ap.add_argument("--sets", help=f"comma-separated set names (default: all of {', '.join(SETS)})")
    ap.add_argument("--configs", help="comma-separated parts of configuration names (default: all)")
    ap.add_argument("--tasks-per-session", type=int, default=1, help="tasks sent in a row in one session")
    ap.add_argument("--variant", default=None, help="embedder variant (default: auto)")
    ap.add_argument("--misses", help="print the steps whose needed tools this configuration did not offer")
    ap.add_argument("--ranks", action="store_true", help="first, where the steps' needed tools rank (see ranks())")
    ap.add_argument(
        "--history-folds",
        type=int,
        metavar="K",
        help="each configuration cold and with the other folds' tasks recorded first (task i in fold i %% K)",
    )
    add_example_arguments(ap)
    args = ap.parse_args(argv)
    said = set_example_constants(args)
    from contextsieve import Embedder
    from contextsieve.engine import Engine

    names = args.sets.split(",") if args.sets else list(SETS)
    configs = [c for c in CONFIGS if not args.configs or any(p in c.name for p in args.configs.split(","))]
    emb = Embedder(variant=args.variant)
    print(cpu_line(), flush=True)
    if said:
        print(f"# {said}", flush=True)
    rows: list[tuple[str, str, str, dict]] = []
    for set_name in names:
        tools, servers, tasks = SETS[set_name]()
        tasks = tasks[: args.limit] if args.limit else tasks
        agent = catalog_agent(tools, servers, set_name)
        cache = tempfile.TemporaryDirectory(prefix="tool-loop-")  # the tools' vectors, for every configuration
        t = time.perf_counter()
        Engine(agent, embedder=emb, cache_dir=cache.name).index()
        n_steps = sum(len(q["steps"]) for q in tasks)
        print(
            f"{set_name}: {len(tools)} tools on {len(agent.servers)} servers, {len(tasks)} tasks, {n_steps} steps "
            f"({n_steps / len(tasks):.2f} per task, {sum(len(groups(q)) for q in tasks) / len(tasks):.2f} tool "
            f"groups per task); indexed in {time.perf_counter() - t:.1f} s",
            flush=True,
        )
        name_of = {n: f"{k.server}/{k.name}" for n, k in agent.tool_names().items()}
        if args.ranks and any(step.get("relevant") for q in tasks for step in q["steps"]):
            labels = [label for _, label in BUCKETS] + [">50"]
            print("  rank of a step's needed tool group, by the text searched: " + " | ".join(labels))
            for w, counts in ranks(Engine(agent, embedder=emb, cache_dir=cache.name), name_of, tasks).items():
                print(f"  {w}: " + " | ".join(str(counts.get(label, 0)) for label in labels))

        def fresh() -> Any:  # no examples, no query cache; the tools' vectors from the shared cache
            engine = Engine(agent, embedder=emb, cache_dir=cache.name)  # noqa: B023 (used in this iteration)
            engine.index()
            return engine

        for config in configs:
            if args.history_folds:
                run = _run_args(config, args.tasks_per_session)
                for history, s, _ in history_rows(fresh, [as_task(q) for q in tasks], args.history_folds, **run):
                    rows.append((set_name, config.name, history, loop_columns(s)))
                    print(f"  {config.name}, {history}: " + ", ".join(_cell(k, v) for k, v in rows[-1][3].items()))
                continue
            lost: list = []
            m = run_set(fresh(), tasks, config, args.tasks_per_session, lost)
            rows.append((set_name, config.name, "", m))
            print(f"  {config.name}: " + ", ".join(_cell(k, v) for k, v in m.items()), flush=True)
            if args.misses == config.name:
                for task_id, n, text, need, offered in lost:
                    print(f"    miss {task_id} step {n + 1}: {text[:90]!r} needs {need}; offered {offered}")
        cache.cleanup()
    history_col = ["history"] if args.history_folds else []
    print("\n| set | configuration | " + " | ".join(history_col + list(LOOP_COLUMNS)) + " |")
    print("| --- | --- | " + " | ".join("---" for _ in history_col + list(LOOP_COLUMNS)) + " |")
    for set_name, config_name, history, m in rows:
        cells = ([history] if history_col else []) + [_cell(c, m[c]) for c in LOOP_COLUMNS]
        print(f"| {set_name} | {config_name} | " + " | ".join(cells) + " |")


def _cell(col: str, value: float | None) -> str:
    if value is None:
        return "-"
    if col in ("tools/step", "tools/task"):
        return f"{value:.1f}"
    if col == "p50 ms":
        return f"{value:.1f}"
    return f"{value:.3f}"


if __name__ == "__main__":
    main()
