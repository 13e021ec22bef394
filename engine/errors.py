"""The one exception hierarchy of contextsieve, and its warnings.

Every error the library raises on purpose derives from :class:`ContextSieveError`, so callers can
catch the library's failures with one ``except`` clause while programming errors (``TypeError`` from
a wrong call, ``KeyboardInterrupt``) pass through. Where an error wraps another, the cause is kept
with ``raise ... from``. The warnings (``...Warning``, subclasses of :class:`UserWarning`) say what
the library worked around: a typo in an agent file, a cache row or stored vectors that failed their
checksum, a saved graph that could not be used.
"""

from __future__ import annotations

import reprlib

__all__ = [
    "ContextSieveError",
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
    "check_text",
    "brief",
    "AgentFileWarning",
    "ContextSieveWarning",
    "AgentRegistryWarning",
    "CacheIntegrityWarning",
    "GraphFileWarning",
    "CacheFolderWarning",
    "KernelThreadsWarning",
    "StashIntegrityWarning",
    "UsageLogWarning",
]


class ContextSieveError(Exception):
    """Base class of every error raised by contextsieve."""


class ModelError(ContextSieveError):
    """A model could not be found, built, loaded or run."""


class UnknownModelError(ModelError, ValueError):
    """A model name is not in the registry; the message lists the known names."""


class ModelFilesNotFoundError(ModelError, FileNotFoundError):
    """The weights, configs or tokenizer of a model are missing; the message says how to get them."""


class ModelCacheError(ModelError):
    """A cached model file failed verification (tampered, truncated or from another builder)."""


class InputError(ContextSieveError, ValueError):
    """Input of the wrong type or shape was passed to a public function."""


class ToolArgumentError(InputError):
    """A tool call's argument a model can fix (wrong type, out of range, missing, unknown); the message
    says how. Every adapter of :mod:`contextsieve.session.agent_tools` returns it to the model as an error
    result (MCP ``isError``), not as a protocol error."""


class MissingExtraError(ContextSieveError, ImportError):
    """An optional dependency is not installed; the message names the extra that installs it."""


class EventLoopError(ContextSieveError, RuntimeError):
    """A synchronous call that does I/O through its own event loop was made on a thread that is
    running one (inside ``asyncio.run``); the message names the ``async`` method to await instead."""


class AgentFileError(ContextSieveError):
    """An agent file (or legacy agent directory) is malformed; the message names the file and field."""


class SessionFileError(ContextSieveError):
    """A saved session file is missing, malformed, or names items or settings the agent does not have."""


class AgentRegistryError(ContextSieveError):
    """The agent registry (``agents.sqlite`` in the data folder: which identity each agent file has, and its
    tools' names) cannot be opened, read or written; the message names the file."""


class UnknownItemError(ContextSieveError, KeyError):
    """An item key (or server name) names nothing the agent has."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0])


class SummarizerError(ContextSieveError):
    """The summarizer callable failed or returned the wrong shape (the cause is kept)."""


class EmbeddingCacheError(ContextSieveError):
    """The embedding cache database cannot be opened or read (corrupt, locked past its timeout, or not
    a database); the message names the file. Deleting it is safe: vectors are embedded again."""


class EmbedderOutputError(ContextSieveError):
    """An embedder returned vectors of the wrong shape, or not finite unit vectors (nothing was stored)."""


class StashError(ContextSieveError):
    """The stash store cannot be opened, read or written (not a stash database, corrupt, locked past
    its timeout, or the PostgreSQL server failed); the message names the store and the cause is kept."""


class StashModelError(StashError):
    """The stash store's vectors were made by another embedding model than the one it is opened with;
    the message names both and the command that re-embeds the store (``contextsieve stash rebuild``)."""


class StashIntegrityError(StashError):
    """A stored segment failed its check on read (its text no longer matches its sha256, or its bytes
    are not valid text): the message names the segment and the store; nothing of it is returned."""


class StashNotFoundError(StashError):
    """No stash store is at the location a command that only reads named (``StashStore.open(...,
    create=False)``: ``contextsieve stash stats``, ``export``, ``cleanup``, ``rebuild``, the source of
    ``migrate``, ``inspect --stash``): a SQLite path with no file there (or an empty database), or a
    PostgreSQL database without the stash's tables. The message names the location; nothing was created."""


