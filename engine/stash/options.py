"""What a caller asks the stash with: the session of calls that name none (:data:`DEFAULT_SESSION`),
what retrieval and listings filter by (:class:`SegmentFilter`, from itself or a mapping of seed
004's names) and what a retrieve is asked with (:class:`RetrieveOptions`, or the same names as keyword
arguments, typed by :class:`RetrieveKeywords`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypedDict

import numpy as np

from contextsieve.errors import InputError, brief, check_text
from contextsieve.stash.backend import Filters, to_epoch
from contextsieve.stash.segment import SegmentType, aware

__all__ = ["DEFAULT_SESSION", "SegmentFilter", "RetrieveOptions", "RetrieveKeywords"]

#: Session of calls that name none.
DEFAULT_SESSION = "default"


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


@dataclass(frozen=True, kw_only=True)
class RetrieveOptions:
    """What a retrieve is asked with: :meth:`StashStore.retrieve <contextsieve.stash.store.StashStore.retrieve>`
    and :meth:`~contextsieve.stash.store.StashStore.retrieve_traced` take one, or the same names as
    keyword arguments (not both). Values are checked when a retrieve uses them (:class:`InputError`).

    Attributes:
        session: the caller's session; only its segments are searched unless ``cross_session``
            (default :data:`DEFAULT_SESSION`).
        top_k: results (1-1000, default 5).
        min_similarity: leave out segments whose dense cosine is below this (in [-1, 1], default 0.0).
        filters: a :class:`SegmentFilter` or a mapping (see :meth:`SegmentFilter.coerce`); default None:
            any segment.
        cross_session: search every session's segments (default False).
        now: the time ages are measured at (aware; default None: now). Expired unprotected segments
            are never returned.
        query_vectors: the vectors of the query's sentences (:func:`contextsieve.retrieval.text.query_chunks`,
            float ``[sentences, dim]``) from an embedder of the store's model family, when the caller has
            them already (a request passes the ones it searched its items with); default None: embedded
            by the retrieve.
        include_superseded: also return segments another one superseded (each says by which in
            ``segment.superseded_by``); default False: only the newest of each chain competes.
    """

    session: str = DEFAULT_SESSION
    top_k: int = 5
    min_similarity: float = 0.0
    filters: SegmentFilter | Mapping[str, object] | None = None
    cross_session: bool = False
    now: datetime | None = None
    query_vectors: np.ndarray | None = None
    include_superseded: bool = False

    @classmethod
    def given(cls, options: object, keywords: Mapping[str, Any]) -> "RetrieveOptions":
        """The options of a call that passed ``options`` (a :class:`RetrieveOptions` or None) or
        ``keywords`` (its field names); both at once, or ``options`` of another type, is an
        :class:`InputError`. An unknown keyword is a TypeError, as for any call."""
        if options is None:
            return cls(**keywords)
        if keywords:
            raise InputError(
                f"pass a RetrieveOptions or keyword arguments, not both (got options and {sorted(keywords)})"
            )
        if not isinstance(options, RetrieveOptions):
            raise InputError(f"options must be a RetrieveOptions, got {type(options).__name__}")
        return options


class RetrieveKeywords(TypedDict, total=False):
    """The fields of :class:`RetrieveOptions` as keyword arguments of a retrieve, typed the same (a
    test keeps the two equal)."""

    session: str
    top_k: int
    min_similarity: float
    filters: SegmentFilter | Mapping[str, object] | None
    cross_session: bool
    now: datetime | None
    query_vectors: np.ndarray | None
    include_superseded: bool
