"""The embedding runner: text in, unit float32 vectors out, through one ONNX Runtime graph."""

from __future__ import annotations

import os
import threading
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from contextsieve.errors import CacheFolderWarning, InputError, ModelError, ModelFilesNotFoundError, check_text
from contextsieve.kernels.pooling import mean_pool_normalize
from contextsieve.models.cache import CachedModel, ModelCache
from contextsieve.models.cpu import FreeCores, int8_weight_type
from contextsieve.models.registry import (
    BUILDER_VERSION,
    DEFAULT_MODEL,
    Variant,
    get_model,
    model_family,
    resolve_folder,
)
from contextsieve.models.runtime import onnxruntime
from contextsieve.models.tokenizer import Batch, TextTokenizer
from contextsieve.models.variants import AUTO, VariantChoice, choose_variant, requested_variant
from contextsieve.models.weights import read_bert_config, sha256_file
from contextsieve.progress import note

__all__ = [
    "Embedder",
    "ModelInfo",
    "ModelPlan",
    "plan_model",
    "graph_entry",
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_BATCH_TOKENS",
    "QUERY_TOKENS",
    "default_threads",
    "locate_model",
]

#: Most texts in one ONNX Runtime call.
DEFAULT_BATCH_SIZE = 64
#: Calls of at most this many padded tokens (rows x width: a sentence or a few) run on the query graph
#: when ``variant="auto"`` chose a different one for queries than for batches.
QUERY_TOKENS = 64
#: What one more ONNX Runtime call costs, in padded tokens: the fixed part of a call (~0.7 ms of a
#: one-sentence query) over the time per token (~0.027 ms), both from the one-sentence and batch timings
#: of ``benchmarks.speed.task_cost`` / the variant table. Batches are cut where a second call is cheaper than
#: padding short texts to a long one's width (see :meth:`TextTokenizer.batches`).
CALL_COST_TOKENS = 24
#: Most padded tokens (rows x width) in one call: small enough that a batch's activations stay in a
#: 1 MiB L2 cache (chosen with ``benchmarks.speed.compare_embedders``).
DEFAULT_BATCH_TOKENS = 512


