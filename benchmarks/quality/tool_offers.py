"""Tool offers across an agent loop: what each request sends and what it keeps of the prompt cache.

    python -m benchmarks.quality.tool_offers [--tasks-per-session 5]

The agent holds the 584 tools of ``benchmarks/data/mcp_catalog`` in ``agent`` mode (default
settings, the default embedder). Each task of its 120 is split into steps (sentences, then clauses
joined by "and", "then", "and then", ", ", "; ": the steps a host's loop would send one at a time,
approximated from the text, as the catalog's tasks carry no step text), each step sent as its own
request; sessions hold several tasks in a row (``--tasks-per-session``, default 5). The offers of the
same selections:

- ``per-request``: each request offers what it selected (``Request.tools``), as today;
- ``stable``: ``OfferConfig(mode="stable", budget=30)``, ``Session.new_task`` at each task; with
  ``prefill`` 20 / 30 the first step of a task also offers the best 20 / 30 of a tool search for it,
  and with ``grow`` 1 / 0 a later step adds at most its best 1 / 0 tools not offered yet;
- ``deferred``: ``Request.anthropic(tools="deferred")``: every tool declared with ``defer_loading``,
  the request's selection loaded by ``tool_reference``.

Per mode: ``prefix same`` = share of requests (after a session's first) whose serialized tools +
system are byte-identical to the previous request's; ``same in task`` = the same for the requests
after a task's first step only (what an agent loop over one task keeps); ``tools/step`` = tools the model can use at a
step (offered, or loaded for ``deferred``); ``tools/task`` = distinct such tools over a task's steps;
``tok/step`` = MiniLM tokens of the tool definitions in the model's context per step (for
``deferred``: the search tool and the loaded tools, since deferred definitions stay out of the
context until loaded: a documented estimate of what the provider counts; the bytes sent are in
``KB sent``); ``union R`` = share of a task's needed tools (groups: any member counts) that some
step of the task offered or loaded, averaged over tasks; ``step R`` = the same for each step alone
against the whole task's needs (how much one request covers).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics

from benchmarks.common import DATA
from benchmarks.quality.tool_selection import catalog_agent, groups, load, load_servers
from contextsieve.models.cpu import cpu_summary

CATALOG = DATA / "mcp_catalog"
_SENTENCE = re.compile(r"(?<=[.!?。！？])\s+")
_CLAUSE = re.compile(r",?\s+(?:and then|then|after that|afterwards|and)\s+|,\s+|;\s+", re.IGNORECASE)
MODES = (
    "per-request",
    "stable",
    "stable prefill 20",
    "stable prefill 20 grow 1",
    "stable prefill 30 grow 0",
    "deferred",
)


def steps(task: str) -> list[str]:
    """A task's steps: its sentences, each cut at "then"-like joints (never an empty step)."""
    out: list[str] = []
    for sentence in _SENTENCE.split(task.strip()):
        out += [p.strip() for p in _CLAUSE.split(sentence) if p and p.strip()]
    return out or [task]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks-per-session", type=int, default=5)
    ap.add_argument("--variant", default=None, help="embedder variant (default: auto)")
    args = ap.parse_args(argv)
    from contextsieve import Embedder, OfferConfig
    from contextsieve.engine import Engine

    tools, queries = load(CATALOG)
    agent = catalog_agent(tools, load_servers(CATALOG), "catalog")
    emb = Embedder(variant=args.variant)
    engine = Engine(agent, embedder=emb, cache_dir=False)
    engine.index()
    name_of = {n: f"{k.server}/{k.name}" for n, k in agent.tool_names().items()}
    count = emb.count_tokens
    rows: dict[str, dict[str, list[float]]] = {m: {} for m in MODES}

    def add(mode: str, key: str, value: float) -> None:
        rows[mode].setdefault(key, []).append(value)

    per_step = [len(steps(q["query"])) for q in queries]
    for start in range(0, len(queries), args.tasks_per_session):
        chunk = queries[start : start + args.tasks_per_session]
        sessions = {
            "per-request": engine.session(),
            "stable": engine.session(offer=OfferConfig(mode="stable", budget=30)),
            "stable prefill 20": engine.session(offer=OfferConfig(mode="stable", budget=30, prefill=20)),
            "stable prefill 20 grow 1": engine.session(offer=OfferConfig(mode="stable", budget=30, prefill=20, grow=1)),
            "stable prefill 30 grow 0": engine.session(offer=OfferConfig(mode="stable", budget=30, prefill=30, grow=0)),
            "deferred": engine.session(),
        }
        previous: dict[str, str | None] = {m: None for m in MODES}
        for q in chunk:
            gs = groups(q)
            task_tools: dict[str, set[str]] = {m: set() for m in MODES}
            for mode in MODES:
                if mode.startswith("stable"):
                    sessions[mode].new_task()
            for n_step, step in enumerate(steps(q["query"])):
                for mode, s in sessions.items():
                    r = s.build_request(step)
                    s.record_reply(r, "")
                    if mode == "deferred":
                        payload = r.anthropic(tools="deferred")
                        prefix = json.dumps([payload["tools"], payload["system"]])
                        loaded = [t for t in r.tools]
                        in_context = [t for t in payload["tools"] if not t.get("defer_loading")] + loaded
                        usable = [t["name"] for t in loaded]
                    else:
                        payload = r.anthropic()
                        prefix = json.dumps([payload["tools"], payload["system"]])
                        in_context = list(r.tools)
                        usable = [t["name"] for t in r.tools]
                    if previous[mode] is not None:
                        add(mode, "prefix same", float(prefix == previous[mode]))
                    if n_step > 0:
                        add(mode, "same in task", float(prefix == previous[mode]))
                    previous[mode] = prefix
                    add(mode, "tools/step", len(usable))
                    add(mode, "tok/step", sum(count([json.dumps(t) for t in in_context])) if in_context else 0)
                    add(mode, "KB sent", len(prefix.encode()) / 1000)
                    got = {name_of.get(n, n) for n in usable}
                    add(mode, "step R", sum(1 for g in gs if g & got) / len(gs))
                    task_tools[mode] |= got
            for mode in MODES:
                add(mode, "tools/task", len(task_tools[mode]))
                add(mode, "union R", sum(1 for g in gs if g & task_tools[mode]) / len(gs))

    print(
        f"# tool offers: {len(queries)} tasks, {sum(per_step)} steps (mean {statistics.mean(per_step):.2f} per task), "
        f"sessions of {args.tasks_per_session} tasks; {cpu_summary()}"
    )
    cols = ["prefix same", "same in task", "tools/step", "tools/task", "tok/step", "KB sent", "step R", "union R"]
    print("| mode | " + " | ".join(cols) + " |")
    print("| --- | " + " | ".join("---" for _ in cols) + " |")
    for mode in MODES:
        vals = [statistics.mean(rows[mode][c]) for c in cols]
        cells = [f"{v * 100:.0f}%" for v in vals[:2]] + [f"{v:.1f}" for v in vals[2:6]] + [f"{v:.3f}" for v in vals[6:]]
        print(f"| {mode} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
