"""Ranking variants of issue 41 for :mod:`benchmarks.quality.stash_recall`, over one question's candidates:
a second stage by dialogue session (or by creation day, what a store can see), a boost for segments
dated near the date a question points to, a boost for the question's names and quoted phrases found
verbatim in a segment, and a second hop from the first hits; and issue 49's, which were measured and
not built into the store: a spread of the top over days (:func:`spread_mmr`, :func:`spread_floor`)
and the dates a text writes (:func:`written_dates`, :func:`dates_match`).

Each takes the candidates' indices and scores and returns new ones; none reads more than the candidates.
The names are the store's own (:mod:`contextsieve.stash.names`).
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone

import numpy as np

DAY = 86_400.0

_MONTHS = {m.lower(): i for i, m in enumerate(calendar.month_name) if m}
_DAYS = {d.lower(): i for i, d in enumerate(calendar.day_name)}
_NUM = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "a few": 3, "a couple of": 2}
_AGO = re.compile(
    r"\b(\d+|a|an|one|two|three|four|five|six|a few|a couple of)\s+(day|week|month|year)s?\s+ago\b", re.IGNORECASE
)
_LAST = re.compile(r"\b(last|this|past)\s+(week|weekend|month|year)\b", re.IGNORECASE)
_MONTH = re.compile(r"\b(?:in|on|since|during|early|late|mid)\s+(" + "|".join(_MONTHS) + r")\b(?:\s+(\d{4}))?", re.I)
_WEEKDAY = re.compile(r"\b(?:last|on|this past)\s+(" + "|".join(_DAYS) + r")\b", re.IGNORECASE)


def time_span(question: str, now: float) -> tuple[float, float] | None:
    """The span of days (epoch seconds, start and end) a question's time expression points to, relative
    to ``now`` (epoch seconds): "yesterday", "N days/weeks/months ago", "last week/month/year", "in
    May" (the latest May before now), "last Monday"; None when it names no date (or ``now`` is 0)."""
    if not now:
        return None
    t = datetime.fromtimestamp(now, timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
    q = question.lower()
    if "yesterday" in q:
        s = t - timedelta(days=1)
        return s.timestamp(), s.timestamp() + DAY
    if "today" in q or "this morning" in q or "earlier today" in q:
        return t.timestamp(), t.timestamp() + DAY
    m = _AGO.search(q)
    if m:
        n = int(m.group(1)) if m.group(1).isdigit() else _NUM[m.group(1).lower()]
        days = {"day": 1, "week": 7, "month": 30, "year": 365}[m.group(2).lower()] * n
        width = max(1.0, days / 4)
        c = t - timedelta(days=days)
        return c.timestamp() - width * DAY, c.timestamp() + width * DAY
    m = _WEEKDAY.search(q)
    if m:
        back = (t.weekday() - _DAYS[m.group(1).lower()]) % 7 or 7
        s = t - timedelta(days=back)
        return s.timestamp(), s.timestamp() + DAY
    m = _LAST.search(q)
    if m:
        unit = m.group(2).lower()
        if unit in ("week", "weekend"):
            s = t - timedelta(days=t.weekday() + (7 if m.group(1).lower() == "last" else 0))
            return s.timestamp(), min(s.timestamp() + 7 * DAY, now)
        if unit == "month":
            first = t.replace(day=1)
            s = (first - timedelta(days=1)).replace(day=1) if m.group(1).lower() == "last" else first
            end = first if m.group(1).lower() == "last" else t + timedelta(days=1)
            return s.timestamp(), end.timestamp()
        y = t.year - (1 if m.group(1).lower() == "last" else 0)
        start = datetime(y, 1, 1, tzinfo=timezone.utc)
        return start.timestamp(), start.replace(year=y + 1).timestamp()
    m = _MONTH.search(q)
    if m:
        month = _MONTHS[m.group(1).lower()]
        year = int(m.group(2)) if m.group(2) else (t.year if month <= t.month else t.year - 1)
        s = datetime(year, month, 1, tzinfo=timezone.utc)
        e = datetime(year + month // 12, month % 12 + 1, 1, tzinfo=timezone.utc)
        return s.timestamp(), e.timestamp()
    return None


def date_closeness(at: np.ndarray, span: tuple[float, float]) -> np.ndarray:
    """1 for a segment dated inside ``span``, halving with every span length (at least a day) outside it."""
    start, end = span
    width = max(end - start, DAY)
    off = np.maximum(start - at, 0.0) + np.maximum(at - end, 0.0)
    return 0.5 ** (off / width)


def staged(order: Sequence[int], score: dict[int, float], group: Sequence[object], sessions: int) -> list[int]:
    """Second stage: the groups (sessions, days) ranked by their best candidate's score, then the candidates
    of the best ``sessions`` groups first, each in score order, then the rest as they were."""
    best: dict[object, float] = {}
    for i in order:
        g = group[i]
        best[g] = max(best.get(g, -np.inf), score[i])
    top = set(sorted(best, key=lambda g: -best[g])[:sessions])
    return [i for i in order if group[i] in top] + [i for i in order if group[i] not in top]


def spread_mmr(
    order: Sequence[int], score: dict[int, float], group: Sequence[object], weight: float, start: int
) -> list[int]:
    """Spread over groups: from place ``start`` on, each pick is the best of the rest after lowering
    each candidate by ``weight`` times the picks of its group so far."""
    left = list(order)
    out: list[int] = []
    taken: dict[object, int] = {}
    while left:
        pen = weight if len(out) >= start else 0.0
        best = max(left, key=lambda i: (score[i] - pen * taken.get(group[i], 0), -left.index(i)))
        out.append(best)
        taken[group[best]] = taken.get(group[best], 0) + 1
        left.remove(best)
        if len(out) >= 12:
            out.extend(left)
            break
    return out


def spread_floor(
    order: Sequence[int], score: dict[int, float], group: Sequence[object], floor: float, start: int
) -> list[int]:
    """Spread over groups: after the first ``start`` places, the best candidate of each group not among
    them whose score is at least ``floor`` times the best score comes next (in score order), then the rest."""
    head = list(order[:start])
    top = score[order[0]] if order else 0.0
    seen = {group[i] for i in head}
    firsts = []
    for i in order[start:]:
        if group[i] not in seen and score[i] >= floor * top:
            seen.add(group[i])
            firsts.append(i)
    return head + firsts + [i for i in order[start:] if i not in firsts]


_MON = r"(" + "|".join(m for m in _MONTHS) + r"|jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec)\.?"
_MON_ABBR = {m[:3]: i for m, i in _MONTHS.items()} | {"sept": 9}
_ISO = re.compile(r"\b(\d{4})-(\d{1,2})-(\d{1,2})\b")
_MD = re.compile(_MON + r"\s+(\d{1,2})(?:st|nd|rd|th)?\b(?:,?\s+(\d{4}))?", re.IGNORECASE)
_DM = re.compile(r"\b(\d{1,2})(?:st|nd|rd|th)?\s+(?:of\s+)?" + _MON + r"(?:,?\s+(\d{4}))?", re.IGNORECASE)
_M = re.compile(r"\b(?:in|during|of|since|by|early|late|mid|until)\s+" + _MON + r"\b(?:\s+(\d{4}))?", re.IGNORECASE)


def _month(word: str) -> int:
    w = word.lower().rstrip(".")
    return _MONTHS.get(w) or _MON_ABBR.get(w[:4] if w.startswith("sept") else w[:3], 0)


def written_dates(text: str) -> set[tuple[int, int, int]]:
    """The dates a text writes: (month, day, year), 0 for a part it leaves out."""
    out = set()
    for m in _ISO.finditer(text):
        out.add((int(m.group(2)), int(m.group(3)), int(m.group(1))))
    for m in _MD.finditer(text):
        out.add((_month(m.group(1)), int(m.group(2)), int(m.group(3) or 0)))
    for m in _DM.finditer(text):
        out.add((_month(m.group(2)), int(m.group(1)), int(m.group(3) or 0)))
    for m in _M.finditer(text):
        out.add((_month(m.group(1)), 0, int(m.group(2) or 0)))
    return {d for d in out if 1 <= d[0] <= 12 and 0 <= d[1] <= 31}


def dates_match(asked: set[tuple[int, int, int]], written: set[tuple[int, int, int]]) -> bool:
    """Whether a date the query writes is one the segment writes or was created on (parts left out match any)."""
    return any(
        a[0] == w[0] and (not a[1] or not w[1] or a[1] == w[1]) and (not a[2] or not w[2] or a[2] == w[2])
        for a in asked
        for w in written
    )
