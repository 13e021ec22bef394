"""Writes the step annotations of the existing tool sets as agent-loop task files.

    python benchmarks/data/loop_steps/build.py

``mcp_tasks.jsonl``: the tasks of ``benchmarks/data/mcp_tasks`` annotated in ``mcp_tasks.py`` (not
all of them: those with steps written), in the order of the set's ``queries.jsonl``, with the set's
ids; lines as :mod:`benchmarks.data.loop_steps.steps` describes (``{"id", "query", "steps":
[{"text", "relevant"}], "relevant", "split"}``), read with the set's ``tools.jsonl`` by
``benchmarks.quality.tool_loop``. Fails when a first step is not the task's message, a tool is not
in the catalog, or a task's step needs leave out a tool of its whole-task ``relevant``; prints the
tools the steps add.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))

from benchmarks.data.loop_steps.mcp_tasks import STEPS  # noqa: E402
from benchmarks.data.loop_steps.steps import task_row  # noqa: E402


def main() -> None:
    source = HERE.parent / "mcp_tasks"
    tools = [json.loads(x) for x in (source / "tools.jsonl").read_text(encoding="utf-8").splitlines() if x.strip()]
    known = {f"{t['server']}/{t['name']}" for t in tools}
    tasks = [json.loads(x) for x in (source / "queries.jsonl").read_text(encoding="utf-8").splitlines() if x.strip()]
    unknown = set(STEPS) - {t["id"] for t in tasks}
    if unknown:
        raise SystemExit(f"annotations of tasks the set does not have: {sorted(unknown)}")
    rows = []
    for task in tasks:
        if task["id"] not in STEPS:
            continue
        row = task_row(task["id"], (task["query"], *STEPS[task["id"]]), known)
        lost = set(task["relevant"]) - set(row["relevant"])
        if lost:
            raise SystemExit(f"{task['id']}: the steps leave out {sorted(lost)}")
        added = [r for r in row["relevant"] if r not in task["relevant"]]
        if added:
            print(f"{task['id']}: steps add {added}")
        rows.append(row)
    out = HERE / "mcp_tasks.jsonl"
    out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    n_steps = sum(len(r["steps"]) for r in rows)
    print(f"mcp_tasks: {len(rows)} of {len(tasks)} tasks annotated, {n_steps} steps -> {out.name}")


if __name__ == "__main__":
    main()
