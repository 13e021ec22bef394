"""Tools the history used next to a request's best tools: relations between tools, learned from use.

When the recorded tasks that used one of a request's two best tools used another tool right before or
right after it in at least :data:`COMPANION_SHARE` of them (``git_add`` before ``git_commit``, a page
search before the comment on it), that tool joins the request in a free place (``via="companion"``,
``pulled_by`` the tool it was used with), up to ``AgentSettings.companion_tools``. In a later step
of a task the tool the task called last is the first seed (what usually comes right after it), and a
tool the task already called is no companion. A companion never
takes the place of a tool the request's own words found: taking places lowered recall on the real
servers (``python -m benchmarks.quality.tool_loop --history-folds 2``, docs/selection.md). Relations
are read off the recorded examples (:class:`~contextsieve.agent.tool_relations.Relations`): nothing is
recorded twice, and forgetting the history forgets them. Without history nothing changes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from contextsieve.agent.items import IncludeMode, ItemKey, ItemKind
from contextsieve.agent.tool_relations import Relations
from contextsieve.selection.context import ContextEntry

__all__ = ["companion_entries", "COMPANION_SHARE", "COMPANION_SEEDS"]

#: Least share of the recorded tasks using a seed tool in which the companion was used right before or
#: after it.
COMPANION_SHARE = 0.5
#: How many of a request's best tools (its own search's, best first) seed companions.
COMPANION_SEEDS = 2


def companion_entries(
    relations: Relations,
    entries: list[ContextEntry],
    allowed: Callable[[ItemKey], bool],
    n: int,
    after: Sequence[ItemKey] = (),
) -> list[ContextEntry]:
    """At most ``n`` companions of the best tools among ``entries`` (those the request's search chose,
    ``via="query"``, in their order) that are not in ``entries`` and that ``allowed`` lets the request
    offer: each with the share of the seed's tasks it was used next to it as its score, strongest first.
    ``after``: for a later step of a task, the tools the task called so far, in order: the latest is
    the first seed (what usually comes next), and none of them is a companion (it was just used)."""
    if n <= 0 or not relations.uses:
        return []
    seeds = [
        e.key for e in entries if e.key.kind is ItemKind.TOOL and e.mode is IncludeMode.AGENT and e.via == "query"
    ][:COMPANION_SEEDS]
    if after:
        seeds = [after[-1], *(k for k in seeds if k != after[-1])]
    have = {e.key for e in entries} | set(after)
    found: dict[ItemKey, tuple[float, ItemKey]] = {}
    for seed in seeds:
        for key, share in relations.companions(seed, COMPANION_SHARE):
            if key not in have and key not in found and allowed(key):
                found[key] = (share, seed)
    best = sorted(found.items(), key=lambda x: (-x[1][0], str(x[0])))[:n]
    return [
        ContextEntry(key, IncludeMode.AGENT, round(share, 6), None, None, None, "companion", seed)
        for key, (share, seed) in best
    ]