def default_threads() -> int:
    """CPU cores this process may use (its affinity mask), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


@dataclass(frozen=True)
class OrtNodeArg(Protocol):
    """An input or output of an ONNX Runtime session."""

    name: str
    shape: Sequence[int | str | None]


class OrtSession(Protocol):
    """What contextsieve uses of an ``onnxruntime.InferenceSession``."""

    def get_inputs(self) -> Sequence[OrtNodeArg]: ...
    def get_outputs(self) -> Sequence[OrtNodeArg]: ...
    def run(self, output_names: Sequence[str] | None, input_feed: dict[str, np.ndarray]) -> list[np.ndarray]: ...


@dataclass(frozen=True)
class ModelInfo:
    """What an :class:`Embedder` runs and where it came from.

    Attributes:
        model_id: stable identity of the vectors (name, variant, weights hash, builder version); two
            embedders with the same ``model_id`` produce interchangeable vectors. Embedding caches key on it.
        name: model name, or the folder/file it was loaded from.
        variant: the graph batches run on: ``"fp32"``, ``"int8"``, ``"int8w7"`` or ``"custom"`` (a
            user-supplied graph).
        dim: vector width.
        max_length: truncation length in tokens.
        onnx_path: the graph file in use (in the cache, or the user's file).
        built: True when this process built the graph (a cache miss), False when it was loaded.
        load_seconds: wall time of the constructor (build or load, tokenizer, session).
        query_variant: the graph short calls (at most :data:`QUERY_TOKENS` padded tokens) run on; the
            same as ``variant`` unless ``variant="auto"`` measured another one faster for queries.
        choice: the choice ``variant="auto"`` ran (measured, or predicted from the CPU's features:
            :attr:`VariantChoice.measured`); ``None`` for an explicit variant.
    """

    model_id: str
    name: str
    variant: str
    dim: int
    max_length: int
    onnx_path: Path | None
    built: bool
    load_seconds: float
    query_variant: str = ""
    choice: VariantChoice | None = None

    @property
    def family(self) -> str:
        """Name and weights: vectors of one family are interchangeable (every variant passes the
        fidelity bars), so embedding caches and stores key on it (see :func:`model_family`)."""
        return model_family(self.model_id)


class Embedder:
    """Embeds texts with a sentence-transformers model on ONNX Runtime (CPU).

    The graph is built from the model's weights once, then loaded from the cache (verified by sha256).

    Args:
        model: a known model name (see :func:`contextsieve.models.registry.list_models`) or the path of
            a sentence-transformers BERT folder. Default ``"all-MiniLM-L6-v2"``.
        variant: ``"auto"`` (default, or ``$CONTEXTSIEVE_VARIANT``): the fastest graph on this CPU
            among those that pass the fidelity bars (cosine >= 0.99 against sentence-transformers on
            every golden text, mean >= 0.998) as ``contextsieve build`` measured it, cached per machine;
            before it has measured, the variant the CPU's features predict (no timing before a first
            answer; see :mod:`contextsieve.models.variants`). Queries and batches may get different graphs.
            ``"fp32"`` matches sentence-transformers to 1e-5; ``"int8"`` (about twice as fast where the
            CPU has VNNI) and ``"int8w7"`` (7-bit weights) are held to the bars in the tests.
        threads: CPU cores to use at most (default: all this process may use): the intra-op threads of
            the ONNX Runtime session calls run on. With more than one, the threads spin while a call
            runs (a short query would otherwise wait for them to wake at each of its ~280 nodes) and
            stop spinning when it returns, so an idle embedder takes no CPU.
        batch_size: most texts per ONNX Runtime call (default 64).
        batch_tokens: most padded tokens per call (default 512).
        cache_dir: where built graphs live (default ``$CONTEXTSIEVE_CACHE`` or ``~/.cache/contextsieve``).
        rebuild: build the graph again even if the cache has it (for example after a
            :class:`~contextsieve.errors.ModelCacheError`), and replace the cached file.
        adapt_threads: run each call on no more threads than there are cores other processes leave
            free (default ``True``; :class:`~contextsieve.models.cpu.FreeCores`, Linux): with one of two
            cores busy, two threads are slower than one. A session of fewer threads is made the first
            time it is needed and kept (about 25 MB more for int8, 50 MB for fp32). ``False``: always
            ``threads``.
    """

    _model: bytes | Path  # the graph of batch calls, and of short calls (the same unless auto chose two)
    _query_model: bytes | Path

    def __init__(
        self,
        model: str | os.PathLike[str] = DEFAULT_MODEL,
        *,
        variant: Variant | str | None = None,
        threads: int | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
        batch_tokens: int = DEFAULT_BATCH_TOKENS,
        cache_dir: str | os.PathLike[str] | None = None,
        rebuild: bool = False,
        adapt_threads: bool = True,
    ) -> None:
        t0 = time.perf_counter()
        plan = plan_model(model, variant=variant, threads=threads, cache_dir=cache_dir)
        folder, name, weights_sha = plan.folder, plan.name, plan.weights_sha
        batch_v, query_v = plan.variant, plan.query_variant
        cfg = read_bert_config(folder)
        cache = ModelCache(Path(cache_dir) if cache_dir is not None else None)
        cached = _cached_graph(cache, folder, name, weights_sha, batch_v, rebuild)
        query_cached = (
            cached if query_v is batch_v else _cached_graph(cache, folder, name, weights_sha, query_v, rebuild)
        )
        tokenizer = TextTokenizer.from_file(folder / "tokenizer.json", cfg.max_seq_length)
        model_id = plan.model_id
        self._init(
            cached.model,
            tokenizer,
            threads=threads,
            batch_size=batch_size,
            batch_tokens=batch_tokens,
            adapt_threads=adapt_threads,
        )
        if query_cached is not cached:
            self._query_model = query_cached.model
            self._query_session = _new_session(query_cached.model, self.threads)
            self._by_threads[self.threads] = (self._session, self._query_session)
        self.info = ModelInfo(
            model_id,
            name,
            batch_v.value,
            self.dim,
            cfg.max_seq_length,
            cached.path,
            cached.built or query_cached.built,
            time.perf_counter() - t0,
            query_variant=query_v.value,
            choice=plan.choice,
        )

    @classmethod
    def from_onnx(
        cls,
        onnx_path: str | os.PathLike[str],
        tokenizer_path: str | os.PathLike[str],
        *,
        max_length: int = 256,
        threads: int | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
        batch_tokens: int = DEFAULT_BATCH_TOKENS,
        adapt_threads: bool = True,
    ) -> "Embedder":
        """Run a user-supplied graph: its inputs and outputs are read from the graph, not assumed.

        The graph must take ``input_ids`` (and optionally ``attention_mask``, ``token_type_ids``) and
        return either sentence vectors ``[batch, dim]`` (used as given, then L2-normalised) or token
        states ``[batch, seq, dim]`` (masked-mean pooled and L2-normalised here).
        """
        t0 = time.perf_counter()
        onnx_path = Path(onnx_path)
        if not onnx_path.is_file():  # missing, a folder, or a FIFO (whose read would block)
            raise ModelFilesNotFoundError(f"missing ONNX file {onnx_path} (or not a regular file)")
        sha = sha256_file(onnx_path)
        self = cls.__new__(cls)
        tokenizer = TextTokenizer.from_file(Path(tokenizer_path), max_length)
        self._init(
            onnx_path,
            tokenizer,
            threads=threads,
            batch_size=batch_size,
            batch_tokens=batch_tokens,
            adapt_threads=adapt_threads,
        )
        model_id = f"custom/{sha[:16]}/{max_length}"
        self.info = ModelInfo(
            model_id, str(onnx_path), "custom", self.dim, max_length, onnx_path, False, time.perf_counter() - t0
        )
        return self

    # -- setup ------------------------------------------------------------------------------------

    def _init(
        self,
        model: bytes | Path,
        tokenizer: TextTokenizer,
        *,
        threads: int | None,
        batch_size: int,
        batch_tokens: int,
        adapt_threads: bool,
    ) -> None:
        _check_threads(threads)
        if not isinstance(adapt_threads, bool):
            raise InputError(f"adapt_threads must be True or False, got {adapt_threads!r}")
        self.adapt_threads = adapt_threads
        if not isinstance(batch_size, int) or batch_size < 1 or not isinstance(batch_tokens, int) or batch_tokens < 1:
            raise InputError(f"batch_size and batch_tokens must be positive ints, got {batch_size!r}, {batch_tokens!r}")
        self.threads = threads or default_threads()
        self.batch_size = batch_size
        self.batch_tokens = batch_tokens
        self.tokenizer = tokenizer
        # One session for every call while the cores are free: another (say, single-threaded for short
        # queries) would hold its own copy of the weights and its own activation arena. A session of
        # fewer threads is made only once other processes take cores (see _sessions_now).
        self._model = self._query_model = model
        first = self._session = self._query_session = _new_session(model, self.threads)
        self._by_threads: dict[int, tuple[OrtSession, OrtSession]] = {self.threads: (first, first)}
        self._free_cores: FreeCores | None = None
        if self.threads > 1 and adapt_threads:
            try:
                cpus = os.sched_getaffinity(0)
            except AttributeError:  # not on Linux: no per-CPU counts to read
                cpus = set()
            if len(cpus) >= self.threads:
                self._free_cores = FreeCores(cpus)
        self._sessions_lock = threading.Lock()
        names = {i.name: i for i in first.get_inputs()}
        if "input_ids" not in names:
            raise ModelError(f"the graph has no input named 'input_ids' (inputs: {sorted(names)})")
        self._feeds = [n for n in ("input_ids", "attention_mask", "token_type_ids") if n in names]
        unknown = set(names) - set(self._feeds)
        if unknown:
            raise ModelError(f"the graph needs inputs contextsieve cannot feed: {sorted(unknown)}")
        outputs = first.get_outputs()
        by_name = {o.name: o for o in outputs}
        out = (
            by_name.get("sentence_embedding")
            or next((o for o in outputs if len(o.shape) == 2), None)
            or next((o for o in outputs if len(o.shape) == 3), None)
        )
        if out is None:
            raise ModelError(
                "the graph has no [batch, dim] or [batch, seq, dim] output (outputs: "
                f"{[(o.name, o.shape) for o in outputs]})"
            )
        self._output = out.name
        self._token_output = len(out.shape) == 3
        # our graphs end in L2 normalisation; a user's sentence output may not, so normalise it here
        self._renormalize = out.name != "sentence_embedding"
        dim = out.shape[-1]
        if not isinstance(dim, int):  # symbolic: ask the graph with one tiny batch
            dim = int(self._run(first, next(self.tokenizer.batches(["x"], 1))).shape[1])
        self.dim = int(dim)

    # -- running ----------------------------------------------------------------------------------

    def _run(self, session: OrtSession, batch: Batch) -> np.ndarray:
        feed = {
            "input_ids": batch.input_ids,
            "attention_mask": batch.attention_mask,
            "token_type_ids": np.zeros_like(batch.input_ids),
        }
        out = session.run([self._output], {k: feed[k] for k in self._feeds})[0]
        if self._token_output:
            return mean_pool_normalize(out, batch.attention_mask)
        out = np.asarray(out, dtype=np.float32)
        if self._renormalize:
            out = out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
        return out

    def embed(self, texts: Sequence[str], *, show_progress: bool = False) -> np.ndarray:
        """Embed ``texts``.

        Args:
            texts: a list or tuple of strings (a bare ``str`` is refused: wrap it in a list). Empty or
                whitespace-only strings are fine (they embed the special tokens alone); text past the
                model's window (256 tokens for MiniLM) is cut like sentence-transformers does.
            show_progress: show a progress bar (tqdm) over batches.

        Returns:
            float32 array ``[len(texts), dim]``, unit rows, in input order.
        """
        _check_texts(texts)
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        batches = list(self.tokenizer.batches(texts, self.batch_size, self.batch_tokens, CALL_COST_TOKENS))
        bar = None
        if show_progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(texts), desc="embedding", unit="text")

        try:
            for b in batches:  # the free cores looked at per call of the model (a long embed sees load change)
                batch_session, query_session = self._sessions_now()
                session = query_session if b.input_ids.size <= QUERY_TOKENS else batch_session
                out[b.index] = self._run(session, b)
                if bar is not None:
                    bar.update(len(b.index))
        finally:
            if bar is not None:
                bar.close()
        if not np.isfinite(out).all():
            bad = np.flatnonzero(~np.isfinite(out).all(axis=1))[:5].tolist()
            raise ModelError(f"the model produced non-finite vectors for texts at {bad}")
        return out

    def _sessions_now(self) -> tuple[OrtSession, OrtSession]:
        """The (batch, query) sessions for a call now: of :attr:`threads` threads while the cores are
        free, else of as many threads as other processes leave free (:class:`FreeCores`; made on first
        need, kept). Two threads on two cores one of which another process holds run *slower* than one
        (a parallel section waits for the thread that shares a core, and spinning threads fight the
        other process), so a call never uses more threads than there are free cores."""
        if self._free_cores is None:
            return self._session, self._query_session
        n = min(self.threads, self._free_cores())
        found = self._by_threads.get(n)
        if found is not None:
            return found
        with self._sessions_lock:
            found = self._by_threads.get(n)
            if found is None:
                batch = _new_session(self._model, n)
                query = batch if self._query_model is self._model else _new_session(self._query_model, n)
                found = self._by_threads[n] = (batch, query)
        return found

    @property
    def model_id(self) -> str:
        """``info.model_id``: the identity of this embedder's vectors (see :class:`ModelInfo`)."""
        return self.info.model_id

    def count_tokens(self, texts: Sequence[str], *, truncate: bool = False) -> list[int]:
        """Model tokens per text, special tokens included (full length unless ``truncate``)."""
        _check_texts(texts)
        return self.tokenizer.count_tokens(texts, truncate=truncate)

    def close(self) -> None:
        """Nothing to release early: the session's threads sleep between calls and end with the embedder.
        Kept so code written for earlier versions (which had a worker pool) still runs."""

    def __repr__(self) -> str:
        return f"Embedder({self.info.name!r}, variant={self.info.variant!r}, dim={self.dim}, threads={self.threads})"


