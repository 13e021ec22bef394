"""What a request's tool catalog costs: built afresh for every request against kept with the agent.

    python -m benchmarks.speed.tool_catalog [--repeat 1000]

A request carries every tool its session may use as definitions sorted by name
(``Request.catalog``: what a deferred offer declares), built by
:func:`contextsieve.session.assembly.tool_catalog`. It is kept with the agent's item table until the
agent's tools or their names change; before, every request built it. For the tools of each set (every
tool in ``agent`` mode, as :mod:`benchmarks.quality.tool_selection` loads them), the median time of
building it with nothing kept (the memo emptied before each call: what every request paid) and of
reading it back (what a request pays now), in ms, medians of ``--repeat`` calls, side by side in one
process.
"""

from __future__ import annotations

import argparse
import statistics
import time

from benchmarks.common import DATA, cpu_line


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=1000)
    ap.add_argument("--sets", default="mcp_tasks,mcp_live,mcp_catalog")
    args = ap.parse_args(argv)
    from benchmarks.quality.tool_selection import catalog_agent, load, load_servers
    from contextsieve.session.assembly import tool_catalog

    print(cpu_line())
    print("\n| tools of | tools | built for every request ms | kept ms |")
    print("| --- | --- | --- | --- |")
    for name in args.sets.split(","):
        tools, _ = load(DATA / name)
        agent = catalog_agent(tools, load_servers(DATA / name), name)
        names = agent.tool_names()
        memo = agent.table().memo
        fresh, kept = [], []
        for _ in range(args.repeat):
            memo.clear()
            t = time.perf_counter()
            tool_catalog(agent, names, "all")
            fresh.append(time.perf_counter() - t)
            t = time.perf_counter()
            tool_catalog(agent, names, "all")
            kept.append(time.perf_counter() - t)
        built, read = (1e3 * statistics.median(v) for v in (fresh, kept))
        print(f"| {name} | {len(agent.tools)} | {built:.3f} | {read:.4f} |")


if __name__ == "__main__":
    main()
