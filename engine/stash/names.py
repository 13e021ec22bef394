"""The names and quoted phrases of a query (:func:`query_names`) and the share of them a segment's
text holds verbatim (:func:`name_share`): what :class:`~contextsieve.stash.ranking.RankConfig`'s
``name_weight`` raises a candidate by.

A segment's speaker is its source, its topic or a leading ``Name:`` of its text
(:func:`speaker_labels`); whether the query names it (:func:`names_speaker`) is what ``speaker_weight``
raises a candidate by, and the query without its names (:func:`without_names`) is what
``unnamed_weight`` compares the segments with once a speaker is named.

A name is a capitalised word that does not open a sentence ("Where does *Maya* keep the garden?",
"the *WhatsApp* tool"), leaving out question words, pronouns, determiners, weekdays and the like
(:data:`NOT_NAMES`); a quoted phrase is text between double quotes (2-80 characters). Both are
matched case-sensitively as whole words, so "Maya" does not match "mayan" and a quoted phrase only
matches its exact wording, where BM25 sees stemmed, lower-cased terms one by one.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = ["NOT_NAMES", "query_names", "name_share", "speaker_labels", "names_speaker", "without_names"]

_QUOTED = re.compile(r"[\"“”]([^\"“”]{2,80})[\"“”]")
_WORD = re.compile(r"[A-Za-z][\w'’-]*")
_POSSESSIVE = re.compile(r"['’]s?$")

#: Capitalised words that are not names, wherever they stand.
NOT_NAMES = frozenset(
    "I I'm I've I'd I'll What When Where Which Who Whom Whose Why How Did Does Do Is Are Was Were Has Have Had Can "
    "Could Would Should Will Shall May Might Must The A An And But Or If Then So In On At To For Of By With From As "
    "After Before During Since Until While Once Right Just Shortly Earlier Later Regarding According Okay Yes No Hi "
    "Hey Please Let Let's My Our Your His Her Their Its This That These Those It He She We They You Me Him Us Them "
    "Monday Tuesday Wednesday Thursday Friday Saturday Sunday".split()
)


def query_names(query: str) -> tuple[str, ...]:
    """The query's quoted phrases, then its names (capitalised words that do not open a sentence, a
    trailing possessive ``'s`` cut, :data:`NOT_NAMES` left out), each once, in order of appearance."""
    out = [m.group(1).strip() for m in _QUOTED.finditer(query)]
    rest = _QUOTED.sub(" ", query)
    for m in _WORD.finditer(rest):
        word = _POSSESSIVE.sub("", m.group(0))
        i = m.start() - 1  # the last character before the word that is not white space
        while i >= 0 and rest[i].isspace():
            i -= 1
        opens = i < 0 or rest[i] in ".!?:"
        if len(word) > 1 and word[0].isupper() and not opens and word not in NOT_NAMES:
            out.append(word)
    return tuple(dict.fromkeys(x for x in out if x))


def name_share(text: str, names: Sequence[str]) -> float:
    """The share of ``names`` (from :func:`query_names`) that ``text`` holds verbatim as whole words
    (case-sensitive); 0 when ``names`` is empty."""
    if not names:
        return 0.0
    hit = sum(1 for n in names if n in text and re.search(r"(?<!\w)" + re.escape(n) + r"(?!\w)", text))
    return hit / len(names)


#: A leading speaker label: up to four capitalised words (a short lower-case joining word such as "and"
#: or "of" between two of them) before a colon and a space, read in a text's first 64 characters
#: ("Maya: ...", "Lady Macbeth: ...", "Rosencrantz and Guildenstern: ...").
_LABEL = re.compile(r"\s*([A-Z][\w'’.-]*(?:[ ](?:[a-z]{1,4}[ ])?[A-Z][\w'’.-]*){0,3})[ \t]*:[ \t]")


def speaker_labels(text: str, source: str = "", topic: str | None = None) -> tuple[str, ...]:
    """What may name a segment's speaker: its ``source`` and ``topic`` (when given) and a leading
    ``Name:`` label of its text ("Maya: I moved ...")."""
    out = [x for x in (source, topic or "") if x]
    m = _LABEL.match(text[:64])
    if m:
        out.append(m.group(1))
    return tuple(out)


def names_speaker(names: Sequence[str], labels: Sequence[str]) -> bool:
    """Whether one of ``names`` (from :func:`query_names`) is a whole word of one of ``labels`` (from
    :func:`speaker_labels`), case kept."""
    return any(n in lab and re.search(r"(?<!\w)" + re.escape(n) + r"(?!\w)", lab) for n in names for lab in labels if n)


def without_names(query: str, names: Sequence[str]) -> str:
    """``query`` with each of ``names`` (whole words, a possessive ``'s`` with it) taken out and the
    spaces closed up: the query a segment's content is compared with once its speaker is matched
    apart."""
    out = query
    for n in names:
        out = re.sub(r"(?<!\w)" + re.escape(n) + r"(?:['’]s?)?(?!\w)", " ", out)
    out = re.sub(r"\s+([?.!,;:])", r"\1", re.sub(r"\s+", " ", out)).strip()
    return out if re.search(r"\w", out) else query
