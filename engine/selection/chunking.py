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
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from contextsieve.agent.items import Item, Tool
from contextsieve.choices import ToolContext, ToolSchema, allowed
from contextsieve.errors import InputError, SummarizerError
from contextsieve.retrieval.text import TextSplit, TokenCounter, fit_tokens, heading_sections, split_text

__all__ = [
    "Chunk",
    "ChunkConfig",
    "VECTOR_EXAMPLE",
    "cap_example",
    "chunk_item",
    "is_example_chunk",
    "split_identifier",
    "Summarizer",
    "TOOL_CONTEXTS",
    "TOOL_SCHEMAS",
    "schema_text",
]

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


@dataclass(frozen=True, kw_only=True)
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
            ``benchmarks.quality.tool_selection`` measures it).
        max_summary_tokens: longest summary (item ``summary`` or summarizer output) used (default 64 tokens).
        tool_schema: what of a tool's ``inputSchema`` is embedded and indexed: ``"none"``, ``"text"``
            (its parameters' names, split into words, and descriptions follow the description in the
            tool's text) or ``"chunk"`` (the same as a second chunk of the tool, max-pooled with the first).
        max_schema_tokens: longest parameter text used (default 96 tokens; cut at a word boundary).
        max_examples: most recorded example requests per tool embedded as extra chunks of the tool
            (newest first; default 50; 0 ignores them; see :mod:`contextsieve.agent.usage`).
        max_tool_chars: longest part of a tool's description that is chunked and embedded (default
            10,000 characters, as :class:`~contextsieve.agent.tool_limits.ToolLimits` holds what servers list: a
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

    @property
    def text(self) -> TextSplit:
        """The text-splitting part of these settings (``max_chars``, ``max_tokens``), as the retrieval
        core's splitter takes it."""
        return TextSplit(max_chars=self.max_chars, max_tokens=self.max_tokens)


@dataclass(frozen=True, slots=True)
class Chunk:
    """One piece of an item: ``text`` is shown and sent, ``embed_text`` is embedded."""

    text: str
    embed_text: str
    index: int


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


#: How an example request kept as a vector only (the default: :mod:`contextsieve.agent.usage`) is written
#: in its chunk: this prefix and its digest (no words; its vector comes from the usage log).
VECTOR_EXAMPLE = "\x00example:"


#: What an example request's chunk shows before the request's text.
EXAMPLE_SHOWN = "example request: "
#: What it shows when the request is kept as a vector only.
EXAMPLE_SHOWN_VECTOR = "example request (kept as a vector)"


def is_example_chunk(chunk: Chunk) -> bool:
    """Whether ``chunk`` is one of a tool's recorded example requests (made by :func:`chunk_item`),
    not a piece of the tool's own text."""
    if chunk.embed_text.startswith(VECTOR_EXAMPLE):
        return chunk.text == EXAMPLE_SHOWN_VECTOR
    return chunk.text == EXAMPLE_SHOWN + chunk.embed_text


def cap_example(example: str, config: ChunkConfig, count_tokens: TokenCounter | None) -> str:
    """An example request as its chunk embeds it: cut to the token window (a placeholder of an example
    kept as a vector is left as it is)."""
    if example.startswith(VECTOR_EXAMPLE):
        return example
    return _cap(example, config.max_tokens - 2, count_tokens)


def _cap(text: str, limit: int, count_tokens: TokenCounter | None) -> str:
    """``text`` cut at a word boundary to ``limit`` tokens (about 4 characters a token without a counter)."""
    if count_tokens is not None:
        return fit_tokens(text, limit, count_tokens, first_only=True)[0] if text.split() else ""
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
        shown = split_text(header, config.text, count_tokens, body_limit(used))
        name = split_identifier(item.name) if config.split_identifiers else item.name
        embed = (
            split_text(
                f"{name}: {item.description}" if item.description else name, config.text, count_tokens, body_limit(used)
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
        shots = [cap_example(ex, config, count_tokens) for ex in list(examples)[: config.max_examples]]
        return own + [
            Chunk(
                EXAMPLE_SHOWN_VECTOR if ex.startswith(VECTOR_EXAMPLE) else EXAMPLE_SHOWN + ex,
                ex,
                len(own) + j,
            )
            for j, ex in enumerate(s for s in shots if s.strip())
        ]
    head_chunks = split_text(header, config.text, count_tokens)
    prefix = _cap(header, config.max_header_tokens, count_tokens) if config.header_prefix else ""
    sections = heading_sections(item.text) if config.heading_paths else [((), item.text)]
    body: list[tuple[str, str]] = []  # (context without the summarizer's, text)
    for path, section in sections:
        context, used = _static_context(
            [prefix, _cap(" > ".join(path), config.max_header_tokens, count_tokens), summary], config, count_tokens
        )
        body += [(context, t) for t in split_text(section, config.text, count_tokens, body_limit(used))]
    chunks = [Chunk(t, t, i) for i, t in enumerate(head_chunks)]
    chunks += [
        Chunk(t, _with_context([ctx, x], t, config.max_tokens, count_tokens), len(chunks) + j)
        for j, ((ctx, t), x) in enumerate(zip(body, extra([t for _, t in body])))
    ]
    return chunks
