"""The values of every choice setting, as ``Literal`` types (checked by mypy) and tuples (checked at run time)."""

from __future__ import annotations

from typing import Literal, get_args

__all__ = [
    "QueryPooling",
    "ToolPermission",
    "ExpansionSource",
    "RelationPooling",
    "KeywordFusion",
    "Preset",
    "IndexBackend",
    "ToolContext",
    "QuerySplit",
    "ToolSchema",
    "ToolDomain",
    "KeywordRole",
    "allowed",
]

QueryPooling = Literal["max", "mean"]
ToolPermission = Literal["always", "never", "tool"]
ExpansionSource = Literal["pass2", "graph", "hybrid"]
RelationPooling = Literal["mean_embedding", "best_pair", "mean_pairs"]
KeywordFusion = Literal["weighted", "rrf"]
Preset = Literal["aggressive", "normal", "conservative", "reference"]
IndexBackend = Literal["auto", "exact", "hnsw"]
ToolContext = Literal["none", "server", "server+description"]
QuerySplit = Literal["sentences", "steps"]
ToolSchema = Literal["none", "text", "chunk"]
ToolDomain = Literal["shared", "own"]
KeywordRole = Literal["rerank", "add"]


def allowed(choice: object) -> tuple[str, ...]:
    """The values a ``Literal`` type admits, e.g. ``allowed(QueryPooling) == ("max", "mean")``."""
    return tuple(str(v) for v in get_args(choice))
