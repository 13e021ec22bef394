"""Agent-loop task rows from compact hand-written specs (shared by ``mcp_live`` and the step
annotations of the other sets).

A spec is ``(query, first_step_tools, (text, tools), ...)``: the first step's text is the query
itself (what the user sends), each later step a ``(text, tools)`` pair (what the host sends as the
next request). ``tools`` lists what that step needs: ``"server/tool"``, or a tuple of alternatives
of which any one would do; an empty list for a step that needs no tool.

A row (one ``queries.jsonl`` line): ``{"id", "query", "steps": [{"text", "relevant",
"relevant_groups"?}], "relevant", "relevant_groups"?, "split"}``; ``relevant`` flattens the groups,
``relevant_groups`` is written where some group has alternatives (the convention of
``benchmarks.quality.tool_selection.groups``, which reads a row and a step alike); the task's groups
are its steps' groups, each distinct group once; ``split`` is ``single`` (one group) or ``multi``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

Needed = Sequence[str | tuple[str, ...]]
Spec = tuple[Any, ...]


def _groups(tools: Needed) -> list[list[str]]:
    return [[t] if isinstance(t, str) else list(t) for t in tools]


def _with_groups(row: dict[str, Any], groups: list[list[str]]) -> dict[str, Any]:
    row["relevant"] = list(dict.fromkeys(t for g in groups for t in g))
    if any(len(g) > 1 for g in groups):
        row["relevant_groups"] = groups
    return row


def task_rows(specs: Iterable[Spec], known: set[str], prefix: str = "task-") -> list[dict[str, Any]]:
    """Rows of the specs in order (ids ``prefix0``, ``prefix1``, ...); ``SystemExit`` naming the task
    when a spec names a tool not in ``known`` or a task needs no tool at all."""
    rows = []
    for i, spec in enumerate(specs):
        rows.append(task_row(f"{prefix}{i}", spec, known))
    return rows


def task_row(task_id: str, spec: Spec, known: set[str]) -> dict[str, Any]:
    """The row of one spec (see the module's docstring)."""
    query, first, *later = spec
    steps_in: list[tuple[str, Needed]] = [(query, first), *later]
    steps, union = [], []
    seen: set[frozenset[str]] = set()
    for text, tools in steps_in:
        groups = _groups(tools)
        missing = [t for g in groups for t in g if t not in known]
        if missing:
            raise SystemExit(f"{task_id} names unknown tools {missing}")
        steps.append(_with_groups({"text": text}, groups))
        for g in groups:
            if frozenset(g) not in seen:
                seen.add(frozenset(g))
                union.append(g)
    if not union:
        raise SystemExit(f"{task_id} needs no tool")
    row = _with_groups({"id": task_id, "query": query, "steps": steps}, union)
    row["split"] = "multi" if len(union) > 1 else "single"
    return row
