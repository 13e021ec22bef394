"""contextsieve: choose which rules, references and tools go into each LLM request, and record why.

The entry point is :class:`Engine` (an agent with its sessions); :class:`Embedder` is the embedding
runner underneath. Everything a user builds or receives is importable from here. ``import
contextsieve`` is light: each name loads its module (and ONNX Runtime, numpy, Numba) on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

#: public name -> module that defines it (imported on first access)
_LAZY = {
    "Engine": "contextsieve.engine",
    "IndexReport": "contextsieve.engine",
    "Session": "contextsieve.session.session",
    "Message": "contextsieve.session.session",
    "StashSettings": "contextsieve.session.session",
    "OfferConfig": "contextsieve.session.session",
    "StashStore": "contextsieve.stash",
    "StashConfig": "contextsieve.stash",
    "NewSegment": "contextsieve.stash",
    "ContextSegment": "contextsieve.stash",
    "SegmentType": "contextsieve.stash",
    "StashedEntry": "contextsieve.selection.context",
    "Request": "contextsieve.session.assembly",
    "Agent": "contextsieve.agent.agent",
    "AgentSettings": "contextsieve.agent.settings",
    "McpServer": "contextsieve.agent.agent",
    "PRESETS": "contextsieve.agent.settings",
    "ChunkConfig": "contextsieve.selection.chunking",
    "IndexConfig": "contextsieve.retrieval.chunks",
    "Rule": "contextsieve.agent.items",
    "Reference": "contextsieve.agent.items",
    "Tool": "contextsieve.agent.items",
    "IncludeMode": "contextsieve.agent.items",
    "ItemKey": "contextsieve.agent.items",
    "ItemKind": "contextsieve.agent.items",
    "RequestContext": "contextsieve.selection.context",
    "ContextEntry": "contextsieve.selection.context",
    "Dropped": "contextsieve.selection.context",
    "Explanation": "contextsieve.session.explain",
    "TextEmbedder": "contextsieve.retrieval.embedding",
    "Embedder": "contextsieve.models.embedder",
    "load_agent": "contextsieve.agent.agentfile",
    "save_agent": "contextsieve.agent.agentfile",
    "example_agent_path": "contextsieve.agent.agentfile",
    "ContextSieveError": "contextsieve.errors",
    "InputError": "contextsieve.errors",
    "AgentFileError": "contextsieve.errors",
    "SessionFileError": "contextsieve.errors",
    "UnknownItemError": "contextsieve.errors",
    "SummarizerError": "contextsieve.errors",
    "EmbedderOutputError": "contextsieve.errors",
    "EmbeddingCacheError": "contextsieve.errors",
    "ModelError": "contextsieve.errors",
    "ModelCacheError": "contextsieve.errors",
    "MissingExtraError": "contextsieve.errors",
    "EventLoopError": "contextsieve.errors",
    "StashError": "contextsieve.errors",
    "StashModelError": "contextsieve.errors",
    "StashIntegrityError": "contextsieve.errors",
    "UnknownSegmentError": "contextsieve.errors",
}

__all__ = [
    "Engine",
    "IndexReport",
    "Session",
    "Message",
    "StashSettings",
    "OfferConfig",
    "StashStore",
    "StashConfig",
    "NewSegment",
    "ContextSegment",
    "SegmentType",
    "StashedEntry",
    "Request",
    "Agent",
    "AgentSettings",
    "McpServer",
    "PRESETS",
    "ChunkConfig",
    "IndexConfig",
    "Rule",
    "Reference",
    "Tool",
    "IncludeMode",
    "ItemKey",
    "ItemKind",
    "RequestContext",
    "ContextEntry",
    "Dropped",
    "Explanation",
    "TextEmbedder",
    "Embedder",
    "load_agent",
    "save_agent",
    "example_agent_path",
    "ContextSieveError",
    "InputError",
    "AgentFileError",
    "SessionFileError",
    "UnknownItemError",
    "SummarizerError",
    "EmbedderOutputError",
    "EmbeddingCacheError",
    "ModelError",
    "ModelCacheError",
    "MissingExtraError",
    "EventLoopError",
    "StashError",
    "StashModelError",
    "StashIntegrityError",
    "UnknownSegmentError",
    "__version__",
]

if TYPE_CHECKING:
    from contextsieve.agent.agent import Agent, McpServer
    from contextsieve.agent.agentfile import example_agent_path, load_agent, save_agent
    from contextsieve.agent.items import IncludeMode, ItemKey, ItemKind, Reference, Rule, Tool
    from contextsieve.agent.settings import PRESETS, AgentSettings
    from contextsieve.engine import Engine, IndexReport
    from contextsieve.errors import (
        AgentFileError,
        ContextSieveError,
        EmbedderOutputError,
        EmbeddingCacheError,
        EventLoopError,
        InputError,
        MissingExtraError,
        ModelCacheError,
        ModelError,
        SessionFileError,
        StashError,
        StashIntegrityError,
        StashModelError,
        SummarizerError,
        UnknownItemError,
        UnknownSegmentError,
    )
    from contextsieve.models.embedder import Embedder
    from contextsieve.retrieval.chunks import IndexConfig
    from contextsieve.retrieval.embedding import TextEmbedder
    from contextsieve.selection.chunking import ChunkConfig
    from contextsieve.selection.context import ContextEntry, Dropped, RequestContext, StashedEntry
    from contextsieve.session.assembly import Request
    from contextsieve.session.explain import Explanation
    from contextsieve.session.session import Message, OfferConfig, Session, StashSettings
    from contextsieve.stash import ContextSegment, NewSegment, SegmentType, StashConfig, StashStore


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'contextsieve' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