@dataclass(frozen=True)
class ModelPlan:
    """What an :class:`Embedder` of these arguments will run, known without building or loading a
    graph (:func:`plan_model`): enough to name its vectors before the model is loaded.

    Attributes:
        folder, name: the model's files and display name. variant, query_variant: the graphs batches
            and short calls run on. choice: what ``variant="auto"`` chose (``None`` for an explicit
            variant). weights_sha: sha256 of the weights. model_id: as :attr:`ModelInfo.model_id`.
    """

    folder: Path
    name: str
    variant: Variant
    query_variant: Variant
    choice: VariantChoice | None
    weights_sha: str
    model_id: str


def plan_model(
    model: str | os.PathLike[str] = DEFAULT_MODEL,
    *,
    variant: Variant | str | None = None,
    threads: int | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
) -> ModelPlan:
    """The :class:`ModelPlan` of ``Embedder(model, variant=..., threads=..., cache_dir=...)``: the
    variant choice (cached or predicted: never measured here) and the weights' hash (memoised in the
    cache), in well under a second; nothing is built. Errors as :class:`Embedder`'s."""
    _check_threads(threads)
    folder, name, _ = locate_model(model)
    requested = requested_variant(variant)
    choice: VariantChoice | None = None
    if requested == AUTO:
        choice = choose_variant(model, cache_dir=cache_dir, threads=threads, predict=True)
        batch_v, query_v = Variant(choice.batch), Variant(choice.query)
    else:
        batch_v = query_v = Variant(requested)
    cache = ModelCache(Path(cache_dir) if cache_dir is not None else None)
    weights_sha = cache.weights_sha256(folder / "model.safetensors")
    model_id = f"{Path(name).name}/{batch_v.value}/{weights_sha[:16]}/b{BUILDER_VERSION}"
    return ModelPlan(folder, name, batch_v, query_v, choice, weights_sha, model_id)


