"""What an agent's history says about its tools used together (issue 49's relations between tools),
read off the examples of its usage log (:mod:`contextsieve.agent.usage`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from contextsieve.agent.example_records import Example, stamps
from contextsieve.agent.items import ItemKey

__all__ = ["Relations", "relations"]


@dataclass(frozen=True)
class Relations:
    """What an agent's history says about its tools used together, read off its examples: the tools
    recorded for one request (one task's message: a host's calls under a task, or one
    ``record_tool_calls`` list) were used in that task, in the order of their record times.

    Attributes:
        uses: per tool, in how many recorded tasks it was used.
        next_to: per tool ``a``, per tool ``b``: in how many of those tasks ``b`` was used right before
            or right after ``a``.
    """

    uses: dict[ItemKey, int]
    next_to: dict[ItemKey, dict[ItemKey, int]]

    def companions(self, tool: ItemKey, share: float) -> list[tuple[ItemKey, float]]:
        """The tools used right before or after ``tool`` in at least ``share`` of the tasks that used it,
        with that share, most often first (ties by key)."""
        n = self.uses.get(tool, 0)
        if n == 0:
            return []
        got = [(b, c / n) for b, c in self.next_to.get(tool, {}).items() if c / n >= share]
        return sorted(got, key=lambda x: (-x[1], str(x[0])))


def relations(examples: Mapping[ItemKey, Sequence[Example]]) -> Relations:
    """The :class:`Relations` of a log's examples (per tool, as :meth:`UsageLog.records` gives them)."""
    tasks: dict[str, list[tuple[float, str, ItemKey]]] = {}
    for key, kept in examples.items():
        name = str(key)
        for h, at in stamps(kept):
            tasks.setdefault(h, []).append((at, name, key))
    uses: dict[ItemKey, int] = {}
    next_to: dict[ItemKey, dict[ItemKey, int]] = {}
    for used in tasks.values():
        order = [k for _, _, k in sorted(used)]
        for k in order:
            uses[k] = uses.get(k, 0) + 1
        for a, b in zip(order, order[1:]):
            next_to.setdefault(a, {})[b] = next_to.setdefault(a, {}).get(b, 0) + 1
            next_to.setdefault(b, {})[a] = next_to.setdefault(b, {}).get(a, 0) + 1
    return Relations(uses, next_to)