class UnknownSegmentError(ContextSieveError, KeyError):
    """A segment id names no segment of the stash store visible to the caller (the message lists them)."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0])


class ToolChoiceError(ContextSieveError):
    """Choosing the tools of a model call failed in a framework integration made with
    ``fail_open=False`` (by default the call gets every tool it was given instead); the message names
    the integration and the cause, which is kept (``__cause__``: the embedder's own exception, an
    :class:`EmbedderOutputError`, an :class:`InputError` naming a bad text...)."""


def check_text(text: str, what: str) -> str:
    """``text`` itself if it can be encoded as UTF-8; else :class:`InputError` naming ``what`` and the
    position. Lone surrogates (``"\\ud800"``, e.g. from JSON that split a pair) are refused wherever text
    enters (messages, tool results, item texts, texts to embed) rather than replaced, so no text is
    changed silently."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise InputError(
            f"{what} holds a lone surrogate {text[e.start]!r} at character {e.start}; it is not valid Unicode text"
        ) from None
    return text


def brief(value: object) -> str:
    """A short repr of any value for an error message, however large or self-similar (a YAML alias
    bomb's lists are shared, so ``repr`` of the whole would be exponential)."""
    r = reprlib.Repr()
    r.maxlevel, r.maxstring, r.maxother, r.maxlist, r.maxdict = 2, 60, 60, 4, 4
    return r.repr(value)


class ContextSieveWarning(UserWarning):
    """The base of contextsieve's own warnings (``warnings.filterwarnings("ignore", category=...)`` takes
    it for all of them); the command line prints each as one line, ``contextsieve: warning: ...``."""


class AgentFileWarning(ContextSieveWarning):
    """An agent file loaded, but holds something nobody reads: a key that neither contextsieve nor the
    reference format defines (a typo such as ``rulez:`` or ``settings.contextTopn``), or was given a tools
    catalog listing a server the file does not declare (its tools are offered by none). The message names
    the file, the place and the key's likely meaning ("did you mean ..."); the key is kept in the file
    (saves write it back) but has no effect. Issued with :func:`warnings.warn` once per problem at load,
    and kept on the agent (:attr:`contextsieve.Agent.load_warnings`)."""


class EvaluationWarning(ContextSieveWarning):
    """A measure of selection (:func:`contextsieve.evaluation.runner.evaluate`, ``contextsieve eval``) will
    read better than it is: tasks of one message in different folds find each other's tools recorded in
    their history. The message names the tasks."""


class AgentRegistryWarning(ContextSieveWarning):
    """An agent's identity could not be looked up or kept in its registry (the data folder cannot be
    written, say): the agent goes on under the identity of its path for this process, and its tools'
    names are kept in memory only. The message says why and what it means for the agent's data."""


class StashIntegrityWarning(ContextSieveWarning):
    """Stored vectors failed their checksum (changed on disk); those segments are left out of dense
    search until ``contextsieve stash rebuild`` re-embeds them."""


class GraphFileWarning(ContextSieveWarning):
    """A saved HNSW graph could not be used or written; the store still works (the graph is built
    in memory instead), only opening it again is slower."""


class CacheFolderWarning(ContextSieveWarning):
    """The cache folder (``$CONTEXTSIEVE_CACHE``, ``Engine(cache_dir=...)``) cannot be written, as on a
    read-only root file system: a model graph built there is used from memory in this process and built
    again by the next, and an embedding cache that cannot be opened is done without (vectors are kept in
    memory). The message names the folder and how to give the cache a writable one."""


class KernelThreadsWarning(ContextSieveWarning):
    """This process was forked from one whose scoring kernels had started GNU OpenMP's threads, which a
    forked child cannot use (Numba terminates a child that runs a parallel kernel then): its kernels
    run on numpy instead (slower on large stores). Issued once per process; worker processes started
    with multiprocessing's ``"spawn"`` or ``"forkserver"`` method, or forked before the first search,
    keep the Numba kernels."""


class UsageLogWarning(ContextSieveWarning):
    """Records of an agent's usage log (its learned history, ``history.sqlite``) are damaged (a vector
    of the wrong length or not finite, a time that is not a number, text that is not UTF-8): they are
    left out, and the rest of the history stays in use. Issued once per log and kind."""


class CacheIntegrityWarning(ContextSieveWarning):
    """Rows of the embedding cache failed verification and are being re-embedded."""
