"""What the chunk store embeds, as plain functions: chunk plans (how an item's chunks are stored and
found again in the embedding cache: cutting needs token counts, the slow part of a restart), the digest
that says when an item must be embedded again, a server's profile text and a recorded example's chunk
text."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence

from contextsieve.agent.example_records import Example
from contextsieve.agent.items import Item, Tool
from contextsieve.selection.chunking import EXAMPLE_SHOWN, VECTOR_EXAMPLE, Chunk, ChunkConfig

__all__ = [
    "PLAN_VERSION",
    "digest",
    "plan_key",
    "schema_of",
    "chunks_from_plan",
    "profile_text",
    "example_chunk_text",
    "words_free",
    "WORDS_MARK",
]


def digest(chunks: Sequence[Chunk]) -> str:
    """The SHA-256 of the chunks' embedding texts, in order."""
    h = hashlib.sha256()
    for c in chunks:
        h.update(c.embed_text.encode("utf-8"))
        h.update(b"\x00")
    return h.hexdigest()


#: Bump when :func:`contextsieve.selection.chunking.chunk_item` cuts the same input differently: stored plans of
#: another version are never read.
PLAN_VERSION = 1


def plan_key(item: Item, fingerprint: tuple[object, ...], config: ChunkConfig) -> str:
    """The disk key of an item's chunk plan: everything the cut depends on (the tokenizer is in the
    cache's model id)."""
    data = json.dumps([PLAN_VERSION, repr(config), item.kind.value, list(fingerprint)], ensure_ascii=False, default=str)
    return hashlib.sha256(data.encode("utf-8")).hexdigest()


def schema_of(item: Item) -> str:
    """A tool's input schema as canonical JSON (it is part of the tool's chunks when ``tool_schema`` is on)."""
    return json.dumps(item.input_schema, sort_keys=True, default=str) if isinstance(item, Tool) else ""


def chunks_from_plan(plan: object) -> list[Chunk] | None:
    """Chunks of a stored plan, or ``None`` when it is not a list of ``[text, embed_text, index]``."""
    if not isinstance(plan, list):
        return None
    out = []
    for row in plan:
        if not (
            isinstance(row, list)
            and len(row) == 3
            and isinstance(row[0], str)
            and isinstance(row[1], str)
            and isinstance(row[2], int)
        ):
            return None
        out.append(Chunk(row[0], row[1], row[2]))
    return out


def profile_text(
    server: str,
    description: str,
    tools: Sequence[str],
    max_tokens: int,
    count_tokens: Callable[[Sequence[str]], list[int]],
) -> str:
    """``"<server>: <description>"`` then ``"tools: a, b, ..."``, tools dropped from the end to fit ``max_tokens``."""
    head = f"{server}: {description.strip()}" if description.strip() else server
    names = list(tools)
    while True:
        text = f"{head}\ntools: {', '.join(names)}" if names else head
        if len(names) <= 1 or count_tokens([text])[0] <= max_tokens:
            return text
        names = names[: max(1, len(names) * 3 // 4)]


#: What the stored plan of a tool holding a recorded request's words contains (the JSON of an example
#: chunk's text): an earlier version stored such plans; :class:`ChunkStore` deletes them.
WORDS_MARK = json.dumps(EXAMPLE_SHOWN)[:-1]


def words_free(examples: Sequence[str]) -> bool:
    """Whether a plan with these example chunk texts (:func:`example_chunk_text`) may be stored on disk:
    only when each example is kept as a vector, so a user's words are never written to the embedding
    cache (an in-memory history, or ``remember_requests``, which the history file alone keeps)."""
    return all(x.startswith(VECTOR_EXAMPLE) for x in examples)


def example_chunk_text(e: Example) -> str:
    """What an example's chunk embeds: its text, or a placeholder of its digest when the log keeps only its
    vector (resolved from the log, never embedded)."""
    return e.text if e.text is not None else f"{VECTOR_EXAMPLE}{e.hash}"
