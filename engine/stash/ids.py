"""Segment ids by session: a generated id (:func:`new_id`), how an id the caller chose is stored with a
mark of its session (:func:`qualified`) so ids are names within a session, and how a stored segment
is shown to its session (:func:`public_id`, :func:`shown`)."""

from __future__ import annotations

import dataclasses
import hashlib
import secrets

from contextsieve.stash.segment import ContextSegment

__all__ = ["new_id", "qualified", "public_id", "shown"]


def new_id() -> str:
    """A generated segment id: ``seg_`` and 16 random hex digits."""
    return "seg_" + secrets.token_hex(8)


def qualified(session: str, given: str) -> str:
    """How a segment id the caller chose is stored: with a mark of its session, so ids are names
    within a session (two sessions may both use ``plan-1``; one cannot learn or claim another's)."""
    mark = hashlib.sha256(f"{session}\0{given}".encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"{given}~{mark}"


def public_id(stored: str, session: str) -> str:
    """The id a caller of ``session`` knows a stored id by (the chosen id without its session mark)."""
    given, sep, mark = stored.rpartition("~")
    return given if sep and len(mark) == 12 and qualified(session, given) == stored else stored


def shown(seg: ContextSegment) -> ContextSegment:
    """A stored segment as callers see it: its id and references by their public ids."""

    def pub(i: str) -> str:
        return public_id(i, seg.session)

    refs, by = tuple(map(pub, seg.references)), tuple(map(pub, seg.referenced_by))
    newer = None if seg.superseded_by is None else pub(seg.superseded_by)
    older = tuple(map(pub, seg.supersedes))
    return dataclasses.replace(
        seg, id=pub(seg.id), references=refs, referenced_by=by, superseded_by=newer, supersedes=older
    )
