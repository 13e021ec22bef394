"""Turning items and user messages into chunks to embed.

Follows the reference system (``../shared/reference/tsagent-notes.md`` §2.1) with its bugs fixed:

- Item text is ``"name: description"`` (the header) then the body; paragraphs (split on blank
  lines) of at most ``max_chars`` characters are chunks as they are, longer ones are split into
  sentences and packed greedily up to ``max_chars``. Unlike the reference, sentences keep their
  ending punctuation, the packing counts lengths exactly, and no chunk exceeds the model's token
  window: a chunk over ``max_tokens`` is split again at word boundaries.
- The header is a chunk of its own (it answers "which item is this"), and it also prefixes every
  body chunk's *embedding* text, so no body chunk loses its item's identity. Chunks keep a
  ``text`` (shown and sent) apart from their ``embed_text`` (embedded).
- A tool is one chunk, ``"name: description"`` (split only if over the token window).
- A query is split into sentences (punctuation kept), each cut at ``max_chars``; an empty query has no chunks.

Contextual embeddings (``../shared/seeds/002``): a chunk's embedding text is ``context + "\n\n" + text``
where the context joins, line by line, what the chunk alone lacks: for a body chunk its item's header,
the heading path above it in a markdown document (``Setup > Linux``) and the item's ``summary``;
for a tool its server (name, and description when the server has one; see ``tool_context``; only
while the agent's tools come from two servers or more) and its ``summary``; and, for any chunk,
what a ``summarizer`` callable returns for it. With none of these the chunk is embedded as it is (a
tool as ``name: description``). The text shown and sent never changes. The keyword index reads the
same embedding texts, so a section that never names its parent is found by the parent's name.
With ``split_identifiers``, tool names are embedded split into words (``searchIssues`` as
``search Issues``; the tokenizer reads it as ``search ##iss ##ues``); off by default (docs/selection.md
says why).
"""

from __future__ import annotations

import dataclasses
import re
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import accumulate

from contextsieve.agent.items import Item, Tool
from contextsieve.choices import ToolContext, ToolSchema, allowed
from contextsieve.errors import InputError, SummarizerError

__all__ = [
    "Chunk",
    "ChunkConfig",
    "chunk_item",
    "split_text",
    "query_chunks",
    "split_query",
    "token_windows",
    "heading_sections",
    "split_identifier",
    "TokenCounter",
    "Summarizer",
    "SummarizerError",
    "TOOL_CONTEXTS",
    "TOOL_SCHEMAS",
    "schema_text",
]

TokenCounter = Callable[[Sequence[str]], list[int]]
#: ``summarizer(item, chunk_texts) -> one context string (or None / "") per chunk``; called once per item
#: when its chunks are (re-)made, e.g. to let an LLM write Anthropic-style chunk context.
Summarizer = Callable[[Item, Sequence[str]], Sequence["str | None"]]
#: Values of :attr:`ChunkConfig.tool_context`.
TOOL_CONTEXTS = allowed(ToolContext)
#: Values of :attr:`ChunkConfig.tool_schema`.
TOOL_SCHEMAS = allowed(ToolSchema)

#: Where an acronym ends before a capitalised word (``HTTP|Server``). A lookaround: ``([A-Z]+)([A-Z][a-z])``
#: backtracked over a run of capitals from every position in it (4.4 s for 20,000 capitals).
_ACRONYM_END = re.compile(r"(?<=[A-Z])(?=[A-Z][a-z])")
_FENCE = re.compile(r"^\s*(```|~~~)")
_PARAGRAPHS = re.compile(r"\n\s*\n")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


