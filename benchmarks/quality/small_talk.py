"""The absolute floor (``context_min_score``): what small talk selects, and recall on real requests.

    python -m benchmarks.quality.small_talk [--data benchmarks/data/mcp_catalog benchmarks/data/mcp_tasks
                                     ../shared/eval/metatool] [--sample 500] [--floors none,0.1,...]

For each catalog (``tools.jsonl`` / ``queries.jsonl`` in the format of ``benchmarks.quality.tool_selection``,
every server in ``agent`` mode) and each floor, the default pipeline is run on the catalog's queries
(a fixed sample of ``--sample`` with ``random.Random(0)`` when there are more) and on
:data:`SMALL_TALK` (greetings, thanks, chit-chat: nothing in any catalog is asked for). Columns:
R@sel and all@sel (as in ``benchmarks.quality.tool_selection``), n = tools selected per query, and
"small talk" = tools selected per small-talk message (the target is 0). The last table does the
same on the bundled example agent (rules, references and tools; ``always`` items not counted) with
the two messages of issue 27 item 15 that must keep their tool.
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

from benchmarks.common import cpu_line
from benchmarks.quality.tool_selection import MemoEmbedder, catalog_agent, load, load_servers, metrics

#: Messages that ask for nothing: a floor should leave them with no agent-mode items.
SMALL_TALK = (
    "hi",
    "hello!",
    "hey there",
    "thanks!",
    "thank you so much",
    "ok",
    "okay, cool",
    "good morning",
    "how are you?",
    "bye",
    "see you tomorrow",
    "great, thanks",
    "lol",
    "nice",
    "sounds good",
    "sure",
    "cheers",
    "have a nice day",
    "what's up?",
    "never mind",
)

#: Example-agent messages whose tool must survive the floor (issue 27 item 15).
MUST_KEEP = {
    "Please open a pull request for the cart rounding fix.": "tool:github:create_pull_request",
    "Where is my parcel? It was supposed to arrive yesterday.": "tool:helpdesk:track_parcel",
}


def floors(spec: str) -> list[float | None]:
    return [None if f == "none" else float(f) for f in spec.split(",")]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--data",
        type=Path,
        nargs="+",
        default=[
            Path("benchmarks/data/mcp_catalog"),
            Path("benchmarks/data/mcp_tasks"),
            Path("../shared/eval/metatool"),
        ],
    )
    ap.add_argument("--sample", type=int, default=500)
    ap.add_argument("--floors", default="none,0.1,0.15,0.2,0.25,0.3")
    args = ap.parse_args(argv)
    from contextsieve import Embedder
    from contextsieve.agent.agentfile import example_agent_path, load_agent
    from contextsieve.agent.items import IncludeMode
    from contextsieve.engine import Engine

    emb = MemoEmbedder(Embedder(variant="int8"))
    print(cpu_line())
    for folder in args.data:
        if not (folder / "tools.jsonl").exists():
            print(f"\n{folder}: no tools.jsonl, skipped")
            continue
        tools, queries = load(folder)
        if len(queries) > args.sample:
            queries = random.Random(0).sample(queries, args.sample)
        engine = Engine(catalog_agent(tools, load_servers(folder), "eval"), embedder=emb, cache_dir=False)
        engine.index()
        print(f"\n{folder.name}: {len(queries)} queries, {len(tools)} tools\n")
        print("| context_min_score | R@sel | all@sel | n | small talk |")
        print("| --- | --- | --- | --- | --- |")
        for floor in floors(args.floors):
            sess = engine.session(context_min_score=floor)

            def run(q: str) -> list[str]:
                return [f"{e.key.server}/{e.key.name}" for e in sess.build_request(q).context.entries]  # noqa: B023

            m = metrics([run(q["query"]) for q in queries], queries)
            talk = sum(len(run(t)) for t in SMALL_TALK) / len(SMALL_TALK)
            print(f"| {floor} | {m['R@sel']:.3f} | {m['all@sel']:.3f} | {m['n']:.2f} | {talk:.2f} |", flush=True)
    engine = Engine(load_agent(example_agent_path()), embedder=emb, cache_dir=False)
    print("\nexample agent (offline: its own tool list): agent-mode items per small-talk message, and the two")
    print("messages that must keep their tool\n")
    print("| context_min_score | small talk | " + " | ".join(MUST_KEEP.values()) + " |")
    print("| --- | --- | " + " | ".join("---" for _ in MUST_KEEP) + " |")
    for floor in floors(args.floors):
        sess = engine.session(context_min_score=floor)

        def agent_items(q: str) -> list[str]:
            ctx = sess.build_request(q).context  # noqa: B023
            return [str(e.key) for e in ctx.entries if e.mode is IncludeMode.AGENT]

        talk = sum(len(agent_items(t)) for t in SMALL_TALK) / len(SMALL_TALK)
        kept = ["kept" if want in agent_items(q) else "LOST" for q, want in MUST_KEEP.items()]
        print(f"| {floor} | {talk:.2f} | " + " | ".join(kept) + " |", flush=True)


if __name__ == "__main__":
    main()
