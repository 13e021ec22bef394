"""What the stash's calls return: :class:`StashResult` (a stash), :class:`Retrieved` (one retrieval
result), :class:`RetrieveTrace` with its :class:`Candidate` entries (every candidate a retrieve ranked)
and :class:`MergeResult` (segments handed back for the active context); :class:`Namespace` (a session of
the store, as :meth:`StashStore.namespaces <contextsieve.stash.store.StashStore.namespaces>` lists it)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from contextsieve.stash.segment import ContextSegment

__all__ = ["StashResult", "Retrieved", "RetrieveTrace", "Candidate", "MergeResult", "Namespace"]


@dataclass(frozen=True)
class Namespace:
    """A session (namespace) of a store: its name, how many segments it holds, and when the latest was
    stashed (UTC; ``None`` for an empty one)."""

    name: str
    segments: int
    last_stashed: datetime | None


@dataclass(frozen=True)
class StashResult:
    """What :meth:`StashStore.stash <contextsieve.stash.store.StashStore.stash>` did.

    Attributes:
        segment_ids: one id per input segment, in input order (a duplicate gets the stored segment's id).
        stashed: segments newly stored. duplicates: inputs that were already stashed.
        tokens: model tokens of the newly stored segments.
        redacted: secrets replaced by a placeholder before storage, by kind (counts only; see
            :mod:`contextsieve.stash.redact`).
        may_supersede: with :attr:`~contextsieve.stash.config.StashConfig.propose_supersede` set,
            ``{new id: stored id}`` for each new segment whose meaning is that close to a current segment
            of its session (a restated or changed fact): stash it again with ``supersedes`` to make it so
            (nothing is marked here).
    """

    segment_ids: tuple[str, ...]
    stashed: int
    duplicates: int
    tokens: int
    redacted: Mapping[str, int] = field(default_factory=dict)
    may_supersede: Mapping[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, object]:
        """What a stash tool returns (MCP and the framework integrations): segment_ids, stashed_count,
        duplicates, tokens_stashed, secrets_redacted, and may_supersede when there is any."""
        out: dict[str, object] = {
            "segment_ids": list(self.segment_ids),
            "stashed_count": self.stashed,
            "duplicates": self.duplicates,
            "tokens_stashed": self.tokens,
            "secrets_redacted": dict(self.redacted),
        }
        if self.may_supersede:
            out["may_supersede"] = dict(self.may_supersede)
        return out


@dataclass(frozen=True)
class Retrieved:
    """One retrieval result: the segment, its dense similarity (cosine), its keyword score (BM25
    divided by the best BM25 among the candidates: 1 for the best keyword match, 0 for none), the
    combined ranking score (best first), and that score's parts: ``dense`` and ``keyword`` (each
    signal scaled and weighted), ``day`` (the day stage: ``RankConfig.day_weight`` x the best
    relevance among the candidates of its creation day), ``names`` (``RankConfig.name_weight`` x the
    share of the query's names and quoted phrases it holds) and ``recency`` (the two time decays,
    weighted), which add up to it."""

    segment: ContextSegment
    similarity: float
    keyword: float
    score: float
    parts: Mapping[str, float] = field(default_factory=dict)

    def to_dict(self, preview_chars: int = 500) -> dict[str, object]:
        s = self.segment
        return {
            "segment_id": s.id,
            "text": s.preview(preview_chars),
            "type": s.type.value,
            "similarity": round(self.similarity, 4),
            "keyword": round(self.keyword, 4),
            "score": round(self.score, 4),
            "why": {k: round(v, 4) for k, v in self.parts.items()},
            "timestamp": s.timestamp.isoformat(),
            "stashed_at": s.stashed_at.isoformat(),
            "tokens": s.tokens,
            "topic": s.topic,
            "source": s.source,
            **({"supersedes": list(s.supersedes)} if s.supersedes else {}),
            **({"superseded_by": s.superseded_by} if s.superseded_by else {}),
        }


@dataclass(frozen=True)
class Candidate:
    """A segment a retrieve ranked: its dense similarity, keyword score (scaled as in :class:`Retrieved`),
    combined score, rank among the candidates (1 = best) and what became of it: ``"retrieved"``,
    ``"below top_k"``, ``"duplicate"`` (the same content ranked higher, e.g. stashed in another session)
    or ``"below min_similarity"`` (ranked, but its similarity is under the threshold)."""

    segment_id: str
    similarity: float
    keyword: float
    score: float
    rank: int
    outcome: str


@dataclass(frozen=True)
class RetrieveTrace:
    """What a retrieve computed: every candidate it ranked (the best ``candidates`` by dense similarity
    and by keywords, see :class:`~contextsieve.stash.ranking.RankConfig`), best first, and the limits it
    applied. :meth:`find` answers why a segment was or was not retrieved without searching again."""

    top_k: int
    min_similarity: float
    pool: int
    candidates: tuple[Candidate, ...]

    def find(self, segment_id: str) -> Candidate | None:
        """The candidate entry of ``segment_id``, or ``None`` when it was not among the candidates."""
        return next((c for c in self.candidates if c.segment_id == segment_id), None)


@dataclass(frozen=True)
class MergeResult:
    """Segments handed back for the active context, with their full texts.

    Attributes:
        segments: in the order asked for. tokens: their model tokens in all. removed: whether they
            were deleted from the stash (``keep=False``).
    """

    segments: tuple[ContextSegment, ...]
    tokens: int
    removed: bool

    def to_dict(self) -> dict[str, object]:
        return {
            "merged_count": len(self.segments),
            "tokens_added": self.tokens,
            "removed_from_stash": self.removed,
            "segments": [
                {"segment_id": s.id, "type": s.type.value, "tokens": s.tokens, "text": s.text} for s in self.segments
            ],
        }
