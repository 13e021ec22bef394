"""The stash store (seed 004): an agent stashes pruned context segments, retrieves the relevant ones
by meaning and merges them back.

:class:`StashStore` is the one entry point; it does validation, chunking, embedding, dedup, ranking
and reference walks the same way over either backend (SQLite file or PostgreSQL + pgvector).

Sessions: every segment belongs to a session, and every call names the caller's session. A call sees
only its own session's segments unless it asks for more (``cross_session=True`` on retrieval);
segment ids of another session are treated as unknown.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
import secrets
import threading
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from contextsieve.errors import (
    EmbedderOutputError,
    InputError,
    StashModelError,
    UnknownSegmentError,
    brief,
    check_text,
)
from contextsieve.retrieval.embedding import TextEmbedder, checked_vectors
from contextsieve.retrieval.text import query_chunks, token_windows
from contextsieve.stash.backend import (
    Filters,
    SegmentRow,
    StashBackend,
    index_terms,
    model_family,
    query_terms,
    to_epoch,
)
from contextsieve.stash.ranking import RankConfig, combined_scores
from contextsieve.stash.redact import redact
from contextsieve.stash.segment import (
    MAX_SEGMENT_CHARS,
    CheckedSegment,
    ContextSegment,
    NewSegment,
    SegmentType,
    aware,
    check_ids,
    check_segment,
    check_session,
    content_hash,
    no_nul,
)

__all__ = [
    "StashConfig",
    "StashStore",
    "StashResult",
    "Retrieved",
    "RetrieveTrace",
    "Candidate",
    "MergeResult",
    "SegmentFilter",
    "DEFAULT_SESSION",
]

#: Largest ``offset`` of a listing (SQLite integers are 64-bit).
_MAX_OFFSET = 2**62
#: Largest ``max_age`` of :meth:`StashStore.cleanup_old`, in days (about 10,000 years: every time a
#: store can hold).
_MAX_AGE_DAYS = 3_660_000

#: Session of calls that name none.
DEFAULT_SESSION = "default"
_MAX_TOP_K = 1_000


@dataclass(frozen=True)
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


@dataclass(frozen=True)
class SegmentFilter:
    """What a caller may filter retrieval and listings by (every field ANDed; ``None``: any).

    Attributes:
        types: segment types. topics / sources: exact labels. since / until: creation time range
            (aware datetimes, inclusive). protected: only protected (True) or unprotected (False).
    """

    types: tuple[SegmentType, ...] | None = None
    topics: tuple[str, ...] | None = None
    sources: tuple[str, ...] | None = None
    since: datetime | None = None
    until: datetime | None = None
    protected: bool | None = None

    @classmethod
    def coerce(cls, value: object) -> "SegmentFilter":
        """A filter from itself, ``None``, or a mapping with keys ``type``/``types``,
        ``topic``/``topics``, ``source``/``sources``, ``start_time``/``since``, ``end_time``/``until``
        and ``protected`` (seed 004's names and these; a single value or a list). Unknown keys are refused."""
        if value is None:
            return cls()
        if isinstance(value, SegmentFilter):
            return value
        if not isinstance(value, Mapping):
            raise InputError(f"filters must be an object, got {type(value).__name__}")
        names = {
            "type": "types",
            "types": "types",
            "topic": "topics",
            "topics": "topics",
            "source": "sources",
            "sources": "sources",
            "start_time": "since",
            "since": "since",
            "end_time": "until",
            "until": "until",
            "protected": "protected",
        }
        unknown = sorted(str(k) for k in value if k not in names)
        if unknown:
            raise InputError(f"unknown filters {unknown}; known: {sorted(names)}")
        kw: dict[str, Any] = {}
        for key, v in value.items():
            name = names[key]
            if name in kw:
                raise InputError(f"filters give {name} twice")
            if v is None:
                continue
            if name in ("types", "topics", "sources"):
                vals = [v] if isinstance(v, str) else v
                if not isinstance(vals, (list, tuple)) or not vals:
                    raise InputError(f"filter {key} must be a string or a non-empty list of strings, got {brief(v)}")
                if name == "types":
                    kw[name] = tuple(SegmentType.parse(x, f"filter {key}") for x in vals)
                else:
                    if not all(isinstance(x, str) for x in vals):
                        raise InputError(f"filter {key} must hold strings, got {brief(v)}")
                    kw[name] = tuple(check_text(x, f"filter {key}") for x in vals)
            elif name in ("since", "until"):
                kw[name] = aware(v, f"filter {key}")
            else:
                if not isinstance(v, bool):
                    raise InputError(f"filter protected must be true or false, got {brief(v)}")
                kw[name] = v
        return cls(**kw)

    def resolve(self, sessions: tuple[str, ...] | None, alive_at: int | None, current: bool | None = None) -> Filters:
        return Filters(
            sessions=sessions,
            types=self.types,
            topics=self.topics,
            sources=self.sources,
            since=None if self.since is None else to_epoch(aware(self.since, "since")),
            until=None if self.until is None else to_epoch(aware(self.until, "until")),
            protected=self.protected,
            alive_at=alive_at,
            current=current,
        )


@dataclass(frozen=True)
class StashResult:
    """What :meth:`StashStore.stash` did.

    Attributes:
        segment_ids: one id per input segment, in input order (a duplicate gets the stored segment's id).
        stashed: segments newly stored. duplicates: inputs that were already stashed.
        tokens: model tokens of the newly stored segments.
        redacted: secrets replaced by a placeholder before storage, by kind (counts only; see
            :mod:`contextsieve.stash.redact`).
        may_supersede: with :attr:`StashConfig.propose_supersede` set, ``{new id: stored id}`` for each
            new segment whose meaning is that close to a current segment of its session (a restated or
            changed fact): stash it again with ``supersedes`` to make it so (nothing is marked here).
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
    signal scaled and weighted) and ``recency`` (the two time decays, weighted), which add up to it."""

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


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _k(value: object, what: str, upper: int = _MAX_TOP_K) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= upper:
        raise InputError(f"{what} must be an int in 1..{upper}, got {brief(value)}")
    return value


#: Meta key of how a store embeds its segments: ``"type"`` (``<type>: <text>``) or ``"plain"``.
EMBED_FORM_KEY = "stash:embed-form"


def _value_key(key: object) -> str:
    """A named value's key: ``NAMESPACE:NAME`` (the store's own settings have no colon, so they cannot be
    named), at most 200 characters, no NUL."""
    if not isinstance(key, str) or ":" not in key or not 3 <= len(key) <= 200:
        raise InputError(f"a value's key must be a str NAMESPACE:NAME of 3-200 characters, got {brief(key)}")
    return no_nul(check_text(key, "the key"), "the key")


#: ``progress(done, total)``: texts embedded so far out of all a call embeds.
Progress = Callable[[int, int], None]
#: Texts embedded between two calls of a stash's ``progress`` callback.
PROGRESS_PART = 64


def _new_id() -> str:
    return "seg_" + secrets.token_hex(8)


def _qualified(session: str, given: str) -> str:
    """How a segment id the caller chose is stored: with a mark of its session, so ids are names
    within a session (two sessions may both use ``plan-1``; one cannot learn or claim another's)."""
    mark = hashlib.sha256(f"{session}\0{given}".encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"{given}~{mark}"


def _public(stored: str, session: str) -> str:
    """The id a caller of ``session`` knows a stored id by (the chosen id without its session mark)."""
    given, sep, mark = stored.rpartition("~")
    return given if sep and len(mark) == 12 and _qualified(session, given) == stored else stored


def _shown(seg: ContextSegment) -> ContextSegment:
    """A stored segment as callers see it: its id and references by their public ids."""

    def pub(i: str) -> str:
        return _public(i, seg.session)

    refs, by = tuple(map(pub, seg.references)), tuple(map(pub, seg.referenced_by))
    newer = None if seg.superseded_by is None else pub(seg.superseded_by)
    older = tuple(map(pub, seg.supersedes))
    return dataclasses.replace(
        seg, id=pub(seg.id), references=refs, referenced_by=by, superseded_by=newer, supersedes=older
    )


@dataclass
class _Plan:
    checked: list[CheckedSegment] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)  # final id per input (stored id for duplicates)
    new: list[int] = field(default_factory=list)  # inputs to store


class StashStore:
    """Stash, retrieve and merge context segments.

    Open one with :meth:`open` (a file path or a ``postgresql://`` URI) or from a backend. Thread-safe;
    several processes may share one store.

    Args:
        backend: where segments live. embedder: makes the vectors (its ``model_id`` is recorded).
        config: :class:`StashConfig`.
        rebuild: open a store of another model to re-embed it (:meth:`rebuild`); other calls refuse.

    Raises:
        StashModelError: the store's vectors are of another model (or a rebuild is under way).
    """

    def __init__(
        self, backend: StashBackend, embedder: TextEmbedder, config: StashConfig | None = None, *, rebuild: bool = False
    ) -> None:
        self.backend = backend
        self.embedder = embedder
        self.config = config or StashConfig()
        model = getattr(embedder, "model_id", None)
        if not isinstance(model, str) or not model:
            raise InputError("the stash needs an embedder with a model_id (its vectors are kept on disk)")
        self.model_id = model
        self.lock = threading.RLock()
        self._rebuilding = rebuild
        meta = backend.meta()
        if not rebuild:
            if meta.rebuild_to is not None:
                raise StashModelError(
                    f"the stash {backend.location} is being re-embedded with {meta.rebuild_to}; finish it with "
                    f"`contextsieve stash rebuild {backend.location}`"
                )
            if meta.model is not None and model_family(meta.model) != model_family(model):
                raise StashModelError(
                    f"the stash {backend.location} holds vectors of {meta.model}, not of {model}; re-embed it with "
                    f"`contextsieve stash rebuild {backend.location}` (or open it with the model it was made with)"
                )
        recorded = backend.setting(EMBED_FORM_KEY)
        if recorded is None and meta.model is not None:
            recorded = "plain"  # segments written before the form was recorded: embedded without a type
        want = self.config.embed_type
        if recorded is not None and want is not None and want != (recorded == "type"):
            raise InputError(
                f"the stash {backend.location} embeds segments {'with' if recorded == 'type' else 'without'} their "
                f"type (embed_type={recorded == 'type'}); open it with embed_type=None, or export it and import it "
                "into a new store to change that"
            )
        #: Whether segments are embedded as ``<type>: <text>`` (see :attr:`StashConfig.embed_type`).
        self.embed_type: bool = recorded == "type" if recorded is not None else want is not False

    @classmethod
    def open(
        cls,
        location: str | os.PathLike[str],
        embedder: TextEmbedder | None = None,
        config: StashConfig | None = None,
        *,
        rebuild: bool = False,
        backend_config: Any = None,
    ) -> "StashStore":
        """Open (creating when new) the store at ``location``: a SQLite file path, or a
        ``postgresql://user:password@host:port/db`` URI (the ``postgres`` extra). ``embedder``
        defaults to all-MiniLM-L6-v2 (``variant="auto"``). ``backend_config``: a
        :class:`~contextsieve.stash.sqlite.SqliteConfig` or
        :class:`~contextsieve.stash.postgres.PostgresConfig`."""
        loc = os.fspath(location)
        backend: StashBackend
        if isinstance(loc, str) and loc.startswith(("postgresql://", "postgres://")):
            from contextsieve.stash.postgres import PostgresBackend

            backend = PostgresBackend(loc, backend_config)
        else:
            from contextsieve.stash.sqlite import SqliteBackend

            backend = SqliteBackend(Path(loc), backend_config)
        if embedder is None:
            from contextsieve.models.embedder import Embedder

            embedder = Embedder()
        try:
            return cls(backend, embedder, config, rebuild=rebuild)
        except BaseException:
            backend.close()
            raise

    def close(self) -> None:
        self.backend.close()

    def __enter__(self) -> "StashStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _usable(self) -> None:
        if self._rebuilding:
            raise StashModelError("this store was opened to rebuild it; call rebuild() and open it again")

    # -- embedding --------------------------------------------------------------------------------

    def _embed(self, texts: list[str], show_progress: bool = False, progress: Progress | None = None) -> np.ndarray:
        if not texts:
            return np.zeros((0, 0), np.float32)
        if progress is None:
            return checked_vectors(self.embedder.embed(texts, show_progress=show_progress), len(texts))
        parts = []
        for lo in range(0, len(texts), PROGRESS_PART):  # parts of the same work, each one reported
            part = texts[lo : lo + PROGRESS_PART]
            parts.append(checked_vectors(self.embedder.embed(part, show_progress=show_progress), len(part)))
            progress(lo + len(part), len(texts))
        return np.concatenate(parts)

    def _segment_vectors(
        self,
        texts: Sequence[str],
        types: Sequence[SegmentType],
        show_progress: bool,
        progress: Progress | None = None,
    ) -> tuple[list[np.ndarray], list[int]]:
        """Chunk vectors of each text (long texts windowed; each chunk as ``<type>: <chunk>`` when the
        store embeds types) and each text's model tokens."""
        cfg = self.config
        tokens = self.embedder.count_tokens(list(texts))
        pieces: list[list[str]] = []
        for text, n in zip(texts, tokens):
            if n <= cfg.chunk_tokens:
                pieces.append([text])
            else:
                pieces.append(token_windows(text, self.embedder.count_tokens, cfg.chunk_tokens, cfg.overlap_tokens))
        if self.embed_type:
            pieces = [[f"{SegmentType(t).value}: {p}" for p in ps] for ps, t in zip(pieces, types)]
        flat = [p for ps in pieces for p in ps]
        vectors = self._embed(flat, show_progress, progress)
        out: list[np.ndarray] = []
        start = 0
        for ps in pieces:
            out.append(vectors[start : start + len(ps)])
            start += len(ps)
        return out, [int(n) for n in tokens]

    def _query(self, query: object, given: np.ndarray | None = None) -> np.ndarray:
        if not isinstance(query, str):
            raise InputError(f"query must be a string, got {type(query).__name__}")
        check_text(query, "the query")  # a lone surrogate is refused as in stashed texts, not embedded
        chunks = query_chunks(query)
        if not chunks:
            raise InputError("query is empty")
        if given is None:
            return self._embed(chunks)
        arr = np.asarray(given)
        if arr.ndim != 2 or arr.shape[0] != len(chunks) or arr.dtype.kind != "f":
            raise InputError(
                f"query_vectors must be float [{len(chunks)}, dim] (one per query sentence), "
                f"got {arr.dtype} {arr.shape}"
            )
        try:
            return checked_vectors(arr, len(chunks))
        except EmbedderOutputError as e:
            raise InputError(f"query_vectors: {e}") from e

    # -- stash ------------------------------------------------------------------------------------

    def stash(
        self,
        segments: Iterable[object],
        *,
        session: str = DEFAULT_SESSION,
        show_progress: bool = False,
        progress: Progress | None = None,
    ) -> StashResult:
        """Store segments (each a :class:`~contextsieve.stash.segment.NewSegment`, a mapping with
        its fields, or a plain string) in ``session``, all or none.

        Every segment is validated before anything is embedded or written; duplicates of stored
        segments (and of earlier ones in the batch) are not stored again. References may name stored
        segments of the session or segments earlier or later in the batch (by their given ``id``).

        ``show_progress`` draws a progress bar; ``progress(done, total)`` is called after each part of
        :data:`PROGRESS_PART` texts is embedded (the MCP server turns it into progress notifications).

        Raises:
            InputError: a bad segment (the message names which and why), an id already in use, or a
                reference to a segment that is not in the session. Nothing is stored.
        """
        self._usable()
        session = check_session(session)
        if isinstance(segments, (str, bytes, Mapping, NewSegment)):
            segments = [segments]
        if not isinstance(segments, Iterable):
            raise InputError(f"segments must be a segment or a list of them, got {brief(segments)}")
        items = list(segments)
        if not items:
            return StashResult((), 0, 0, 0)
        now = _now()
        plan = _Plan()
        secrets: Counter[str] = Counter()
        for i, raw in enumerate(items):
            given_seg = NewSegment.coerce(raw, f"segments[{i}]")
            checked = check_segment(given_seg, f"segments[{i}]", now, self.config.max_segment_chars)
            if self.config.redact:  # before anything is hashed, embedded or stored
                r = redact(checked.text)
                if r.counts:
                    secrets.update(r.counts)
                    checked = dataclasses.replace(checked, text=r.text, sha256=content_hash(r.text))
            plan.checked.append(checked)
        given = [c.id for c in plan.checked if c.id is not None]
        if len(set(given)) != len(given):
            raise InputError("two segments of the batch have the same id")
        mine = {g: _qualified(session, g) for g in given}  # chosen ids are names within the session
        taken = self.backend.sessions_of(list(mine.values()))
        if taken:
            used = sorted(g for g, q in mine.items() if q in taken)
            raise InputError(f"segment ids already in use in session {session!r}: {used[:5]}")
        seen: dict[str, str] = {}
        stored = self.backend.by_hash(session, [c.sha256 for c in plan.checked]) if self.config.dedup else {}
        alias: dict[str, str] = {}  # given id of a duplicate -> the id it resolves to
        for i, c in enumerate(plan.checked):
            dup = (stored.get(c.sha256) or seen.get(c.sha256)) if self.config.dedup else None
            if dup is not None:
                plan.ids.append(dup)
                if c.id is not None:
                    alias[mine[c.id]] = dup
                continue
            sid = mine[c.id] if c.id is not None else _new_id()
            plan.ids.append(sid)
            plan.new.append(i)
            seen[c.sha256] = sid
        batch_ids = {plan.ids[i] for i in plan.new}
        named = {r for c in plan.checked for r in c.references}
        stored_refs = self._resolve([r for r in named if r not in mine], session)
        ref_of = {**stored_refs, **mine}  # public reference -> stored id
        outside = sorted({alias.get(ref_of[r], ref_of[r]) for r in named} - batch_ids - set(alias.values()))
        if outside:
            found = self.backend.sessions_of(outside)
            missing = [_public(r, session) for r in outside if found.get(r) != session]
            if missing:
                raise InputError(f"references to segments not in session {session!r}: {missing[:5]}")
        supersede = self._supersessions(plan, mine, alias, session)
        texts = [plan.checked[i].text for i in plan.new]
        types = [plan.checked[i].type for i in plan.new]
        vectors, tokens = self._segment_vectors(texts, types, show_progress, progress)
        if self.config.near_duplicate is not None:
            plan, vectors, tokens = self._near_duplicates(plan, vectors, tokens, session)
        proposals = self._proposals(plan, vectors, session, supersede)
        rows: list[SegmentRow] = []
        for j, i in enumerate(plan.new):
            c = plan.checked[i]
            seg = ContextSegment(
                id=plan.ids[i],
                session=session,
                text=c.text,
                type=c.type,
                timestamp=c.timestamp,
                stashed_at=now,
                tokens=tokens[j],
                topic=c.topic,
                source=c.source,
                references=tuple(dict.fromkeys(alias.get(ref_of[r], ref_of[r]) for r in c.references)),
                referenced_by=(),
                embedding_model=self.model_id,
                chunks=int(vectors[j].shape[0]),
                expires_at=c.expires_at,
                protected=c.protected,
                sha256=c.sha256,
            )
            rows.append(SegmentRow(seg, vectors[j], index_terms(c.text)))
        skipped = self._insert(rows, self.config.dedup, supersede)
        raced = {rows[pos].segment.id: existing for pos, existing in skipped.items()}
        ids = [_public(raced.get(i, i), session) for i in plan.ids]
        new_ids = {r.segment.id for p, r in enumerate(rows) if p not in skipped}
        new_tokens = sum(r.segment.tokens for p, r in enumerate(rows) if p not in skipped)
        close = {_public(n, session): _public(o, session) for n, o in proposals.items() if n in new_ids}
        return StashResult(tuple(ids), len(new_ids), len(items) - len(new_ids), new_tokens, dict(secrets), close)

    def _proposals(
        self, plan: _Plan, vectors: list[np.ndarray], session: str, supersede: Sequence[tuple[str, str]]
    ) -> dict[str, str]:
        """``{new stored id: stored id}`` of :attr:`StashConfig.propose_supersede` (before the write)."""
        threshold = self.config.propose_supersede
        if threshold is None or not plan.new:
            return {}
        already = set(supersede)
        out: dict[str, str] = {}
        current = Filters(sessions=(session,), current=True)
        for j, i in enumerate(plan.new):
            for hit in self.backend.dense(vectors[j][:1], 1, current):
                if hit.score >= threshold and (hit.id, plan.ids[i]) not in already:
                    out[plan.ids[i]] = hit.id
        return out

    def _insert(
        self, rows: Sequence[SegmentRow], dedup: bool, supersede: Sequence[tuple[str, str]] = ()
    ) -> dict[int, str]:
        """Write rows and supersessions (one transaction), recording the model on a store's first write."""
        with self.lock:
            if rows and self.backend.meta().model is None:
                self.backend.put_setting(EMBED_FORM_KEY, "type" if self.embed_type else "plain", replace=False)
                self.backend.set_meta(self.model_id, int(rows[0].vectors.shape[1]), None)
            return self.backend.insert(rows, dedup, supersede)

    def _supersessions(
        self, plan: _Plan, mine: Mapping[str, str], alias: Mapping[str, str], session: str
    ) -> list[tuple[str, str]]:
        """``(old stored id, new stored id)`` of each ``supersedes`` of the batch: the old ones are
        stored segments of the session or segments of the batch (by their given id); a segment that
        is a duplicate of a stored one makes that one supersede them. InputError names any other."""
        named = {r for c in plan.checked for r in c.supersedes}
        if not named:
            return []
        old_of = {**self._resolve([r for r in named if r not in mine], session), **mine}
        batch = set(plan.ids)
        outside = sorted({old_of[r] for r in named} - batch)
        found = self.backend.sessions_of(outside) if outside else {}
        missing = [_public(r, session) for r in outside if found.get(r) != session]
        if missing:
            raise InputError(f"supersedes segments not in session {session!r}: {missing[:5]}")
        pairs: list[tuple[str, str]] = []
        for i, c in enumerate(plan.checked):
            for r in c.supersedes:
                old = alias.get(old_of[r], old_of[r])
                if old != plan.ids[i]:
                    pairs.append((old, plan.ids[i]))
        return list(dict.fromkeys(pairs))

    def add_supersessions(self, pairs: Sequence[tuple[str, str]]) -> None:
        """Mark each stored segment ``old`` of ``(old, new)`` as superseded by ``new`` (stored ids, as
        :func:`~contextsieve.stash.transfer.import_store` restores them; both of one session, ``new``
        not itself superseded, else InputError and nothing changes). One transaction."""
        self._usable()
        pairs = [(str(a), str(b)) for a, b in pairs]
        if pairs:
            self._insert([], False, pairs)

    def add_segments(
        self,
        segments: Sequence[ContextSegment],
        *,
        show_progress: bool = False,
        vectors: Mapping[str, np.ndarray] | None = None,
    ) -> None:
        """Write whole segments as they are (ids, sessions, times, references, protection kept),
        embedded with this store's model in parts of :data:`PROGRESS_PART`, one transaction per part:
        what import and migration use (:mod:`contextsieve.stash.transfer`). The caller has checked
        them; ids must be new to the store. ``vectors``: chunk vectors by id, written instead of
        embedding those segments (the caller has checked them against this store's model)."""
        self._usable()
        given = vectors or {}
        bar = tqdm(total=len(segments), desc="writing", unit="segment", disable=not show_progress)
        try:
            for lo in range(0, len(segments), PROGRESS_PART):
                part = segments[lo : lo + PROGRESS_PART]
                todo = [x for x in part if x.id not in given]
                fresh, _ = (
                    self._segment_vectors([x.text for x in todo], [x.type for x in todo], False) if todo else ([], [])
                )
                made = dict(zip((x.id for x in todo), fresh))
                vectors_of = [given[x.id] if x.id in given else made[x.id] for x in part]
                tokens = self.embedder.count_tokens([x.text for x in part])
                rows = [
                    SegmentRow(
                        dataclasses.replace(_with_model(x, self.model_id, int(v.shape[0])), tokens=n),
                        v,
                        index_terms(x.text),
                    )
                    for x, v, n in zip(part, vectors_of, tokens)
                ]
                self._insert(rows, False)
                bar.update(len(part))
        finally:
            bar.close()

    def _near_duplicates(
        self, plan: _Plan, vectors: list[np.ndarray], tokens: list[int], session: str
    ) -> tuple[_Plan, list[np.ndarray], list[int]]:
        threshold = self.config.near_duplicate
        assert threshold is not None
        keep_new: list[int] = []
        keep_vec: list[np.ndarray] = []
        keep_tok: list[int] = []
        filters = Filters(sessions=(session,))
        for j, i in enumerate(plan.new):
            hits = self.backend.dense(vectors[j][:1], 1, filters)
            twin = hits[0].id if hits and hits[0].score >= threshold else None
            if twin is None:
                for jj, v in zip(keep_new, keep_vec):
                    if float(v[0] @ vectors[j][0]) >= threshold:
                        twin = plan.ids[jj]
                        break
            if twin is not None:
                plan.ids[i] = twin
                continue
            keep_new.append(i)
            keep_vec.append(vectors[j])
            keep_tok.append(tokens[j])
        plan.new = keep_new
        return plan, keep_vec, keep_tok

    # -- retrieval --------------------------------------------------------------------------------

    def _sessions(self, session: str, cross_session: bool) -> tuple[str, ...] | None:
        if not isinstance(cross_session, bool):
            raise InputError(f"cross_session must be true or false, got {brief(cross_session)}")
        return None if cross_session else (session,)

    def retrieve(
        self,
        query: str,
        *,
        session: str = DEFAULT_SESSION,
        top_k: int = 5,
        min_similarity: float = 0.0,
        filters: SegmentFilter | Mapping[str, object] | None = None,
        cross_session: bool = False,
        now: datetime | None = None,
        query_vectors: np.ndarray | None = None,
        include_superseded: bool = False,
    ) -> list[Retrieved]:
        """The ``top_k`` stashed segments best for ``query``, best first: :meth:`retrieve_traced`
        without its trace (the arguments are the same)."""
        return self.retrieve_traced(
            query,
            session=session,
            top_k=top_k,
            min_similarity=min_similarity,
            filters=filters,
            cross_session=cross_session,
            now=now,
            query_vectors=query_vectors,
            include_superseded=include_superseded,
        )[0]

    def retrieve_traced(
        self,
        query: str,
        *,
        session: str = DEFAULT_SESSION,
        top_k: int = 5,
        min_similarity: float = 0.0,
        filters: SegmentFilter | Mapping[str, object] | None = None,
        cross_session: bool = False,
        now: datetime | None = None,
        query_vectors: np.ndarray | None = None,
        include_superseded: bool = False,
    ) -> tuple[list[Retrieved], RetrieveTrace]:
        """The ``top_k`` stashed segments best for ``query``, best first (see
        :mod:`contextsieve.stash.ranking` for the score), and the trace of every candidate ranked.

        Args:
            query: what the agent is looking for (a task, a question, recent messages).
            session: the caller's session; only its segments are searched unless ``cross_session``.
            top_k: results (1-1000, default 5).
            min_similarity: leave out segments whose dense cosine is below this (default 0.0).
            filters: a :class:`SegmentFilter` or a mapping (see :meth:`SegmentFilter.coerce`).
            cross_session: search every session's segments (default False).
            now: the time ages are measured at (aware; default: now). Expired unprotected segments
                are never returned.
            query_vectors: the vectors of ``query``'s sentences (:func:`contextsieve.retrieval.text.query_chunks`)
                from an embedder of this store's model family, when the caller has them already (a
                request passes the ones it searched its items with); default: embedded here.
            include_superseded: also return segments another one superseded (each says by which in
                ``segment.superseded_by``); default False: only the newest of each chain competes.
        """
        self._usable()
        session = check_session(session)
        k = _k(top_k, "top_k")
        if isinstance(min_similarity, bool) or not isinstance(min_similarity, (int, float)):
            raise InputError(f"min_similarity must be a number, got {brief(min_similarity)}")
        if not -1 <= min_similarity <= 1:  # compared as given: float() of a huge int overflows
            raise InputError(f"min_similarity must be in [-1, 1], got {brief(min_similarity)}")
        when = _now() if now is None else aware(now, "now")
        at = to_epoch(when)
        if not isinstance(include_superseded, bool):
            raise InputError(f"include_superseded must be true or false, got {brief(include_superseded)}")
        current = None if include_superseded else True  # the newest of each supersession chain only
        f = SegmentFilter.coerce(filters).resolve(self._sessions(session, cross_session), at, current)
        q = self._query(query, query_vectors)  # before the read scope: embedding never holds the store's lock
        rank = self.config.rank
        terms = query_terms(query, rank.drop_query_auxiliaries) if rank.keyword_weight > 0 else []
        with self.backend.reading():  # one state of the store for every search and read below
            found, trace = self._ranked(q, terms, k, float(min_similarity), f, at)
        shown = [dataclasses.replace(r, segment=_shown(r.segment)) for r in found]
        cands = tuple(dataclasses.replace(c, segment_id=_public(c.segment_id, session)) for c in trace.candidates)
        return shown, dataclasses.replace(trace, candidates=cands)

    def _ranked(
        self, q: np.ndarray, terms: list[str], k: int, min_similarity: float, f: Filters, at: int
    ) -> tuple[list[Retrieved], RetrieveTrace]:
        """The ``k`` best segments for the query rows ``q`` and keyword ``terms``, and the trace (see
        :meth:`retrieve_traced`)."""
        rank = self.config.rank
        n = max(rank.candidates, k)
        dense = {h.id: h.score for h in self.backend.dense(q, n, f)}
        kw = (
            {h.id: h.score for h in self.backend.keyword(terms, n, f, also=list(dense), b=rank.keyword_length_norm)}
            if rank.keyword_weight > 0
            else {}
        )
        missing = [i for i in kw if i not in dense]
        if missing:
            dense.update(self.backend.similarities(q, missing))
        pool = list(dict.fromkeys([*dense, *kw]))
        ids = [i for i in pool if dense.get(i, -math.inf) >= min_similarity]
        low = [i for i in pool if dense.get(i, -math.inf) < min_similarity]
        if not ids:
            return [], self._trace(k, min_similarity, len(pool), [], low, dense, kw)
        facts = self.backend.ranking_facts(ids)  # times and hashes only: texts are read for the winners
        ids = [i for i in ids if i in facts]
        sim = np.array([dense.get(i, 0.0) for i in ids])
        key = np.array([kw.get(i, 0.0) for i in ids])
        created = np.array([facts[i][0] for i in ids], np.int64)
        stashed = np.array([facts[i][1] for i in ids], np.int64)
        parts = combined_scores(sim, key, created, stashed, at, rank)
        scores, kw_norm, dense_part, kw_part = parts.total, parts.keyword_scaled, parts.dense, parts.keyword
        order = sorted(range(len(ids)), key=lambda j: (-scores[j], -sim[j], ids[j]))
        chosen: list[int] = []
        seen: set[str] = set()
        outcome: dict[int, str] = {}
        for j in order:
            sha = facts[ids[j]][2]
            if len(chosen) == k:
                outcome[j] = "below top_k"
            elif sha in seen:  # the same content stashed in several sessions
                outcome[j] = "duplicate"
            else:
                seen.add(sha)
                chosen.append(j)
                outcome[j] = "retrieved"
        segs = {s.id: s for s in self.backend.get([ids[j] for j in chosen])}
        ranked = [
            Candidate(ids[j], float(sim[j]), float(kw_norm[j]), float(scores[j]), r, outcome[j])
            for r, j in enumerate(order, 1)
        ]
        found = [
            Retrieved(
                segs[ids[j]],
                float(sim[j]),
                float(kw_norm[j]),
                float(scores[j]),
                {
                    "dense": float(dense_part[j]),
                    "keyword": float(kw_part[j]),
                    "recency": float(scores[j] - dense_part[j] - kw_part[j]),
                },
            )
            for j in chosen
            if ids[j] in segs
        ]
        return found, self._trace(k, min_similarity, len(pool), ranked, low, dense, kw)

    @staticmethod
    def _trace(
        k: int,
        min_similarity: float,
        pool: int,
        ranked: list[Candidate],
        low: list[str],
        dense: Mapping[str, float],
        kw: Mapping[str, float],
    ) -> RetrieveTrace:
        best_kw = max(kw.values(), default=0.0)
        under = [
            Candidate(
                i,
                float(dense.get(i, 0.0)),
                float(kw.get(i, 0.0)) / best_kw if best_kw > 0 else 0.0,
                0.0,
                0,
                "below min_similarity",
            )
            for i in low
        ]
        return RetrieveTrace(k, min_similarity, pool, tuple(ranked + under))

    def retrieve_by_reference(
        self, segment_id: str, *, session: str = DEFAULT_SESSION, max_hops: int = 2
    ) -> list[ContextSegment]:
        """The segment and those it refers to, breadth first up to ``max_hops`` references away
        (default 2; 0 gives the segment alone). Each segment once, cycles included."""
        self._usable()
        session = check_session(session)
        if isinstance(max_hops, bool) or not isinstance(max_hops, int) or not 0 <= max_hops <= 100:
            raise InputError(f"max_hops must be an int in 0..100, got {brief(max_hops)}")
        start = self._owned([segment_id], session)[0]
        order = [start]
        seen = {start}
        frontier = [start]
        for _ in range(max_hops):
            refs = self.backend.references(frontier)
            frontier = [r for f in frontier for r in refs.get(f, ()) if r not in seen]
            frontier = list(dict.fromkeys(frontier))
            seen.update(frontier)
            order.extend(frontier)
            if not frontier:
                break
        segs = {s.id: s for s in self.backend.get(order)}
        return [_shown(segs[i]) for i in order if i in segs and segs[i].session == session]

    # -- by id ------------------------------------------------------------------------------------

    def _resolve(self, ids: Sequence[str], session: str) -> dict[str, str]:
        """The stored id of each public id of ``session``: a name the session chose (stored with its
        session mark), else the id itself (a generated id, or one chosen before ids were per session);
        an id of no segment of the session maps to itself."""
        if not ids:
            return {}
        marked = {i: _qualified(session, i) for i in ids}
        found = self.backend.sessions_of([*marked.values(), *ids])
        return {i: marked[i] if found.get(marked[i]) == session else i for i in ids}

    def _owned(self, ids: object, session: str, what: str = "segment_ids") -> list[str]:
        """The stored ids of public ``ids`` of ``session``; :class:`UnknownSegmentError` for any
        that is no segment of the session (whether or not another session has one by that name)."""
        if isinstance(ids, str):
            ids = [ids]
        wanted = check_ids(ids, what)
        if not wanted:
            raise InputError(f"{what} is empty")
        stored = self._resolve(wanted, session)
        found = self.backend.sessions_of(list(stored.values()))
        unknown = [i for i in wanted if found.get(stored[i]) != session]
        if unknown:
            raise UnknownSegmentError(f"no segment {unknown[:5]} in session {session!r}")
        return [stored[i] for i in wanted]

    def get(
        self, segment_ids: Sequence[str], *, session: str = DEFAULT_SESSION, missing_ok: bool = False
    ) -> list[ContextSegment]:
        """The segments, in the order asked. Unknown ids (or ids of another session) raise
        :class:`UnknownSegmentError`, or with ``missing_ok=True`` are left out."""
        self._usable()
        session = check_session(session)
        if not missing_ok:
            return [_shown(x) for x in self.backend.get(self._owned(segment_ids, session))]
        wanted = check_ids([segment_ids] if isinstance(segment_ids, str) else segment_ids, "segment_ids")
        stored = list(self._resolve(wanted, session).values())
        found = self.backend.sessions_of(stored) if stored else {}
        return [_shown(x) for x in self.backend.get([i for i in stored if found.get(i) == session])]

    def merge(self, segment_ids: Sequence[str], *, session: str = DEFAULT_SESSION, keep: bool = True) -> MergeResult:
        """The full segments to put back into the active context, and their tokens. ``keep=False``
        also deletes them from the stash (protected ones too: the caller asked for these ids)."""
        self._usable()
        if not isinstance(keep, bool):
            raise InputError(f"keep must be true or false, got {brief(keep)}")
        session = check_session(session)
        ids = self._owned(segment_ids, session)
        segs = self.backend.get(ids)
        if not keep:
            self.backend.delete(ids)
        return MergeResult(tuple(_shown(x) for x in segs), sum(x.tokens for x in segs), not keep)

    def list(
        self,
        *,
        session: str = DEFAULT_SESSION,
        filters: SegmentFilter | Mapping[str, object] | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[ContextSegment]:
        """The session's segments matching ``filters``, newest first (``limit`` 1-10000, default 100)."""
        self._usable()
        session = check_session(session)
        lim = _k(limit, "limit", 10_000)
        if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset <= _MAX_OFFSET:
            raise InputError(f"offset must be an int from 0 to {_MAX_OFFSET}, got {brief(offset)}")
        f = SegmentFilter.coerce(filters).resolve((session,), None)
        return [_shown(x) for x in self.backend.get(self.backend.select_ids(f, limit=lim, offset=offset))]

    def delete(self, segment_ids: Sequence[str], *, session: str = DEFAULT_SESSION) -> int:
        """Delete these segments (protected ones too: deletion by id is explicit); their references
        from and to other segments go with them. Returns how many were deleted."""
        session = check_session(session)
        return self.backend.delete(self._owned(segment_ids, session))

    def protect(self, segment_ids: Sequence[str], *, session: str = DEFAULT_SESSION) -> int:
        """Mark segments protected: cleanup never removes them and expiry never hides them."""
        session = check_session(session)
        return self.backend.set_protected(self._owned(segment_ids, session), True)

    def unprotect(self, segment_ids: Sequence[str], *, session: str = DEFAULT_SESSION) -> int:
        session = check_session(session)
        return self.backend.set_protected(self._owned(segment_ids, session), False)

    # -- lifecycle --------------------------------------------------------------------------------

    def _scope(self, session: str | None) -> tuple[str, ...] | None:
        return None if session is None else (check_session(session),)

    def cleanup_expired(self, *, session: str | None = None, now: datetime | None = None) -> int:
        """Delete unprotected segments whose expiry has passed (in ``session``, or every session
        when None). Returns how many."""
        at = to_epoch(_now() if now is None else aware(now, "now"))
        f = Filters(sessions=self._scope(session), protected=False)
        return self.backend.delete(self.backend.select_ids(f, expired_before=at))

    def cleanup_old(
        self, max_age: timedelta | float, *, session: str | None = None, now: datetime | None = None
    ) -> int:
        """Delete unprotected segments created more than ``max_age`` ago (a timedelta or days).
        Returns how many."""
        most = timedelta(days=_MAX_AGE_DAYS)
        if isinstance(max_age, (int, float)) and not isinstance(max_age, bool):
            if not 0 <= max_age <= _MAX_AGE_DAYS:  # compared as given (NaN fails): float() of a huge int overflows
                raise InputError(f"max_age must be a number of days from 0 to {_MAX_AGE_DAYS}, got {brief(max_age)}")
            max_age = timedelta(days=float(max_age))
        if not isinstance(max_age, timedelta) or not timedelta(0) <= max_age <= most:
            raise InputError(
                f"max_age must be a timedelta or days from 0 to {_MAX_AGE_DAYS} days, got {brief(max_age)}"
            )
        at = _now() if now is None else aware(now, "now")
        f = Filters(sessions=self._scope(session), protected=False)
        try:
            cutoff = to_epoch(at - max_age)
        except (OverflowError, ValueError, OSError):  # before year 1: every segment is younger
            return 0
        return self.backend.delete(self.backend.select_ids(f, created_before=cutoff))

    def stats(self, *, session: str | None = None) -> dict[str, object]:
        """Counts (segments, tokens, protected, sessions, chunk vectors, by type), time range, model
        and search backend, for ``session`` or the whole store."""
        out = self.backend.stats(Filters(sessions=self._scope(session)))
        meta = self.backend.meta()
        out.update({"model": meta.model, "store": self.backend.location, "backend": self.backend.kind})
        return out

    # -- named values ------------------------------------------------------------------------------

    def read_value(self, key: str) -> str | None:
        """A named value kept in the store beside the segments (what every process on the store shares,
        e.g. the MCP server's handle key and session items); None when unset. ``key`` is
        ``NAMESPACE:NAME`` (at most 200 characters)."""
        return self.backend.setting(_value_key(key))

    def write_value(self, key: str, value: str, *, replace: bool = True) -> str:
        """Store a named value (see :meth:`read_value`; at most 1 MB). ``replace=False`` stores it only if
        the key is unset, atomically (two processes racing both get the one value stored). Returns the
        value stored afterwards."""
        if not isinstance(value, str):
            raise InputError(f"a stored value must be a str, got {type(value).__name__}")
        if len(value) > 1_000_000:
            raise InputError(f"a stored value has {len(value)} characters; the limit is 1,000,000")
        return self.backend.put_setting(
            _value_key(key), no_nul(check_text(value, "the value"), "the value"), replace=replace
        )

    # -- model change -----------------------------------------------------------------------------

    def rebuild(self, *, batch: int = 256, show_progress: bool = False) -> int:
        """Re-embed every segment whose vectors are not of this store's embedder (another model, or
        vectors that failed their checksum), ``batch`` segments per transaction. Resumable: a killed
        rebuild goes on where it stopped when run again. Returns how many segments were re-embedded."""
        _k(batch, "batch", 100_000)
        meta = self.backend.meta()
        self.backend.set_meta(meta.model, meta.dim, self.model_id)
        done = 0
        recent: deque[str] = deque(maxlen=batch)
        todo = list(self.backend.stale(self.model_id, batch))
        # at most every segment is stale; a store with none shows no bar at all (not "0/1")
        total = int(str(self.backend.stats(Filters())["segments"])) if todo else 0
        bar = tqdm(total=total, desc="re-embedding", unit="seg", disable=not show_progress or not todo)
        try:
            while True:
                if not todo:
                    break
                vectors, _ = self._segment_vectors([s.text for s in todo], [s.type for s in todo], False)
                rows = [SegmentRow(_with_model(s, self.model_id, v.shape[0]), v, []) for s, v in zip(todo, vectors)]
                self.backend.replace_vectors(rows)
                recent.extend(s.id for s in todo)
                done += len(todo)
                bar.update(len(todo))
                todo = [s for s in self.backend.stale(self.model_id, batch) if s.id not in recent]
        finally:
            if todo == [] and done:
                bar.total = done  # the segments that were stale, not every segment
                bar.refresh()
            bar.close()
        dim = self._embed(["dimension probe"]).shape[1]
        self.backend.set_meta(self.model_id, dim, None)
        self._rebuilding = False
        return done


def _with_model(s: ContextSegment, model: str, chunks: int) -> ContextSegment:
    return dataclasses.replace(s, embedding_model=model, chunks=chunks)
