"""Why (or why not) an item is in a request: the facts the selection recorded in its trace, in words."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from contextsieve.agent.items import IncludeMode, Item, ItemKey, Tool
from contextsieve.selection.ranking import FILL_KEYWORD, FILL_RATIO, names_nothing, weak_evidence

if TYPE_CHECKING:
    from contextsieve.agent.settings import AgentSettings
    from contextsieve.selection.context import ContextEntry
    from contextsieve.selection.search_trace import ItemFacts
    from contextsieve.session.assembly import Request

__all__ = ["Explanation", "explain_item"]


@dataclass(frozen=True)
class Explanation:
    """An item's fate for one message.

    Attributes:
        key: the item (as ``str(ItemKey)``).
        included: whether it is in the request.
        mode: how it got in (``always`` / ``manual`` / ``agent`` / ``expansion``), or ``None``.
        via: for searched items, ``query`` / ``min-representation`` / ``expansion``.
        scores: its best dense score against each query sentence (searched items only).
        best_score: its similarity (the dense score of its best chunk; a keyword term only changes the ranking).
        chunk_rank: 1-based rank of its best chunk among all candidate chunks (the top-K cut counts chunks).
        item_rank: 1-based rank among the items the top-K chunks grouped into (``None`` if not among them).
        reasons: the decisive facts, in order.
    """

    key: str
    included: bool
    mode: str | None = None
    via: str | None = None
    scores: tuple[float, ...] = ()
    best_score: float | None = None
    chunk_rank: int | None = None
    item_rank: int | None = None
    reasons: tuple[str, ...] = field(default_factory=tuple)

    def __str__(self) -> str:
        head = f"{self.key}: {'included' if self.included else 'not included'}"
        if self.mode:
            head += f" ({self.mode}{', via ' + self.via if self.via else ''})"
        lines = [head]
        if self.scores:
            lines.append("  scores per query sentence: " + ", ".join(f"{s:.3f}" for s in self.scores))
        lines += [f"  - {r}" for r in self.reasons]
        return "\n".join(lines)


def explain_item(
    key: ItemKey,
    request: Request,
    *,
    session_mode: IncludeMode | None,
    include_mode: IncludeMode,
    tool_available: bool,
    item: Item | None = None,
) -> Explanation:
    """Why ``key`` is or is not in ``request``, from the request's own search trace.

    Args:
        session_mode: the item's mode in the session, if it is a session item.
        include_mode: the item's effective include mode in the agent.
        tool_available: for tools, whether the session may use it (autonomous sessions filter some).
        item: the item itself (default ``None``: not given); a tool its server listed over the input
            limits (:class:`~contextsieve.agent.tool_limits.ToolLimits`) gets a last reason saying what was cut.
    """
    ex = _explain(key, request, session_mode, include_mode, tool_available)
    if isinstance(item, Tool) and item.key == key and item.cut_note:
        cut = (
            f"its MCP server listed it over the input limits (ToolLimits): it is searched and sent cut, {item.cut_note}"
        )
        ex = dataclasses.replace(ex, reasons=(*ex.reasons, cut))
    return ex


def _explain(
    key: ItemKey,
    request: Request,
    session_mode: IncludeMode | None,
    include_mode: IncludeMode,
    tool_available: bool,
) -> Explanation:
    ctx, trace = request.context, request.trace
    k = str(key)
    if session_mode is not None:
        return Explanation(
            k,
            True,
            session_mode.value,
            None,
            reasons=(f"it is in the session as {session_mode.value}: session items go into every request",),
        )
    if include_mode is not IncludeMode.AGENT:
        removed = " (removed from this session)" if include_mode is IncludeMode.ALWAYS else ""
        return Explanation(
            k,
            False,
            reasons=(f"its include mode is {include_mode.value}: only agent-mode items are chosen by search{removed}",),
        )
    if not tool_available:
        return Explanation(
            k,
            False,
            reasons=("the session is autonomous and this tool needs approval under the tool permission setting",),
        )
    if not ctx.query_chunks:
        return Explanation(k, False, reasons=("the message has no text to search with",))
    facts = trace.facts(key) if trace is not None else None
    if facts is None:
        return Explanation(k, False, reasons=("no search ran for this request",))
    s = facts.domain.settings
    entry = next((e for e in ctx.entries if e.key == key), None)
    dropped = next((d for d in ctx.dropped if getattr(d.entry, "key", None) == key), None)
    reasons = _search_reasons(facts)
    if entry is not None:
        reasons.append(_included_reason(entry, s))
    elif dropped is not None:
        tokens = f" ({dropped.tokens} tokens)" if dropped.tokens else ""
        reasons.append(f"selected at {dropped.entry.score:.3f} but dropped: {dropped.reason}{tokens}")
    elif facts.item_rank is not None:
        reasons.append(_left_out_reason(facts))
    included = entry is not None
    return Explanation(
        k,
        included,
        entry.mode.value if entry else None,
        entry.via if entry else None,
        facts.scores,
        facts.similarity,
        facts.chunk_rank,
        facts.item_rank,
        tuple(reasons),
    )


def _search_reasons(facts: ItemFacts) -> list[str]:
    """What the search's numbers say of an item: where its best chunk ranked, and each term that moved
    its ranking score."""
    s = facts.domain.settings
    reasons: list[str] = []
    if not facts.in_top_k:
        reasons.append(
            f"its best chunk ranks {facts.chunk_rank} among candidate chunks, past the top-K cut of "
            f"{s.context_top_k} chunks"
        )
    elif facts.similarity <= 0 and facts.item_rank is None:
        reasons.append(f"its best similarity {facts.similarity:.3f} is not above 0")
    elif facts.similarity <= 0:
        reasons.append(f"its best similarity {facts.similarity:.3f} is not above 0, but a keyword match brings it in")
    elif facts.item_rank is not None:
        reasons.append(
            f"its best chunk ranks {facts.chunk_rank} (within top-K {s.context_top_k}); it is item "
            f"{facts.item_rank} after grouping"
        )
    if round(facts.server, 3):  # a term that rounds to 0 adds nothing worth a reason ("adds -0.000")
        reasons.append(
            f"its server's profile matches the message: adds {facts.server:.3f} (server_weight {s.server_weight})"
        )
    if round(facts.outcome, 3):
        reasons.append(
            f"it was offered for requests like this one and not called: its recorded misses take "
            f"{-facts.outcome:.3f} off (outcome_weight {s.outcome_weight})"
        )
    if round(facts.keyword, 3):
        reasons.append(
            f"keyword match (BM25, weight {s.keyword_weight}) adds {facts.keyword:.3f} to its best chunk's score"
        )
    elif s.keyword_fusion == "rrf" and s.keyword_weight > 0:
        reasons.append(
            f"chunks are ranked by reciprocal-rank fusion of dense and keyword (weight {s.keyword_weight}) ranks"
        )
    if facts.domain.path == "hnsw":
        reasons.append(
            "the chunks were found through the HNSW index (approximate nearest neighbours, then scored exactly)"
        )
    return reasons


def _included_reason(entry: ContextEntry, s: AgentSettings) -> str:
    """Why an item the request holds got in."""
    if entry.via == "min-representation" and entry.query_chunk is not None:
        if s.min_representation_floor is None:
            return (
                f"promoted so that query sentence {entry.query_chunk + 1} is represented: no chosen item "
                f"scored from it, and this is its best match, with evidence (similarity {entry.score:.3f}, "
                f"or a keyword match)"
            )
        return (
            f"promoted so that query sentence {entry.query_chunk + 1} is represented (floor "
            f"{s.min_representation_floor})"
        )
    if entry.via == "task":
        return (
            f"carried from the task's first message, where it scores {entry.score:.3f} (task_tools "
            f"{s.task_tools}: a later step of a task offers the task's best tools not selected yet)"
        )
    if entry.via == "companion":
        return (
            f"the history used it right before or after {entry.pulled_by} in {entry.score:.0%} of the recorded "
            f"tasks that used {entry.pulled_by} (companion_tools {s.companion_tools})"
        )
    if entry.via == "expansion":
        return f"pulled in by {entry.pulled_by} at {entry.score:.3f} (expansion threshold {s.expansion_threshold})"
    if entry.score is not None and entry.score >= s.context_include_score:
        return f"its similarity {entry.score:.3f} is at or above the include score {s.context_include_score}"
    return f"below the include score {s.context_include_score}, but within top-N {s.context_top_n}"


def _left_out_reason(facts: ItemFacts) -> str:
    """Which cut-off of :func:`~contextsieve.selection.ranking.cut` left out an item its top chunks
    grouped into (``facts.item_rank`` set)."""
    s = facts.domain.settings
    grouped = facts.domain.grouped
    assert facts.item_rank is not None
    mine = grouped[facts.item_rank - 1]
    own, top = mine.score, facts.domain.ratio_base
    doubled, keywords_count = names_nothing(grouped, facts.domain.words)
    floor = None if s.context_min_score is None else s.context_min_score * (2 if doubled else 1)
    if floor is not None and mine.sim < floor and not (mine.keyword and keywords_count):
        why = " x 2: a short message that names nothing here" if doubled else ""
        kw = "its keyword match is small talk" if mine.keyword else "no keyword of the message matches it"
        return (
            f"its similarity {mine.sim:.3f} is below the floor {floor:g} (context_min_score "
            f"{s.context_min_score}{why}) and {kw} (too little evidence)"
        )
    if s.context_min_ratio is not None and top > 0 and own < s.context_min_ratio * top:
        via = "" if top == grouped[0].score else "; the best matched by its own text, not a recorded example"
        return (
            f"its ranking score {own:.3f} is below context_min_ratio {s.context_min_ratio} x the best "
            f"item's {top:.3f} (adaptive size{via})"
        )
    fill = None if s.context_min_ratio is None else max(s.context_min_ratio, FILL_RATIO)
    if (
        facts.domain.name == "rules+references"
        and fill is not None
        and s.context_min_score is not None
        and top > 0
        and own < fill * top
        and weak_evidence(mine, s.context_min_score)
    ):
        return (
            f"its ranking score {own:.3f} is below {fill} x the best item's {top:.3f} and its evidence is weak "
            f"(a similarity under {2 * s.context_min_score:g}, no keyword match of at least {FILL_KEYWORD} of the "
            "best): a place is not filled with it"
        )
    return (
        f"its similarity {facts.similarity:.3f} is below the include score {s.context_include_score} and "
        f"top-N {s.context_top_n} was already filled"
    )
