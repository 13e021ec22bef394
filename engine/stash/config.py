"""The settings of a stash store (:class:`StashConfig`): chunking, dedup, redaction, the embedding
form, supersession proposals and the ranking weights it retrieves with."""

from __future__ import annotations

from dataclasses import dataclass

from contextsieve.errors import InputError
from contextsieve.stash.ranking import RankConfig
from contextsieve.stash.segment import MAX_SEGMENT_CHARS

__all__ = ["StashConfig"]


@dataclass(frozen=True, kw_only=True)
class StashConfig:
    """Settings of a stash store.

    Attributes:
        rank: :class:`~contextsieve.stash.ranking.RankConfig` (retrieval score weights).
        chunk_tokens: model tokens per chunk of a long segment (default 200; the model reads 256).
        overlap_tokens: tokens repeated between consecutive chunks (default 32).
        dedup: a segment whose exact text (sha256) is already stashed in its session is not stored
            again; its existing id is returned (default True).
        near_duplicate: also treat as a duplicate a segment whose vector is at least this cosine to a
            stored one of its session (default None: off; 0.95 is a reasonable value).
        max_segment_chars: longest text one segment may hold (default 1,000,000).
        preview_chars: characters of text in a retrieval preview (default 500).
        redact: replace credentials of known shapes (provider API keys, tokens, private keys, passwords
            in URLs and ``.env`` lines) by a typed placeholder before a segment is embedded or stored
            (default True; see :mod:`contextsieve.stash.redact`).
        propose_supersede: when set (a cosine in (0, 1]), a newly stashed segment whose first chunk is at
            least this similar to a current segment of its session that it does not already supersede
            is reported in :attr:`StashResult.may_supersede` (default None: off, no search at stash
            time; 0.9 is a starting point with all-MiniLM-L6-v2, where restatements of one fact
            score above it and different facts on one topic mostly below). One dense search per new
            segment.
        embed_type: embed each segment (each chunk of a long one) with its type as a first word,
            ``message: <text>`` (the stored text stays as given; the query is embedded as it is). Short
            turns embedded alone are the model's weak spot; the type gives each the same context. Measured
            with ``python -m benchmarks.stash_quality --forms plain,type`` and ``benchmarks.stash_recall``
            (docs/stash.md): higher recall on every set tried. A property of the store, fixed when its
            first segment is written: ``None`` (default) keeps the store's own (on for a store made by
            this version, off for one made before it); ``True``/``False`` for a new store, and an
            existing store whose form differs refuses to open (:class:`InputError`; export and import
            into a new store to change it).
    """

    rank: RankConfig = RankConfig()
    chunk_tokens: int = 200
    overlap_tokens: int = 32
    dedup: bool = True
    near_duplicate: float | None = None
    max_segment_chars: int = MAX_SEGMENT_CHARS
    preview_chars: int = 500
    redact: bool = True
    embed_type: bool | None = None
    propose_supersede: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.rank, RankConfig):
            raise InputError(f"rank must be a RankConfig, got {type(self.rank).__name__}")
        if not 8 <= self.chunk_tokens <= 256 or not 0 <= self.overlap_tokens < self.chunk_tokens // 2:
            raise InputError("need 8 <= chunk_tokens <= 256 and 0 <= overlap_tokens < chunk_tokens / 2")
        if self.near_duplicate is not None and not 0.0 < self.near_duplicate <= 1.0:
            raise InputError(f"near_duplicate must be in (0, 1] or None, got {self.near_duplicate!r}")
        if self.propose_supersede is not None and not 0.0 < self.propose_supersede <= 1.0:
            raise InputError(f"propose_supersede must be in (0, 1] or None, got {self.propose_supersede!r}")
        if self.max_segment_chars < 1 or self.preview_chars < 1:
            raise InputError("max_segment_chars and preview_chars must be positive")
        if self.embed_type is not None and not isinstance(self.embed_type, bool):
            raise InputError(f"embed_type must be True, False or None, got {self.embed_type!r}")