@dataclass(frozen=True)
class ChunkConfig:
    """Chunking settings.

    Attributes:
        max_chars: target chunk size in characters (default 500, as the reference).
        max_tokens: hard limit per embedded text in model tokens, special tokens included (default 256,
            MiniLM's window); needs a token counter, else only ``max_chars`` applies.
        header_prefix: prefix body chunks' embedding text with the item header (default True).
        max_header_tokens: longest header used as a prefix (default 64 tokens; cut at a word boundary).
        heading_paths: add the markdown heading path above a body chunk to its context (default True;
            text without headings is chunked exactly as without this).
        tool_context: what of a tool's MCP server goes into its embedding text: ``"none"``,
            ``"server"`` (its name; the default) or ``"server+description"`` (name and description).
        split_identifiers: embed tool names with camelCase / snake_case split into words (default False;
            ``benchmarks.tool_selection`` measures it).
        max_summary_tokens: longest summary (item ``summary`` or summarizer output) used (default 64 tokens).
        tool_schema: what of a tool's ``inputSchema`` is embedded and indexed: ``"none"``, ``"text"``
            (its parameters' names, split into words, and descriptions follow the description in the
            tool's text) or ``"chunk"`` (the same as a second chunk of the tool, max-pooled with the first).
        max_schema_tokens: longest parameter text used (default 96 tokens; cut at a word boundary).
        max_examples: most recorded example requests per tool embedded as extra chunks of the tool
            (newest first; default 50; 0 ignores them; see :mod:`contextsieve.agent.usage`).
        max_tool_chars: longest part of a tool's description that is chunked and embedded (default
            10,000 characters, as :class:`~contextsieve.agent.agentfile.ToolLimits` holds what servers list: a
            tool is found by what its description says first; a tool written in the agent file or in
            code keeps its whole description in what is sent, only its embedding stops here, so its
            first request stays in seconds).
    """

    max_chars: int = 500
    max_tokens: int = 256
    header_prefix: bool = True
    max_header_tokens: int = 64
    heading_paths: bool = True
    tool_context: ToolContext = "server"
    split_identifiers: bool = False
    max_summary_tokens: int = 64
    tool_schema: ToolSchema = "none"
    max_schema_tokens: int = 96
    max_examples: int = 50
    max_tool_chars: int = 10_000

    def __post_init__(self) -> None:
        if self.tool_context not in TOOL_CONTEXTS:
            raise InputError(f"tool_context must be one of {TOOL_CONTEXTS}, got {self.tool_context!r}")
        if self.tool_schema not in TOOL_SCHEMAS:
            raise InputError(f"tool_schema must be one of {TOOL_SCHEMAS}, got {self.tool_schema!r}")
        for name in (
            "max_chars",
            "max_tokens",
            "max_header_tokens",
            "max_summary_tokens",
            "max_schema_tokens",
            "max_tool_chars",
        ):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise InputError(f"{name} must be a positive int, got {v!r}")
        if isinstance(self.max_examples, bool) or not isinstance(self.max_examples, int) or self.max_examples < 0:
            raise InputError(f"max_examples must be an int >= 0, got {self.max_examples!r}")


@dataclass(frozen=True)
class Chunk:
    """One piece of an item: ``text`` is shown and sent, ``embed_text`` is embedded."""

    text: str
    embed_text: str
    index: int


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


def _fit_tokens(
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
    config: ChunkConfig = ChunkConfig(),
    count_tokens: TokenCounter | None = None,
    token_limit: int | None = None,
) -> list[str]:
    """Paragraph / sentence chunks of ``text`` (see the module docstring); ``[]`` for blank text."""
    chunks: list[str] = []
    for paragraph in _PARAGRAPHS.split(text):
        if not paragraph.strip():
            continue
        if len(paragraph.strip()) <= config.max_chars:
            chunks.append(paragraph.strip())
        else:
            chunks.extend(_sentences_packed(paragraph, config.max_chars))
    if count_tokens is not None:
        limit = token_limit if token_limit is not None else config.max_tokens
        sizes = count_tokens(chunks) if chunks else []  # one call for all: a call per chunk costs more
        chunks = [piece for c, n in zip(chunks, sizes) for piece in _fit_tokens(c, limit, count_tokens, counted=n)]
    return chunks


def _header(item: Item) -> str:
    return f"{item.name}: {item.description}" if item.description else item.name


