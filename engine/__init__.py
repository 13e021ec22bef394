"""contextsieve: choose which rules, references and tools go into each LLM request, and record why.

The entry point is :class:`Engine` (an agent with its sessions); :class:`Embedder` is the embedding
runner underneath. Everything a user builds or receives is importable from here. ``import
contextsieve`` is light: each name loads its module (and ONNX Runtime, numpy, Numba) on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

import contextsieve.kernels.threads  # noqa: F401  (registers the at-fork hook: a forked child knows its parent's pool)

__version__ = "0.1.0"

#: public name -> module that defines it (imported on first access)
_LAZY = {
    # the entry points
    "Engine": "contextsieve.engine",
    "IndexReport": "contextsieve.engine",
    "Embedder": "contextsieve.models.embedder",
    "TextEmbedder": "contextsieve.retrieval.embedding",
    # agents and their items
    "Agent": "contextsieve.agent.agent",
    "AgentSettings": "contextsieve.agent.settings",
    "LlmSettings": "contextsieve.agent.settings",
    "McpServer": "contextsieve.agent.agent",
    "PRESETS": "contextsieve.agent.settings",
    "Rule": "contextsieve.agent.items",
    "Reference": "contextsieve.agent.items",
    "Tool": "contextsieve.agent.items",
    "IncludeMode": "contextsieve.agent.items",
    "ItemKey": "contextsieve.agent.items",
    "ItemKind": "contextsieve.agent.items",
    "load_agent": "contextsieve.agent.agentfile",
    "save_agent": "contextsieve.agent.agentfile",
    "example_agent_path": "contextsieve.agent.agentfile",
    # settings
    "ChunkConfig": "contextsieve.selection.chunking",
    "IndexConfig": "contextsieve.retrieval.chunks",
    "OfferConfig": "contextsieve.session.offer",
    "StashSettings": "contextsieve.session.stash_link",
    "StashConfig": "contextsieve.stash.config",
    "RankConfig": "contextsieve.stash.ranking",
    "SqliteConfig": "contextsieve.stash.sqlite",
    "RetrieveOptions": "contextsieve.stash.options",
    "SegmentFilter": "contextsieve.stash.options",
    # sessions and what they return
    "Session": "contextsieve.session.session",
    "Message": "contextsieve.session.messages",
    "Request": "contextsieve.session.assembly",
    "RequestContext": "contextsieve.selection.context",
    "ContextEntry": "contextsieve.selection.context",
    "StashedEntry": "contextsieve.selection.context",
    "Dropped": "contextsieve.selection.context",
    "Explanation": "contextsieve.session.explain",
    "ToolMatch": "contextsieve.session.requests",
    # the stash
    "StashStore": "contextsieve.stash.store",
    "NewSegment": "contextsieve.stash.segment",
    "ContextSegment": "contextsieve.stash.segment",
    "SegmentType": "contextsieve.stash.segment",
    "StashResult": "contextsieve.stash.results",
    "Retrieved": "contextsieve.stash.results",
    "RetrieveTrace": "contextsieve.stash.results",
    "MergeResult": "contextsieve.stash.results",
    # errors and warnings (all in contextsieve.errors)
    "ContextSieveError": "contextsieve.errors",
    "ContextSieveWarning": "contextsieve.errors",
    "ModelError": "contextsieve.errors",
    "UnknownModelError": "contextsieve.errors",
    "ModelFilesNotFoundError": "contextsieve.errors",
    "ModelCacheError": "contextsieve.errors",
    "InputError": "contextsieve.errors",
    "MissingExtraError": "contextsieve.errors",
    "EventLoopError": "contextsieve.errors",
    "AgentFileError": "contextsieve.errors",
    "SessionFileError": "contextsieve.errors",
    "AgentRegistryError": "contextsieve.errors",
    "UnknownItemError": "contextsieve.errors",
    "SummarizerError": "contextsieve.errors",
    "EmbedderOutputError": "contextsieve.errors",
    "EmbeddingCacheError": "contextsieve.errors",
    "StashError": "contextsieve.errors",
    "StashModelError": "contextsieve.errors",
    "StashIntegrityError": "contextsieve.errors",
    "StashNotFoundError": "contextsieve.errors",
    "UnknownSegmentError": "contextsieve.errors",
    "ToolArgumentError": "contextsieve.errors",
    "ToolChoiceError": "contextsieve.errors",
    "AgentFileWarning": "contextsieve.errors",
    "AgentRegistryWarning": "contextsieve.errors",
    "CacheIntegrityWarning": "contextsieve.errors",
    "GraphFileWarning": "contextsieve.errors",
    "CacheFolderWarning": "contextsieve.errors",
    "KernelThreadsWarning": "contextsieve.errors",
    "StashIntegrityWarning": "contextsieve.errors",
    "UsageLogWarning": "contextsieve.errors",
    "EvaluationWarning": "contextsieve.errors",
}

__all__ = [
    "Engine",
    "IndexReport",
    "Embedder",
    "TextEmbedder",
    "Agent",
    "AgentSettings",
    "LlmSettings",
    "McpServer",
    "PRESETS",
    "Rule",
    "Reference",
    "Tool",
    "IncludeMode",
    "ItemKey",
    "ItemKind",
    "load_agent",
    "save_agent",
    "example_agent_path",
    "ChunkConfig",
    "IndexConfig",
    "OfferConfig",
    "StashSettings",
    "StashConfig",
    "RankConfig",
    "SqliteConfig",
    "RetrieveOptions",
    "SegmentFilter",
    "Session",
    "Message",
    "Request",
    "RequestContext",
    "ContextEntry",
    "StashedEntry",
    "Dropped",
    "Explanation",
    "ToolMatch",
    "StashStore",
    "NewSegment",
    "ContextSegment",
    "SegmentType",
    "StashResult",
    "Retrieved",
    "RetrieveTrace",
    "MergeResult",
    "ContextSieveError",
    "ContextSieveWarning",
    "ModelError",
    "UnknownModelError",
    "ModelFilesNotFoundError",
    "ModelCacheError",
    "InputError",
    "MissingExtraError",
    "EventLoopError",
    "AgentFileError",
    "SessionFileError",
    "AgentRegistryError",
    "UnknownItemError",
    "SummarizerError",
    "EmbedderOutputError",
    "EmbeddingCacheError",
    "StashError",
    "StashModelError",
    "StashIntegrityError",
    "StashNotFoundError",
    "UnknownSegmentError",
    "ToolArgumentError",
    "ToolChoiceError",
    "AgentFileWarning",
    "AgentRegistryWarning",
    "CacheIntegrityWarning",
    "GraphFileWarning",
    "CacheFolderWarning",
    "KernelThreadsWarning",
    "StashIntegrityWarning",
    "UsageLogWarning",
    "EvaluationWarning",
    "__version__",
]

if TYPE_CHECKING:
    from contextsieve.agent.agent import Agent, McpServer
    from contextsieve.agent.agentfile import example_agent_path, load_agent, save_agent
    from contextsieve.agent.items import IncludeMode, ItemKey, ItemKind, Reference, Rule, Tool
    from contextsieve.agent.settings import PRESETS, AgentSettings, LlmSettings
    from contextsieve.engine import Engine, IndexReport
    from contextsieve.errors import (
        AgentFileError,
        AgentFileWarning,
        AgentRegistryError,
        AgentRegistryWarning,
        CacheFolderWarning,
        CacheIntegrityWarning,
        ContextSieveError,
        ContextSieveWarning,
        EmbedderOutputError,
        EmbeddingCacheError,
        EvaluationWarning,
        EventLoopError,
        GraphFileWarning,
        InputError,
        KernelThreadsWarning,
        MissingExtraError,
        ModelCacheError,
        ModelError,
        ModelFilesNotFoundError,
        SessionFileError,
        StashError,
        StashIntegrityError,
        StashIntegrityWarning,
        StashModelError,
        StashNotFoundError,
        SummarizerError,
        ToolArgumentError,
        ToolChoiceError,
        UnknownItemError,
        UnknownModelError,
        UnknownSegmentError,
        UsageLogWarning,
    )
    from contextsieve.models.embedder import Embedder
    from contextsieve.retrieval.chunks import IndexConfig
    from contextsieve.retrieval.embedding import TextEmbedder
    from contextsieve.selection.chunking import ChunkConfig
    from contextsieve.selection.context import ContextEntry, Dropped, RequestContext, StashedEntry
    from contextsieve.session.assembly import Request
    from contextsieve.session.explain import Explanation
    from contextsieve.session.messages import Message
    from contextsieve.session.offer import OfferConfig
    from contextsieve.session.requests import ToolMatch
    from contextsieve.session.session import Session
    from contextsieve.session.stash_link import StashSettings
    from contextsieve.stash.config import StashConfig
    from contextsieve.stash.options import RetrieveOptions, SegmentFilter
    from contextsieve.stash.ranking import RankConfig
    from contextsieve.stash.results import MergeResult, Retrieved, RetrieveTrace, StashResult
    from contextsieve.stash.segment import ContextSegment, NewSegment, SegmentType
    from contextsieve.stash.sqlite import SqliteConfig
    from contextsieve.stash.store import StashStore


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'contextsieve' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
