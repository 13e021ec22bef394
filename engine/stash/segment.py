"""Context segments: what an agent stashes, as handed in (:class:`NewSegment`) and as stored
(:class:`ContextSegment`), with the validation every backend relies on.

Times are timezone-aware :class:`~datetime.datetime` values (a naive one is refused: a stash shared
by machines in several zones must not guess); they are stored as UTC.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from enum import Enum

from contextsieve.errors import InputError, brief, check_text

__all__ = [
    "SegmentType",
    "NewSegment",
    "ContextSegment",
    "MAX_SEGMENT_CHARS",
    "MAX_LABEL_CHARS",
    "check_session",
    "check_ids",
    "aware",
    "content_hash",
]

#: Longest text one segment may hold (characters, default 1,000,000 ≈ 250k tokens); longer is refused.
MAX_SEGMENT_CHARS = 1_000_000
#: Longest session, topic, source or id (characters, default 1,000).
MAX_LABEL_CHARS = 1_000
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:\-]{0,127}")
#: Longest expiry a segment may be given (days, 100 years).
_MAX_DAYS = 36_500.0


class SegmentType(str, Enum):
    """What a segment holds (seed 004's ``SegmentType``)."""

    MESSAGE = "message"
    CODE_BLOCK = "code_block"
    FILE_CONTENT = "file_content"
    ERROR_LOG = "error_log"
    DEBUG_OUTPUT = "debug_output"
    TASK_STATE = "task_state"
    DECISION = "decision"
    RESEARCH = "research"

    @classmethod
    def parse(cls, value: object, what: str = "type") -> "SegmentType":
        """The type named by ``value`` (a member or its string value); else :class:`InputError`."""
        if isinstance(value, SegmentType):
            return value
        if isinstance(value, str):
            try:
                return cls(value)
            except ValueError:
                pass
        raise InputError(f"{what} must be one of {', '.join(t.value for t in cls)}, got {brief(value)}")


def aware(value: object, what: str) -> datetime:
    """``value`` as a UTC datetime: an aware :class:`datetime` or an ISO 8601 string with an offset
    (``2026-11-23T10:00:00+00:00`` or ``...Z``); naive times and anything else raise :class:`InputError`."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.strip().replace("Z", "+00:00").replace("z", "+00:00"))
        except ValueError:
            raise InputError(f"{what} must be an ISO 8601 time with a UTC offset, got {brief(value)}") from None
    if not isinstance(value, datetime):
        raise InputError(f"{what} must be a timezone-aware datetime, got {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise InputError(f"{what} is a naive datetime ({value.isoformat()}); give it a timezone (e.g. UTC)")
    try:
        utc = value.astimezone(timezone.utc)
        utc.timestamp()  # the stores keep microseconds since 1970 (backend.to_epoch): the time must have them
    except (OverflowError, ValueError, OSError):
        raise InputError(f"{what} {value.isoformat()} is out of range: it must lie in years 1 to 9999 in UTC") from None
    return utc


def no_nul(text: str, what: str) -> str:
    """``text`` unless it holds a NUL character, which PostgreSQL cannot store in text: both backends
    refuse it the same way (:class:`InputError`), so a store can move between them."""
    at = text.find("\x00")
    if at >= 0:
        raise InputError(f"{what} holds a NUL character at position {at}; text may not contain NUL")
    return text


def _label(value: object, what: str, *, optional: bool) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise InputError(f"{what} must be a string, got {type(value).__name__}")
    if len(value) > MAX_LABEL_CHARS:
        raise InputError(f"{what} is {len(value)} characters long; at most {MAX_LABEL_CHARS} are allowed")
    return no_nul(check_text(value, what), what)


def check_session(session: object) -> str:
    """A session name: a non-empty string of at most :data:`MAX_LABEL_CHARS` characters."""
    s = _label(session, "session", optional=False)
    assert s is not None
    if not s.strip():
        raise InputError("session must not be empty")
    return s


def check_ids(ids: object, what: str = "segment_ids") -> list[str]:
    """A list of segment ids (strings), duplicates removed in order; a single string is refused (it
    would be read as its characters)."""
    if isinstance(ids, (str, bytes)) or not isinstance(ids, Sequence):
        raise InputError(f"{what} must be a list of segment ids, got {brief(ids)}")
    out: list[str] = []
    seen: set[str] = set()  # a list's `in` made 40,000 ids take seconds (quadratic)
    for i, v in enumerate(ids):
        if not isinstance(v, str) or not v:
            raise InputError(f"{what}[{i}] must be a non-empty string, got {brief(v)}")
        if len(v) > MAX_LABEL_CHARS:
            raise InputError(f"{what}[{i}] is too long ({len(v)} characters)")
        check_text(v, f"{what}[{i}]")
        if v not in seen:
            seen.add(v)
            out.append(v)
    return out


def content_hash(text: str) -> str:
    """sha256 hex digest of the UTF-8 text (exact-duplicate detection)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class NewSegment:
    """A segment as the caller hands it to :meth:`~contextsieve.stash.store.StashStore.stash`.

    Attributes:
        text: the content (required, not blank, at most :data:`MAX_SEGMENT_CHARS` characters).
        type: a :class:`SegmentType` or its value (default ``"message"``).
        topic: a tag to filter by (default none). source: where it came from (a file path, message id;
            default ``""``).
        references: ids of segments it refers to: stored ones of the same session or ones earlier in
            the same batch (default none). Each also lists this one in its ``referenced_by``.
        timestamp: when the content was created (aware datetime; default: the stash time).
        expires_in_days: days after stashing when :meth:`cleanup_expired` may remove it (> 0; default
            never). expires_at: the same as an aware time (give one of the two).
        protected: never removed by cleanup (default False).
        id: the segment id to use (letters, digits, ``_.:-``, at most 128; default: a new random id).
        supersedes: ids of stored segments of the same session that this one replaces (a newer fact,
            a corrected plan; default none). Retrieval then returns this one instead of them; they
            stay stored, listed with ``superseded_by`` and retrievable with ``include_superseded``.
    """

    text: str
    type: SegmentType | str = SegmentType.MESSAGE
    topic: str | None = None
    source: str = ""
    references: tuple[str, ...] = ()
    timestamp: datetime | None = None
    expires_in_days: float | None = None
    expires_at: datetime | None = None
    protected: bool = False
    id: str | None = None
    supersedes: tuple[str, ...] = ()

    @classmethod
    def coerce(cls, value: object, what: str) -> "NewSegment":
        """A :class:`NewSegment` from itself, a plain string (a message), or a mapping with the field
        names above (unknown keys are refused, naming ``what``)."""
        if isinstance(value, NewSegment):
            return value
        if isinstance(value, str):
            return cls(text=value)
        if not isinstance(value, Mapping):
            raise InputError(f"{what} must be a segment (an object with 'text'), got {type(value).__name__}")
        known = set(cls.__dataclass_fields__)
        unknown = sorted(str(k) for k in value if k not in known)
        if unknown:
            raise InputError(f"{what} has unknown fields {unknown}; known: {sorted(known)}")
        if "text" not in value:
            raise InputError(f"{what} has no 'text'")
        refs = value.get("references") or ()
        refs = tuple(check_ids(refs, f"{what}.references"))
        older = value.get("supersedes") or ()
        older = tuple(check_ids(older, f"{what}.supersedes"))
        kwargs = {k: value[k] for k in value if k not in ("references", "supersedes")}
        return cls(references=refs, supersedes=older, **kwargs)


@dataclass(frozen=True)
class ContextSegment:
    """A stored segment (seed 004's ``ContextSegment``; vectors stay in the store).

    Attributes:
        id: unique in the store. session: the session it belongs to.
        text: the full content. type: its :class:`SegmentType`.
        timestamp: when the content was created (UTC). stashed_at: when it was stashed (UTC).
        tokens: model tokens of ``text`` (all-MiniLM-L6-v2's tokenizer, no truncation).
        topic, source: labels given at stash time (``None`` / ``""`` when not given).
        references: ids it refers to. referenced_by: ids that refer to it (kept in step both ways).
        embedding_model: model id of its vectors. chunks: vectors it is searched by (long texts are
            split, each piece embedded, the best piece scores the segment).
        expires_at: when cleanup may remove it (UTC; ``None``: never). protected: never removed by cleanup.
        sha256: hex digest of ``text``.
        superseded_by: the id of the segment that replaced this one (``None``: it is current).
        supersedes: ids of the segments this one replaced (each has it as ``superseded_by``).
    """

    id: str
    session: str
    text: str
    type: SegmentType
    timestamp: datetime
    stashed_at: datetime
    tokens: int
    topic: str | None
    source: str
    references: tuple[str, ...]
    referenced_by: tuple[str, ...]
    embedding_model: str
    chunks: int
    expires_at: datetime | None
    protected: bool
    sha256: str = field(default="")
    superseded_by: str | None = None
    supersedes: tuple[str, ...] = ()

    def preview(self, chars: int = 500) -> str:
        """The first ``chars`` characters of the text, with ``...`` when cut (default 500)."""
        return self.text if len(self.text) <= chars else self.text[:chars].rstrip() + "..."

    def to_dict(self, *, text: bool = True) -> dict[str, object]:
        """JSON-ready fields (times as ISO 8601 UTC); ``text=False`` leaves the full text out."""
        d: dict[str, object] = {
            "segment_id": self.id,
            "session": self.session,
            "type": self.type.value,
            "timestamp": self.timestamp.isoformat(),
            "stashed_at": self.stashed_at.isoformat(),
            "tokens": self.tokens,
            "topic": self.topic,
            "source": self.source,
            "references": list(self.references),
            "referenced_by": list(self.referenced_by),
            "embedding_model": self.embedding_model,
            "expires_at": self.expires_at.isoformat() if self.expires_at else None,
            "protected": self.protected,
        }
        if self.superseded_by is not None:
            d["superseded_by"] = self.superseded_by
        if self.supersedes:
            d["supersedes"] = list(self.supersedes)
        if text:
            d["text"] = self.text
        return d


@dataclass(frozen=True)
class CheckedSegment:
    """A :class:`NewSegment` after validation (times resolved against the stash time)."""

    text: str
    type: SegmentType
    topic: str | None
    source: str
    references: tuple[str, ...]
    timestamp: datetime
    expires_at: datetime | None
    protected: bool
    id: str | None
    sha256: str
    supersedes: tuple[str, ...] = ()


def check_segment(seg: NewSegment, what: str, now: datetime, max_chars: int = MAX_SEGMENT_CHARS) -> CheckedSegment:
    """Validate one segment (types, sizes, Unicode, times); :class:`InputError` names ``what`` and the field."""
    if not isinstance(seg.text, str):
        raise InputError(f"{what}.text must be a string, got {type(seg.text).__name__}")
    if not seg.text.strip():
        raise InputError(f"{what}.text is empty")
    if len(seg.text) > max_chars:
        raise InputError(f"{what}.text is {len(seg.text)} characters long; at most {max_chars} are allowed")
    no_nul(check_text(seg.text, f"{what}.text"), f"{what}.text")
    kind = SegmentType.parse(seg.type, f"{what}.type")
    topic = _label(seg.topic, f"{what}.topic", optional=True)
    source = _label(seg.source, f"{what}.source", optional=False) or ""
    if isinstance(seg.references, (str, bytes)):
        raise InputError(f"{what}.references must be a list of segment ids, got a string")
    refs = tuple(check_ids(list(seg.references), f"{what}.references"))
    if isinstance(seg.supersedes, (str, bytes)):
        raise InputError(f"{what}.supersedes must be a list of segment ids, got a string")
    older = tuple(check_ids(list(seg.supersedes), f"{what}.supersedes"))
    ts = now if seg.timestamp is None else aware(seg.timestamp, f"{what}.timestamp")
    if seg.expires_in_days is not None and seg.expires_at is not None:
        raise InputError(f"{what}: give expires_in_days or expires_at, not both")
    expires: datetime | None = None
    if seg.expires_in_days is not None:
        d = seg.expires_in_days
        if isinstance(d, bool) or not isinstance(d, (int, float)) or not math.isfinite(d) or not 0 < d <= _MAX_DAYS:
            raise InputError(f"{what}.expires_in_days must be a number of days in (0, {_MAX_DAYS:g}], got {brief(d)}")
        expires = now + timedelta(days=float(d))
    elif seg.expires_at is not None:
        expires = aware(seg.expires_at, f"{what}.expires_at")
    if not isinstance(seg.protected, bool):
        raise InputError(f"{what}.protected must be true or false, got {brief(seg.protected)}")
    if seg.id is not None:
        if not isinstance(seg.id, str) or not _ID.fullmatch(seg.id):
            raise InputError(
                f"{what}.id must be 1-128 letters, digits or _.:- (a letter or digit first), got {brief(seg.id)}"
            )
    return CheckedSegment(
        text=seg.text,
        type=kind,
        topic=topic,
        source=source,
        references=refs,
        timestamp=ts,
        expires_at=expires,
        protected=seg.protected,
        id=seg.id,
        sha256=content_hash(seg.text),
        supersedes=older,
    )