def schema_text(schema: object) -> str:
    """A tool's parameters as words: ``"owner: Repository owner; repo: Repository name; pull number"``
    (top-level ``properties`` of its input schema in order, names split into words, descriptions
    after a colon); ``""`` when it has none."""
    props = schema.get("properties") if isinstance(schema, dict) else None
    if not isinstance(props, dict):
        return ""
    parts = []
    for key, spec in list(props.items())[:64]:
        words = split_identifier(str(key)).lower()
        desc = spec.get("description") if isinstance(spec, dict) else None
        parts.append(f"{words}: {' '.join(desc.split())}" if isinstance(desc, str) and desc.strip() else words)
    return "; ".join(parts)


def split_identifier(name: str) -> str:
    """Identifier words: ``searchIssues`` / ``search_issues`` / ``HTTPServer-v2`` ->
    ``search Issues`` / ``search issues`` / ``HTTP Server v2``."""
    name = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", name)
    name = _ACRONYM_END.sub(" ", name)
    return " ".join(re.sub(r"[_\-.]+", " ", name).split()) or name


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


def _cap(text: str, limit: int, count_tokens: TokenCounter | None) -> str:
    """``text`` cut at a word boundary to ``limit`` tokens (about 4 characters a token without a counter)."""
    if count_tokens is not None:
        return _fit_tokens(text, limit, count_tokens, first_only=True)[0] if text.split() else ""
    return text if len(text) <= 4 * limit else text[: 4 * limit].rsplit(" ", 1)[0]


def _summaries(item: Item, texts: list[str], summarizer: Summarizer | None) -> list[str]:
    if summarizer is None or not texts:
        return [""] * len(texts)
    try:
        out = list(summarizer(item, list(texts)))
    except Exception as e:  # the caller's code: keep its error as the cause
        raise SummarizerError(f"the summarizer failed on {item.key}: {e}") from e
    if len(out) != len(texts) or not all(x is None or isinstance(x, str) for x in out):
        raise SummarizerError(
            f"the summarizer must return one str or None per chunk ({len(texts)} for {item.key}), got {out!r:.200}"
        )
    return [(x or "").strip() for x in out]


def _with_context(context: Sequence[str], text: str, max_tokens: int, count_tokens: TokenCounter | None) -> str:
    """``context`` lines, a blank line, then ``text``; the context is cut (never the text) to fit ``max_tokens``."""
    lines = "\n".join(c for c in context if c)
    if lines and count_tokens is not None:
        joined = f"{lines}\n\n{text}"
        if count_tokens([joined])[0] <= max_tokens:
            return joined
        room = max_tokens - count_tokens([text])[0]
        lines = _cap(lines, room, count_tokens) if room > 2 else ""
    return f"{lines}\n\n{text}" if lines else text


