"""Chunk plans: how an item's chunks are stored and found again in the embedding cache (cutting needs
token counts, the slow part of a restart), and the digest that says when an item must be embedded again."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

from contextsieve.agent.items import Item, Tool
from contextsieve.selection.chunking import Chunk, ChunkConfig

__all__ = ["PLAN_VERSION", "digest", "plan_key", "schema_of", "chunks_from_plan"]


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
