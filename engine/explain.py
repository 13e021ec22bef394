"""Why (or why not) an item is in a request: the facts the selection used, in words."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Explanation"]


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