def _static_context(parts: Sequence[str], config: ChunkConfig, count_tokens: TokenCounter | None) -> tuple[str, int]:
    """The joined context lines, cut to half the token window, and their token count (0 without a counter)."""
    lines = "\n".join(c for c in parts if c)
    if not lines:
        return "", 0
    lines = (
        _cap(lines, config.max_tokens // 2, count_tokens)
        if count_tokens is not None and count_tokens([lines])[0] > config.max_tokens // 2
        else lines
    )
    return lines, (count_tokens([lines + "\n\n"])[0] if count_tokens is not None else 0)


def chunk_item(
    item: Item,
    config: ChunkConfig = ChunkConfig(),
    count_tokens: TokenCounter | None = None,
    *,
    server_description: str = "",
    server_context: bool = True,
    summarizer: Summarizer | None = None,
    examples: Sequence[str] = (),
) -> list[Chunk]:
    """The chunks of an item, in order (header first for rules and references).

    Args:
        item: a rule, reference or tool.
        config: chunking settings.
        count_tokens: the model's token counter (for the token window); ``None``: characters only.
        server_description: the description of a tool's MCP server (used by ``tool_context``).
        server_context: ``False`` leaves the server out whatever ``tool_context`` says (the store
            does so while all tools come from one server: a prefix every tool shares tells none apart).
        summarizer: optional per-chunk context writer (see :data:`Summarizer`).
        examples: a tool's recorded example requests (see :mod:`contextsieve.agent.usage`): each becomes a
            chunk of its own, ``"example request: ..."`` shown, the request as it was embedded (cut to
            the token window), after the tool's own chunks; at most ``config.max_examples``.
    """
    if isinstance(item, Tool) and len(item.description) > config.max_tool_chars:
        item = dataclasses.replace(item, description=item.description[: config.max_tool_chars])
    header = _header(item)
    summary = _cap(getattr(item, "summary", "").strip(), config.max_summary_tokens, count_tokens)
    reserve = min(config.max_summary_tokens, config.max_tokens // 4) if summarizer is not None else 0

    def body_limit(used: int) -> int | None:
        return max(16, config.max_tokens - used - reserve) if count_tokens is not None else None

    def extra(texts: list[str]) -> list[str]:
        return [_cap(x, config.max_summary_tokens, count_tokens) for x in _summaries(item, texts, summarizer)]

    if isinstance(item, Tool):
        server = "" if config.tool_context == "none" or not server_context else item.server
        if config.tool_context == "server+description" and server_description.strip():
            server = f"{server}: {server_description.strip()}"
        context, used = _static_context(
            [_cap(server, config.max_header_tokens, count_tokens), summary], config, count_tokens
        )
        shown = split_text(header, config, count_tokens, body_limit(used))
        name = split_identifier(item.name) if config.split_identifiers else item.name
        embed = (
            split_text(
                f"{name}: {item.description}" if item.description else name, config, count_tokens, body_limit(used)
            )
            if name != item.name
            else shown  # the same text: split once
        )
        if len(embed) != len(shown):  # splitting the name moved a cut: embed the shown pieces
            embed = shown
        params = (
            _cap(schema_text(item.input_schema), config.max_schema_tokens, count_tokens)
            if config.tool_schema != "none"
            else ""
        )
        if params and config.tool_schema == "text" and len(embed) == 1:
            joined = f"{embed[0]}\n{params}"
            limit = body_limit(used)
            if limit is None or count_tokens is None or count_tokens([joined])[0] <= limit:
                embed = [joined]
            else:  # the description fills the window: as many parameter words as fit
                room = limit - count_tokens([embed[0] + "\n"])[0]
                cut_params = _cap(params, room, count_tokens) if room > 4 else ""
                embed = [f"{embed[0]}\n{cut_params}" if cut_params else embed[0]]
        pieces = list(zip(shown, embed))
        if params and config.tool_schema == "chunk":
            pieces.append((f"{item.name} parameters: {params}", f"{name} parameters: {params}"))
        own = [
            Chunk(t, _with_context([context, x], e, config.max_tokens, count_tokens), i)
            for i, ((t, e), x) in enumerate(zip(pieces, extra([t for t, _ in pieces])))
        ]
        shots = [_cap(ex, config.max_tokens - 2, count_tokens) for ex in list(examples)[: config.max_examples]]
        return own + [
            Chunk(f"example request: {ex}", ex, len(own) + j) for j, ex in enumerate(s for s in shots if s.strip())
        ]
    head_chunks = split_text(header, config, count_tokens)
    prefix = _cap(header, config.max_header_tokens, count_tokens) if config.header_prefix else ""
    sections = heading_sections(item.text) if config.heading_paths else [((), item.text)]
    body: list[tuple[str, str]] = []  # (context without the summarizer's, text)
    for path, section in sections:
        context, used = _static_context(
            [prefix, _cap(" > ".join(path), config.max_header_tokens, count_tokens), summary], config, count_tokens
        )
        body += [(context, t) for t in split_text(section, config, count_tokens, body_limit(used))]
    chunks = [Chunk(t, t, i) for i, t in enumerate(head_chunks)]
    chunks += [
        Chunk(t, _with_context([ctx, x], t, config.max_tokens, count_tokens), len(chunks) + j)
        for j, ((ctx, t), x) in enumerate(zip(body, extra([t for _, t in body])))
    ]
    return chunks


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
        for piece in _fit_tokens(u, max_tokens - 2, count_tokens, counted=n)
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
