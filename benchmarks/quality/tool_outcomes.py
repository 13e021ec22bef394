"""Learning from the outcome: does recording what the model called (and what it was offered and did
not call) raise tool recall at equal tools on a later pass over the same tasks?

    python -m benchmarks.quality.tool_outcomes [--data benchmarks/data/mcp_catalog ...] [--weights 0.1,0.2,0.3]

Per data set (default: ``benchmarks/data/mcp_catalog`` and ``benchmarks/data/mcp_tasks``; MetaTool-
format folders), one agent holds every tool in ``agent`` mode (default settings). The queries are
split by position: even ones are the **seen** tasks, odd ones the **unseen** tasks. Pass 1 sends
each seen task as one request and plays a model that calls exactly the needed tools the request
offered (a needed group counts when any member was offered; the first offered member is called);
pass 2 sends the seen tasks again (the later pass the outcome should improve), and the unseen ones
(what learning from other tasks does to new requests). Configurations:

- ``nothing recorded``: pass 2 as pass 1 (the control);
- ``examples``: ``Session.record_tool_calls`` of the called tools (what the library did before);
- ``outcome w``: ``Session.record_outcome`` (called tools as examples, the request's other selected
  tools as misses) with ``outcome_weight`` w.

``R@sel`` = share of a task's needed groups among the tools offered, averaged over tasks; ``tools`` =
tools offered per request (mean). Every configuration starts from an empty usage log.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.common import DATA, group_recall
from benchmarks.quality.tool_selection import catalog_agent, groups, load, load_servers
from contextsieve.models.cpu import cpu_summary


def _run(engine: Any, qs: list[dict], name_of: dict[str, str], **settings: Any) -> tuple[float, float, list[Any]]:
    recall, tools, requests = [], [], []
    for q in qs:
        request = engine.session(**settings).build_request(q["query"])
        offered = {name_of[t["name"]] for t in request.tools}
        recall.append(group_recall(offered, groups(q)))
        tools.append(len(request.tools))
        requests.append(request)
    return statistics.fmean(recall), statistics.fmean(tools), requests


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", nargs="*", type=Path, default=[DATA / "mcp_catalog", DATA / "mcp_tasks"])
    ap.add_argument("--weights", default="0.1,0.2,0.3,0.5")
    ap.add_argument("--variant", default=None, help="embedder variant (default: auto)")
    args = ap.parse_args(argv)
    from contextsieve import Embedder
    from contextsieve.engine import Engine

    emb = Embedder(variant=args.variant)
    weights = [float(w) for w in args.weights.split(",") if w]
    print(cpu_summary())
    print()
    head = ("data", "configuration", "seen: R@sel pass 1", "seen: R@sel pass 2", "seen: tools pass 2")
    print("| " + " | ".join(head + ("unseen: R@sel", "unseen: tools")) + " |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for folder in args.data:
        rows, queries = load(folder)
        agent = catalog_agent(rows, load_servers(folder), folder.name)
        seen, unseen = queries[0::2], queries[1::2]
        with tempfile.TemporaryDirectory() as cache:
            engine = Engine(agent, embedder=emb, cache_dir=cache)
            engine.index()
            name_of = {n: f"{k.server}/{k.name}" for n, k in agent.tool_names().items()}
            key_of = {f"{t.server}/{t.name}": t.key for t in agent.tools}
            configs: list[tuple[str, str | None, float]] = [
                ("nothing recorded", None, 0.0),
                ("examples", "examples", 0.0),
            ]
            configs += [(f"outcome {w}", "outcome", w) for w in weights]
            for label, how, w in configs:
                for kind in ("examples", "misses"):
                    engine.store.forget_examples(None, kind)
                first, _, requests = _run(engine, seen, name_of, outcome_weight=w)
                session = engine.session(outcome_weight=w)
                for q, request in zip(seen, requests):
                    offered = {name_of[t["name"]] for t in request.tools}
                    called = [key_of[sorted(g & offered)[0]] for g in groups(q) if g & offered]
                    if how == "examples" and called:
                        session.record_tool_calls(request.message, called)
                    elif how == "outcome":
                        session.record_outcome(request, called)
                second, tools2, _ = _run(engine, seen, name_of, outcome_weight=w)
                new, tools_new, _ = _run(engine, unseen, name_of, outcome_weight=w)
                cells = (folder.name, label, f"{first:.3f}", f"{second:.3f}", f"{tools2:.2f}")
                print("| " + " | ".join(cells + (f"{new:.3f}", f"{tools_new:.2f}")) + " |", flush=True)


if __name__ == "__main__":
    main()
