"""Text into pieces to embed, for both sides of the retrieval core: paragraphs and sentences within a
size and the model's token window (:func:`split_text`), markdown sections with their heading paths
(:func:`heading_sections`), a message's query sentences and task steps (:func:`split_query`), and
overlapping token windows over a long text (:func:`token_windows`).

Nothing here knows what an item or a segment is: the agent's items are cut by
:mod:`contextsieve.selection.chunking`, the stash's segments by :mod:`contextsieve.stash.core`.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import accumulate

from contextsieve.errors import InputError

__all__ = [
    "TextSplit",
    "TokenCounter",
    "fit_tokens",
    "split_text",
    "heading_sections",
    "split_query",
    "query_chunks",
    "token_windows",
]

#: ``count_tokens(texts) -> model tokens per text`` (special tokens included).
TokenCounter = Callable[[Sequence[str]], list[int]]

_FENCE = re.compile(r"^\s*(```|~~~)")
_PARAGRAPHS = re.compile(r"\n\s*\n")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


@dataclass(frozen=True, kw_only=True)
class TextSplit:
    """How :func:`split_text` cuts a text.

    Attributes:
        max_chars: target chunk size in characters (default 500, as the reference system).
        max_tokens: hard limit per piece in model tokens, special tokens included (default 256,
            MiniLM's window); applies only when a token counter is given.
    """

    max_chars: int = 500
    max_tokens: int = 256

    def __post_init__(self) -> None:
        for name in ("max_chars", "max_tokens"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise InputError(f"{name} must be a positive int, got {v!r}")


def _sentences_packed(paragraph: str, max_chars: int) -> list[str]:
    out: list[str] = []
    current = ""
    for sentence in (s.strip() for s in _SENTENCE_END.split(paragraph)):
        if not sentence:
            continue
        if current and len(current) + 1 + len(sentence) <= max_chars:
            current = f"{current} {sentence}"
        elif not current:
            current = sentence
        else:
            out.append(current)
            current = sentence
    if current:
        out.append(current)
    return out


def fit_tokens(
    text: str, limit: int, count: TokenCounter, *, counted: int | None = None, first_only: bool = False
) -> list[str]:
    """Split ``text`` at word boundaries into pieces of at most ``limit`` tokens each.

    Each piece is the longest run of words, from where the one before ended, whose count (the words
    joined by single spaces) is within ``limit``; a word over the limit alone is a piece of its own.
    ``text`` within the limit is returned as it is. ``counted``: ``count([text])[0]`` when the caller
    has it; ``first_only``: stop after the first piece.

    Linear in the text (a bisection over all remaining words per piece was quadratic: 152 s for 1 MB
    without sentence breaks). Every distinct word is counted once; each piece's end is estimated from
    its words' counts (words joined by spaces count as ``count("")`` plus each word's own count, as
    WordPiece does) and checked with the counter: the piece within the limit, the piece and the next
    word over it, every piece in one call. From the first piece whose check fails (a counter that does
    not add up per word) each end is searched with real counts from its estimate (at most twice the
    piece before), galloping and bisecting, so the result is always the greedy split the counter
    defines (counts are taken not to shrink as words are added).
    """
    if (counted if counted is not None else count([text])[0]) <= limit:
        return [text]
    words = text.split()
    n = len(words)
    if not n:
        return []
    distinct = list(dict.fromkeys(words))
    empty, *own = count(["", *distinct])
    size = dict(zip(distinct, (max(0, c - empty) for c in own)))
    prefix = [0, *accumulate(size[w] for w in words)]  # estimated tokens of words[s:e]: prefix[e] - prefix[s]

    def estimate(start: int) -> int:
        """The last end whose estimated count is within the limit (at least one word on)."""
        return max(start + 1, bisect_right(prefix, limit - empty + prefix[start], start + 1) - 1)

    def piece(start: int, end: int) -> str:
        return " ".join(words[start:end])

    def fits(start: int, end: int) -> bool:
        return end == start + 1 or count([piece(start, end)])[0] <= limit

    def search(start: int, guess: int) -> int:
        """The greedy end from ``start`` by real counts: ``guess`` checked first, then galloping up
        from the last end known to fit and bisection (each count costs the piece's length)."""
        within, *over = count([piece(start, guess)] + ([piece(start, guess + 1)] if guess < n else []))
        if guess == start + 1 or within <= limit:
            if guess == n or over[0] > limit:
                return guess
            lo, top = guess + 1, n  # lo fits; the end is in [lo, top]
        else:
            lo, top = start + 1, guess - 1
        step = 1
        while lo < top:
            probe = min(top, lo + step)
            if not fits(start, probe):
                top = probe - 1
                break
            lo, step = probe, step * 2
        while lo < top:
            mid = (lo + top + 1) // 2
            if fits(start, mid):
                lo = mid
            else:
                top = mid - 1
        return lo

    ends: list[int] = []
    while (not ends or ends[-1] < n) and not (first_only and ends):
        ends.append(estimate(ends[-1] if ends else 0))
    starts = [0, *ends[:-1]]
    texts = [piece(s, e) for s, e in zip(starts, ends)]
    checked = count(texts + [f"{t} {words[e]}" for t, e in zip(texts, ends) if e < n])
    pieces: list[str] = []
    start, last = 0, 1  # last: words in the piece before
    for i, (s, e) in enumerate(zip(starts, ends)):
        over = checked[len(texts) + i] if e < n else limit + 1
        if not ((e == s + 1 or checked[i] <= limit) and over > limit):
            break
        pieces.append(texts[i])
        start, last = e, e - s
    # The estimates missed: real counts from here on, each guess at most twice the piece before (an
    # estimate far off would make every first count cost the rest of the text).
    while start < n and not (first_only and pieces):
        end = search(start, min(estimate(start), start + 2 * last))
        pieces.append(piece(start, end))
        last, start = end - start, end
    return pieces


def split_text(
    text: str,
    split: TextSplit = TextSplit(),
    count_tokens: TokenCounter | None = None,
    token_limit: int | None = None,
) -> list[str]:
    """Paragraph / sentence chunks of ``text``; ``[]`` for blank text.

    Paragraphs (split on blank lines) of at most ``split.max_chars`` characters are chunks as they
    are; longer ones are split into sentences (ending punctuation kept) packed greedily up to
    ``split.max_chars``. With ``count_tokens``, a chunk over ``token_limit`` tokens (default
    ``split.max_tokens``) is split again at word boundaries (:func:`fit_tokens`).
    """
    chunks: list[str] = []
    for paragraph in _PARAGRAPHS.split(text):
        if not paragraph.strip():
            continue
        if len(paragraph.strip()) <= split.max_chars:
            chunks.append(paragraph.strip())
        else:
            chunks.extend(_sentences_packed(paragraph, split.max_chars))
    if count_tokens is not None:
        limit = token_limit if token_limit is not None else split.max_tokens
        sizes = count_tokens(chunks) if chunks else []  # one call for all: a call per chunk costs more
        chunks = [piece for c, n in zip(chunks, sizes) for piece in fit_tokens(c, limit, count_tokens, counted=n)]
    return chunks


def _heading(line: str) -> tuple[int, str] | None:
    r"""The level and text of an ATX heading line (no line break in it), or ``None``: what the pattern
    ``^(#{1,6})\s+(.+?)\s*#*\s*$`` matches, found in one pass (the pattern backtracked over trailing
    spaces and hashes: 148 s for a heading line holding 5,000 spaces)."""
    level = len(line) - len(line.lstrip("#"))
    if not 1 <= level <= 6 or not line[level : level + 1].isspace():
        return None
    start = len(line) - len(line[level:].lstrip())  # after the spaces that follow the hashes
    if start == len(line):  # hashes and spaces only: the text is the last space, if two or more
        return (level, line[-1]) if start - level >= 2 else None
    end = len(line.rstrip().rstrip("#").rstrip())  # closing hashes and spaces left out
    return level, line[start : max(end, start + 1)]


def heading_sections(text: str) -> list[tuple[tuple[str, ...], str]]:
    """Markdown ``text`` as ``(heading path, section text)`` pairs, heading lines left out of the text.

    ATX headings (``#`` to ``######``) outside fenced code blocks open a section; a deeper heading
    nests under the ones above it. Text before the first heading has the path ``()``.
    """
    sections: list[tuple[tuple[str, ...], str]] = []
    stack: list[tuple[int, str]] = []
    lines: list[str] = []
    fenced = False

    def close() -> None:
        body = "\n".join(lines).strip()
        if body:
            sections.append((tuple(h for _, h in stack), body))
        lines.clear()

    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
        heading = None if fenced else _heading(line)
        if heading is None:
            lines.append(line)
            continue
        close()
        level = heading[0]
        while stack and stack[-1][0] >= level:
            stack.pop()
        stack.append(heading)
    close()
    return sections


#: Where a message's steps part, besides sentence ends: line breaks, list markers, semicolons and the
#: CJK full stop, exclamation, question mark and semicolon. A match starts at the break itself (a
#: leading ``\s*`` made a run of 200,000 spaces take 53 s); pieces are stripped afterwards.
_STEP_BREAK = re.compile(r"\n\s*(?:[-*\u2022]\s+|\d{1,2}[.)]\s+)?|;\s*|(?<=[\u3002\uff01\uff1f\uff1b])")
#: Words that join the steps of a task inside one sentence ("..., then ...", "and then", "und dann",
#: "y luego", "然后"): a sentence holding them is also searched clause by clause.
_CLAUSE_JOIN = re.compile(
    r"(?:,\s*|\s+)(?:and\s+then|and\s+also|then|after\s+that|afterwards|und\s+dann|dann|danach|"
    r"y\s+luego|luego|y\s+despu[eé]s|despu[eé]s|et\s+ensuite|ensuite|puis)\s+"
    r"|,?\s+and\s+(?=[a-z]+\s)|\s+und\s+(?=[a-zäöüß]+\s)|\s+y\s+(?=[a-záéíóúñ]+\s)"
    r"|[,\uff0c\u3001]?\s*(?:然后|接着|之后|再|并且|并)",
    re.IGNORECASE,
)


def split_query(message: str, max_chars: int = 500, *, steps: bool = False) -> tuple[list[str], int]:
    """A user message's query chunks and how many of them are its sentences.

    The chunks start with the message's sentences (punctuation kept, each cut at ``max_chars``; none
    when blank). With ``steps``, the steps of a task follow: the pieces the message falls into when it
    is also split at line breaks, list markers, semicolons and CJK sentence punctuation, and the clauses
    of a sentence or piece that joins several actions ("find the issue and post it on Slack", "...,
    then ...", "und dann", "y luego", "然后"; clauses of two words or more), each once. A search can use
    the sentences alone (the first ``n``) or all chunks, so each step of a task is searched on its own
    as well as in its sentence (max pooling keeps the better of the two).

    Returns:
        ``(chunks, n)``: the chunks, sentences first, and the number of sentences.
    """
    if not isinstance(message, str):
        raise InputError(f"a message must be a str, got {type(message).__name__}")
    sentences = [s.strip()[:max_chars].strip() for s in _SENTENCE_END.split(message) if s.strip()]
    if not steps:
        return sentences, len(sentences)
    pieces = [s.strip()[:max_chars].strip() for p in _STEP_BREAK.split(message) for s in _SENTENCE_END.split(p)]
    extra: list[str] = []
    seen = set(sentences)
    for piece in [p for p in pieces if p]:
        clauses = [c.strip(" ,.;:!?") for c in _CLAUSE_JOIN.split(piece)]
        clauses = [c for c in clauses if len(c.split()) >= 2 or (c and _is_cjk_text(c) and len(c) >= 3)]
        for c in [piece, *(clauses if len(clauses) >= 2 else [])]:
            if c not in seen:
                seen.add(c)
                extra.append(c)
    return sentences + extra, len(sentences)


def query_chunks(message: str, max_chars: int = 500, *, steps: bool = False) -> list[str]:
    """The query chunks of :func:`split_query` (sentences, then with ``steps`` the steps)."""
    return split_query(message, max_chars, steps=steps)[0]


def _is_cjk_text(text: str) -> bool:
    return any("\u3040" <= ch <= "\u9fff" or "\uac00" <= ch <= "\ud7af" for ch in text)


def _units(text: str) -> list[str]:
    """Paragraphs; a paragraph that is code (or any multi-line block) splits into its lines, prose
    into its sentences. Empty pieces are dropped."""
    out: list[str] = []
    for paragraph in _PARAGRAPHS.split(text):
        if not paragraph.strip():
            continue
        lines = [ln for ln in paragraph.split("\n") if ln.strip()]
        if len(lines) > 1:
            out.extend(lines)
        else:
            out.extend(s for s in (x.strip() for x in _SENTENCE_END.split(paragraph)) if s)
    return out


def token_windows(text: str, count_tokens: TokenCounter, max_tokens: int = 200, overlap_tokens: int = 32) -> list[str]:
    """``text`` as one piece if it fits ``max_tokens`` model tokens, else as windows that end at
    paragraph, line (code) or sentence boundaries (words when one unit is longer than a window), each
    starting with the last units of the one before up to ``overlap_tokens`` tokens.

    Args:
        text: any text (blank gives ``[]``).
        count_tokens: model tokens per text (special tokens included).
        max_tokens: tokens per window, special tokens included (default 200; the model reads 256).
        overlap_tokens: tokens of the previous window repeated at the start of the next (default 32).
    """
    if max_tokens < 8 or not 0 <= overlap_tokens < max_tokens // 2:
        raise InputError(
            f"need max_tokens >= 8 and 0 <= overlap_tokens < max_tokens / 2, got {max_tokens}, {overlap_tokens}"
        )
    if not text.strip():
        return []
    if count_tokens([text])[0] <= max_tokens:
        return [text]
    parts = _units(text)
    units = [
        piece
        for u, n in zip(parts, count_tokens(parts) if parts else [])
        for piece in fit_tokens(u, max_tokens - 2, count_tokens, counted=n)
    ]
    sizes = [max(0, n - 2) for n in count_tokens(units)]  # without [CLS] / [SEP]
    budget = max_tokens - 2
    windows: list[str] = []
    current: list[int] = []  # unit indices
    used = 0
    for i, size in enumerate(sizes):
        if current and used + size > budget:
            windows.append("\n".join(units[j] for j in current))
            carry: list[int] = []
            kept = 0
            for j in reversed(current):
                if kept + sizes[j] > overlap_tokens or kept + sizes[j] + size > budget:
                    break
                carry.insert(0, j)
                kept += sizes[j]
            current, used = carry, kept
        current.append(i)
        used += size
    if current:
        windows.append("\n".join(units[j] for j in current))
    return windows