def graph_entry(cache: ModelCache, name: str, weights_sha: str, variant: Variant) -> Path:
    """The cache entry of ``variant``'s sentence graph of model ``name`` with these weights (its build
    lock is ``<entry>.lock``): keyed by the weights, the builder version, the variant and, for int8
    graphs with unsigned weights (CPUs without VNNI), the weight type."""
    key = {"weights": weights_sha, "builder": BUILDER_VERSION, "variant": variant.value, "output": "sentence"}
    if variant is Variant.INT8 and int8_weight_type() == "u8":  # the same vectors from another graph file
        key["int8_weights"] = "u8"
    return cache.entry_path(f"{Path(name).name}-{variant.value}-sentence", key)


def _cached_graph(
    cache: ModelCache, folder: Path, name: str, weights_sha: str, variant: Variant, rebuild: bool
) -> CachedModel:
    """The verified graph of ``variant`` from the cache, built (under the cache's build lock) if missing."""
    weight_type = int8_weight_type() if variant is Variant.INT8 else "f32"
    entry = graph_entry(cache, name, weights_sha, variant)
    cached = None if rebuild else cache.load(entry)
    if cached is not None:
        return cached
    with cache.build_lock(entry):
        cached = None if rebuild else cache.load(entry)  # built by another process meanwhile?
        if cached is not None:
            return cached
        from contextsieve.models.build import build_onnx  # imports onnx: only when building

        how = "once per machine and version" if cache.writable() else "in memory: the model cache may not be written"
        note(f"building the {Path(name).name} {variant.value} graph ({how}, about a second)")
        t_build = time.perf_counter()
        data = build_onnx(folder, variant, weight_type=weight_type if variant is Variant.INT8 else "s8")
        try:
            stored = cache.store(
                entry,
                data,
                {"weights_sha256": weights_sha, "builder": BUILDER_VERSION, "variant": variant.value, "model": name},
            )
        except OSError as e:  # a read-only or full cache folder: the graph is still good, in memory
            warnings.warn(
                f"cannot keep the built {Path(name).name} {variant.value} graph in the model cache {cache.root} "
                f"({entry.parent}: {e.strerror or e}): it is used from memory in this process (about 30 MB more) "
                "and built again by the next one; set $CONTEXTSIEVE_CACHE to a folder this user may write, or run "
                f"`contextsieve build` once as a user who may write {entry.parent}",
                CacheFolderWarning,
                stacklevel=3,
            )
            return CachedModel(None, weights_sha, True, time.perf_counter() - t_build, data=data)
        del data  # the session reads the file: no second copy of the graph in memory
        return CachedModel(stored, weights_sha, built=True, build_seconds=time.perf_counter() - t_build)


