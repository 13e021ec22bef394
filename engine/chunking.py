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
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from contextsieve.items import Item, Tool

__all__ = ["Chunk", "ChunkConfig", "chunk_item", "split_text", "query_chunks", "TokenCounter"]

TokenCounter = Callable[[Sequence[str]], list[int]]

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
    """

    max_chars: int = 500
    max_tokens: int = 256
    header_prefix: bool = True
    max_header_tokens: int = 64


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


def _fit_tokens(text: str, limit: int, count: TokenCounter) -> list[str]:
    """Split ``text`` at word boundaries into pieces of at most ``limit`` tokens each."""
    if count([text])[0] <= limit:
        return [text]
    words = text.split()
    pieces: list[str] = []
    start = 0
    while start < len(words):
        lo, hi = start + 1, len(words)  # largest end with words[start:end] within the limit
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if count([" ".join(words[start:mid])])[0] <= limit:
                lo = mid
            else:
                hi = mid - 1
        pieces.append(" ".join(words[start:lo]))
        start = lo
    return pieces


def split_text(text: str, config: ChunkConfig = ChunkConfig(), count_tokens: TokenCounter | None = None, token_limit: int | None = None) -> list[str]:
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
        chunks = [piece for c in chunks for piece in _fit_tokens(c, limit, count_tokens)]
    return chunks


def _header(item: Item) -> str:
    return f"{item.name}: {item.description}" if item.description else item.name


def chunk_item(item: Item, config: ChunkConfig = ChunkConfig(), count_tokens: TokenCounter | None = None) -> list[Chunk]:
    """The chunks of an item, in order (header first for rules and references)."""
    header = _header(item)
    if isinstance(item, Tool):
        return [Chunk(t, t, i) for i, t in enumerate(split_text(header, config, count_tokens))]
    head_chunks = split_text(header, config, count_tokens)
    prefix = ""
    body_limit = config.max_tokens
    if config.header_prefix:
        prefix = header
        if count_tokens is not None:
            prefix = _fit_tokens(header, config.max_header_tokens, count_tokens)[0]
            body_limit = max(16, config.max_tokens - count_tokens([prefix + "\n\n"])[0])
        elif len(prefix) > 4 * config.max_header_tokens:
            prefix = prefix[: 4 * config.max_header_tokens].rsplit(" ", 1)[0]
    body = split_text(item.text, config, count_tokens, body_limit)
    chunks = [Chunk(t, t, 0) for t in head_chunks]
    chunks += [Chunk(t, f"{prefix}\n\n{t}" if prefix else t, 0) for t in body]
    return [Chunk(c.text, c.embed_text, i) for i, c in enumerate(chunks)]


def query_chunks(message: str, max_chars: int = 500) -> list[str]:
    """Sentences of a user message (punctuation kept), each cut at ``max_chars``; ``[]`` when blank."""
    return [s.strip()[:max_chars].strip() for s in _SENTENCE_END.split(message) if s.strip()]
