"""The stash store (seed 004): stash pruned context segments, retrieve them by meaning, merge them back.

Entry point: :meth:`StashStore.open` (a SQLite file, or a ``postgresql://`` URI with the
``postgres`` extra).
"""

from contextsieve.retrieval.graphfile import GraphFileWarning
from contextsieve.stash.config import StashConfig
from contextsieve.stash.options import DEFAULT_SESSION, RetrieveOptions, SegmentFilter
from contextsieve.stash.ranking import RankConfig
from contextsieve.stash.results import Candidate, MergeResult, Retrieved, RetrieveTrace, StashResult
from contextsieve.stash.segment import ContextSegment, NewSegment, SegmentType
from contextsieve.stash.sqlite import SqliteConfig, StashIntegrityWarning
from contextsieve.stash.store import StashStore

__all__ = [
    "StashStore",
    "StashConfig",
    "RankConfig",
    "SqliteConfig",
    "StashIntegrityWarning",
    "GraphFileWarning",
    "ContextSegment",
    "NewSegment",
    "SegmentType",
    "SegmentFilter",
    "RetrieveOptions",
    "StashResult",
    "Retrieved",
    "RetrieveTrace",
    "Candidate",
    "MergeResult",
    "DEFAULT_SESSION",
]