def _check_threads(threads: object) -> None:
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise InputError(f"threads must be a positive int, got {threads!r}")


def _new_session(model: bytes | Path, threads: int) -> OrtSession:
    """An ONNX Runtime CPU session of ``model`` (serialized bytes or a file) with ``threads`` intra-op
    threads (see :class:`Embedder`)."""
    ort = onnxruntime()

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if threads > 1:  # spin within a call, never after it (an idle process must not hold a core)
        so.add_session_config_entry("session.intra_op.allow_spinning", "1")
        so.add_session_config_entry("session.force_spinning_stop", "1")
    else:
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    so.log_severity_level = 3
    try:
        source = str(model) if isinstance(model, Path) else model
        return ort.InferenceSession(source, so, providers=["CPUExecutionProvider"])
    except Exception as e:  # ORT raises its own Fail/InvalidGraph types
        raise ModelError(f"ONNX Runtime cannot load the graph: {e}") from e


def locate_model(model: str | os.PathLike[str]) -> tuple[Path, str, Variant]:
    """(folder, display name, default variant) for a registry name or an existing folder path.

    A string is a path only if it names an existing folder (or a ``PathLike`` is given), so hub-style
    names such as ``"sentence-transformers/all-MiniLM-L6-v2"`` resolve through the registry.
    """
    if isinstance(model, os.PathLike) or (isinstance(model, str) and Path(model).is_dir()):
        folder = Path(model)
        if not (folder / "model.safetensors").is_file():
            raise ModelFilesNotFoundError(f"{folder} is not a sentence-transformers folder (no model.safetensors)")
        return folder, str(folder), Variant.INT8
    if not isinstance(model, str):
        raise InputError(f"model must be a name or a folder path, got {type(model).__name__}")
    spec = get_model(model)
    return resolve_folder(spec), spec.name, spec.default_variant


def _check_texts(texts: Sequence[str]) -> None:
    if isinstance(texts, (str, bytes)):
        raise InputError("texts must be a list of strings, not a single string: wrap it as [text]")
    if not isinstance(texts, Sequence):
        raise InputError(f"texts must be a list or tuple of strings, got {type(texts).__name__}")
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise InputError(f"texts[{i}] is {type(t).__name__}, not str")
        check_text(t, f"texts[{i}]")
