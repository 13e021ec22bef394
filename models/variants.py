"""Which graph a machine runs (``variant="auto"``): first from the CPU's features, then as measured on it.

The fastest variant depends on the CPU: int8 is about twice as fast as fp32 where the CPU has VNNI
or AMX, and slower than fp32 on an AVX2-only CPU, where ONNX Runtime's exact u8 x u8 kernel is slow.
Measuring takes seconds (two or three graphs built, then timed), too long to stand between a user
and a first answer, so an :class:`~contextsieve.models.embedder.Embedder` built with ``variant="auto"``
(the default) never measures: it runs the measured choice when this machine has one cached, and
otherwise the choice the CPU's features predict (:func:`feature_choice`: ``int8`` where int8 dot
products are exact in hardware, ``fp32`` elsewhere; the winners of every measurement so far), which
builds one graph. ``contextsieve build`` (:func:`choose_variant`) measures: it
builds each candidate (:func:`candidates`), checks it against the golden vectors (cosine against
sentence-transformers on 78 varied texts: min >= :data:`MIN_COSINE`, mean >= :data:`MEAN_COSINE`),
times the ones that pass side by side on a one-sentence query and on a batch of chunks, and keeps the
fastest for each use (queries and batches may run different graphs); the next process runs that.
Every variant passes the same bars and stores key on the model family, so switching from the
predicted to the measured choice keeps every cached vector and stash valid. The choice is cached
beside the graphs, keyed by the CPU signature, the ONNX Runtime version, the builder version, the
weights and the thread count, so a new CPU, a new ONNX Runtime or another thread count goes back to
the prediction until measured; ``contextsieve build --force`` measures again.

An explicit ``variant=`` or ``$CONTEXTSIEVE_VARIANT`` (``fp32``, ``int8``, ``int8w7`` or ``auto``) wins.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from contextsieve.errors import CacheFolderWarning, InputError, ModelError
from contextsieve.fileio import atomic_write_bytes
from contextsieve.models import runtime
from contextsieve.models.cache import ModelCache
from contextsieve.models.cpu import cpu_flags, cpu_model, has_int8_dot, int8_weight_type
from contextsieve.models.registry import BUILDER_VERSION, DEFAULT_MODEL, Variant

if TYPE_CHECKING:
    from contextsieve.models.embedder import Embedder

__all__ = [
    "AUTO",
    "VARIANT_ENV",
    "MIN_COSINE",
    "MEAN_COSINE",
    "Measurement",
    "VariantChoice",
    "requested_variant",
    "candidates",
    "cpu_signature",
    "golden_set",
    "feature_choice",
    "choose_variant",
]

#: The variant that asks for measurement.
AUTO = "auto"
#: Environment variable naming the variant when the code does not (``fp32``, ``int8``, ``int8w7``, ``auto``).
VARIANT_ENV = "CONTEXTSIEVE_VARIANT"
#: Fidelity bar every candidate must pass against the golden vectors: lowest cosine of any text.
MIN_COSINE = 0.99
#: ... and mean cosine over the golden texts.
MEAN_COSINE = 0.998
#: Rounds of the one-sentence query timing (each round times every candidate once, in turn).
QUERY_ROUNDS = 60
#: Rounds of the batch timing (a batch of :data:`BATCH_CHUNKS` chunks per candidate per round).
BATCH_ROUNDS = 3
BATCH_CHUNKS = 32
#: Format of the cached choice; another value is measured again.
CHOICE_FORMAT = 1

_QUERIES = (
    "How do I roll back the payments service after a bad deploy?",
    "Which tool lists the open pull requests of a repository?",
    "What time is it in Tokyo right now?",
    "Summarise the incident report from last night.",
)


def requested_variant(variant: Variant | str | None) -> Variant | str:
    """The variant asked for: ``variant`` if given, else ``$CONTEXTSIEVE_VARIANT``, else :data:`AUTO`.

    Returns a :class:`Variant` or the string :data:`AUTO`; anything else is an :class:`InputError`."""
    source = "variant"
    if variant is None:
        variant = os.environ.get(VARIANT_ENV, "").strip().lower() or AUTO
        source = f"${VARIANT_ENV}"
    if isinstance(variant, Variant):
        return variant
    if isinstance(variant, str) and variant.lower() == AUTO:
        return AUTO
    try:
        return Variant(str(variant).lower() if isinstance(variant, str) else variant)
    except ValueError:
        known = ", ".join([v.value for v in Variant] + [AUTO])
        raise InputError(f"{source} must be one of {known}; got {variant!r}") from None


def candidates() -> list[Variant]:
    """The variants worth measuring on this CPU: fp32, int8 (with the weight type that is exact here:
    see :func:`~contextsieve.models.cpu.int8_weight_type`), and on CPUs without an exact int8 dot
    product also int8w7 (7-bit weights, which the faster u8 x s8 kernel computes exactly)."""
    out = [Variant.FP32, Variant.INT8]
    if not has_int8_dot():
        out.append(Variant.INT8_W7)
    return out


def cpu_signature() -> str:
    """What makes timings of one machine valid on another: architecture, CPU model and its flags."""
    return f"{platform.machine()}|{cpu_model()}|{' '.join(sorted(cpu_flags()))}"


def golden_set(model_name: str) -> tuple[list[str], np.ndarray | None]:
    """The golden texts and, for all-MiniLM-L6-v2, sentence-transformers' vectors of them (``None`` for
    another model: its candidates are then checked against its own fp32 graph, which reproduces
    sentence-transformers to 1e-5)."""
    raw = resources.files("contextsieve.models").joinpath("data/golden_minilm.npz").read_bytes()
    import io

    z = np.load(io.BytesIO(raw))
    texts = json.loads(str(z["texts"]))
    return texts, (z["vectors"].astype(np.float32) if model_name == DEFAULT_MODEL else None)


@dataclass(frozen=True)
class Measurement:
    """One candidate on this machine.

    Attributes:
        variant: the graph (``fp32``, ``int8``, ``int8w7``); weights: how its int8 weights are stored
            (``f32`` for fp32, ``s8``, ``u8``, ``s7``).
        min_cos, mean_cos: cosine against the golden vectors, lowest and mean.
        passes: both bars met (:data:`MIN_COSINE`, :data:`MEAN_COSINE`).
        query_p50_ms, query_p99_ms: one-sentence query, milliseconds (``nan`` when it failed the bars).
        chunk_ms: milliseconds per chunk in a batch of :data:`BATCH_CHUNKS` (median of rounds).
    """

    variant: str
    weights: str
    min_cos: float
    mean_cos: float
    passes: bool
    query_p50_ms: float
    query_p99_ms: float
    chunk_ms: float


@dataclass(frozen=True)
class VariantChoice:
    """The variants this machine runs, and the measurements they were chosen from.

    Attributes:
        query: variant for short inputs (a call of at most ``QUERY_TOKENS`` padded tokens).
        batch: variant for everything else.
        cpu: :func:`cpu_signature` of the machine measured; onnxruntime: its version; threads: the
            intra-op threads timed with.
        measurements: one row per candidate (empty for a choice from the CPU's features). measured_at:
            UNIX time (0 when not measured). measured_now: this process measured (False when the choice
            came from the cache or from the features).
    """

    query: str
    batch: str
    cpu: str
    onnxruntime: str
    threads: int
    measurements: tuple[Measurement, ...]
    measured_at: float
    measured_now: bool = False

    @property
    def measured(self) -> bool:
        """Whether the choice comes from timing the candidates here (False: predicted from the CPU's features)."""
        return bool(self.measurements)

    def table(self) -> str:
        """The measurements as a Markdown table with the CPU line above it (for a choice from the
        features, one line saying so)."""
        from contextsieve.models.cpu import cpu_summary

        head = f"CPU: {cpu_summary()}; onnxruntime {self.onnxruntime}; {self.threads} threads"
        if not self.measured:
            return (
                f"{head}\n\n{self.query} for queries and batches, predicted from the CPU's features "
                "(not measured here yet: `contextsieve build` measures)"
            )
        lines = [
            head,
            "",
            "| variant | weights | min / mean cos vs ST | passes | query p50 / p99 ms | ms / chunk | chosen for |",
            "| --- | --- | --- | --- | --- | --- | --- |",
        ]
        for m in self.measurements:
            uses = [u for u, v in (("queries", self.query), ("batches", self.batch)) if v == m.variant]
            timing = (f"{m.query_p50_ms:.2f} / {m.query_p99_ms:.2f}", f"{m.chunk_ms:.2f}") if m.passes else ("-", "-")
            lines.append(
                f"| {m.variant} | {m.weights} | {m.min_cos:.5f} / {m.mean_cos:.5f} | {'yes' if m.passes else 'no'} "
                f"| {timing[0]} | {timing[1]} | {', '.join(uses) or '-'} |"
            )
        return "\n".join(lines)

    def to_json(self) -> dict[str, object]:
        d = asdict(self)
        d.pop("measured_now")
        d["format"] = CHOICE_FORMAT
        return d

    @classmethod
    def from_json(cls, d: dict[str, object]) -> VariantChoice:
        """Parse a cached choice; :class:`ValueError` when it is not one of this format."""
        if not isinstance(d, dict) or d.get("format") != CHOICE_FORMAT:
            raise ValueError("not a variant choice of this format")
        rows = d["measurements"]
        if not isinstance(rows, list) or not rows:
            raise ValueError("no measurements")
        ms = tuple(Measurement(**r) for r in rows)
        known = {v.value for v in Variant}
        query, batch = str(d["query"]), str(d["batch"])
        if query not in known or batch not in known:
            raise ValueError("unknown variant")
        if not any(m.variant == query and m.passes for m in ms) or not any(m.variant == batch and m.passes for m in ms):
            raise ValueError("the chosen variants did not pass")
        return cls(
            query=query,
            batch=batch,
            cpu=str(d["cpu"]),
            onnxruntime=str(d["onnxruntime"]),
            threads=int(d["threads"]),  # type: ignore[call-overload]
            measurements=ms,
            measured_at=float(d["measured_at"]),  # type: ignore[arg-type]
        )


def feature_choice(threads: int, cands: Sequence[Variant] | None = None) -> VariantChoice:
    """The choice the CPU's features predict, without building or timing anything: ``int8`` where
    int8 dot products are exact in hardware (:func:`~contextsieve.models.cpu.has_int8_dot`: VNNI or
    AMX on x86, ARM), ``fp32`` elsewhere (AVX2-only x86, where int8's u8 x u8 kernel measured slower
    than fp32), for queries and batches alike; the first of ``cands`` that is either when given."""
    onnxruntime = runtime.onnxruntime()

    want = [Variant.INT8, Variant.FP32] if has_int8_dot() else [Variant.FP32, Variant.INT8]
    pool = list(cands) if cands else want
    pick = next((v for v in want if v in pool), pool[0])
    return VariantChoice(
        query=pick.value,
        batch=pick.value,
        cpu=cpu_signature(),
        onnxruntime=onnxruntime.__version__,
        threads=threads,
        measurements=(),
        measured_at=0.0,
    )


def _choice_path(cache: ModelCache, name: str, weights_sha: str, threads: int, cands: Sequence[Variant]) -> Path:
    onnxruntime = runtime.onnxruntime()

    key = {
        "cpu": cpu_signature(),
        "onnxruntime": onnxruntime.__version__,
        "builder": BUILDER_VERSION,
        "weights": weights_sha,
        "threads": str(threads),
        "candidates": ",".join(v.value for v in cands),
        "int8_weights": int8_weight_type(),
    }
    return cache.entry_path(f"{Path(name).name}-variant-choice", key)


def _load(path: Path) -> VariantChoice | None:
    try:
        return VariantChoice.from_json(json.loads(path.read_text(encoding="utf-8")))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError):
        return None  # damaged or of another format: measured again and replaced


def _cosines(got: np.ndarray, ref: np.ndarray) -> np.ndarray:
    return np.asarray((got * ref).sum(1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(ref, axis=1)))


def _weights_label(variant: Variant) -> str:
    if variant is Variant.FP32:
        return "f32"
    return "s7" if variant is Variant.INT8_W7 else int8_weight_type()


def measure(
    embedders: dict[Variant, Embedder], texts: Sequence[str], reference: np.ndarray, *, progress: bool = False
) -> list[Measurement]:
    """Fidelity of each embedder on ``texts`` against ``reference``, then the passing ones timed side by
    side (each round times every candidate once, in turn, so a slow phase of the machine hits all)."""
    rows: dict[Variant, dict[str, float]] = {}
    for v, emb in embedders.items():
        c = _cosines(emb.embed(list(texts)), reference)
        rows[v] = {"min": float(c.min()), "mean": float(c.mean())}
    passing = [v for v in embedders if rows[v]["min"] >= MIN_COSINE and rows[v]["mean"] >= MEAN_COSINE]
    chunks = [t for t in texts if 40 <= len(t.split()) <= 200][:BATCH_CHUNKS]
    while len(chunks) < BATCH_CHUNKS:
        chunks = chunks + chunks[: BATCH_CHUNKS - len(chunks)]
    qt: dict[Variant, list[float]] = {v: [] for v in passing}
    bt: dict[Variant, list[float]] = {v: [] for v in passing}
    for v in passing:  # warm: first calls allocate arenas
        embedders[v].embed([_QUERIES[0]])
        embedders[v].embed(chunks[:8])
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=QUERY_ROUNDS + BATCH_ROUNDS, desc="timing variants", unit="round")
    try:
        for r in range(QUERY_ROUNDS):
            order = passing if r % 2 == 0 else passing[::-1]
            for v in order:
                t = time.perf_counter()
                embedders[v].embed([_QUERIES[r % len(_QUERIES)]])
                qt[v].append(time.perf_counter() - t)
            if bar is not None:
                bar.update(1)
        for r in range(BATCH_ROUNDS):
            for v in passing if r % 2 == 0 else passing[::-1]:
                t = time.perf_counter()
                embedders[v].embed(chunks)
                bt[v].append((time.perf_counter() - t) / len(chunks))
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    out = []
    for v in embedders:
        ok = v in qt
        out.append(
            Measurement(
                variant=v.value,
                weights=_weights_label(v),
                min_cos=rows[v]["min"],
                mean_cos=rows[v]["mean"],
                passes=ok,
                query_p50_ms=statistics.median(qt[v]) * 1e3 if ok else float("nan"),
                query_p99_ms=float(np.percentile(qt[v], 99)) * 1e3 if ok else float("nan"),
                chunk_ms=statistics.median(bt[v]) * 1e3 if ok else float("nan"),
            )
        )
    return out


def choose_variant(
    model: str | os.PathLike[str] = DEFAULT_MODEL,
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    threads: int | None = None,
    force: bool = False,
    candidate_variants: Sequence[Variant] | None = None,
    progress: bool = False,
    predict: bool = False,
) -> VariantChoice:
    """The variants this machine runs ``model`` with: the cached measured choice, else a new
    measurement (the default, what ``contextsieve build`` does) or the prediction from the CPU's
    features (``predict=True``, what an :class:`~contextsieve.models.embedder.Embedder` does: no
    seconds of timing before a first answer; :func:`feature_choice`).

    Args:
        model: a known model name or a sentence-transformers folder (as :class:`Embedder` takes).
        cache_dir: the model cache (default ``$CONTEXTSIEVE_CACHE`` or ``~/.cache/contextsieve``).
        threads: intra-op threads the embedders will run with (default: all this process may use).
        force: measure again even if a choice is cached (``contextsieve build --force``).
        candidate_variants: the variants to measure (default :func:`candidates`).
        progress: show a progress bar while timing.
        predict: when no choice is cached, return :func:`feature_choice` instead of measuring (default
            ``False``); the prediction is never cached, so a later call without it still measures.

    Raises :class:`ModelError` when no candidate passes the fidelity bars.
    """
    onnxruntime = runtime.onnxruntime()

    from contextsieve.models.embedder import Embedder, default_threads, locate_model

    folder, name, _ = locate_model(model)
    n_threads = threads or default_threads()
    cache = ModelCache(Path(cache_dir) if cache_dir is not None else None)
    cands = list(candidate_variants) if candidate_variants is not None else candidates()
    if not cands:
        raise InputError("candidate_variants must name at least one variant")
    weights_sha = cache.weights_sha256(folder / "model.safetensors")
    path = _choice_path(cache, name, weights_sha, n_threads, cands)
    if not force:
        cached = _load(path)
        if cached is not None:
            return cached
        if predict:
            return feature_choice(n_threads, cands)
    with cache.build_lock(path):
        if not force:
            cached = _load(path)  # measured by another process meanwhile?
            if cached is not None:
                return cached
        embedders = {v: Embedder(model, variant=v, threads=n_threads, cache_dir=cache.root) for v in cands}
        texts, reference = golden_set(name)
        if reference is None:
            reference = (
                embedders[Variant.FP32] if Variant.FP32 in embedders else Embedder(model, variant=Variant.FP32)
            ).embed(texts)
        rows = measure(embedders, texts, reference, progress=progress)
        ok = [m for m in rows if m.passes]
        if not ok:
            raise ModelError(
                "no variant passed the fidelity bars (min cosine >= "
                f"{MIN_COSINE}, mean >= {MEAN_COSINE}): "
                + ", ".join(f"{m.variant} {m.min_cos:.4f}/{m.mean_cos:.4f}" for m in rows)
            )
        choice = VariantChoice(
            query=min(ok, key=lambda m: m.query_p50_ms).variant,
            batch=min(ok, key=lambda m: m.chunk_ms).variant,
            cpu=cpu_signature(),
            onnxruntime=onnxruntime.__version__,
            threads=n_threads,
            measurements=tuple(rows),
            measured_at=time.time(),
            measured_now=True,
        )
        try:
            atomic_write_bytes(path, json.dumps(choice.to_json(), indent=1).encode(), follow_symlinks=False)
        except OSError as e:  # a read-only cache still works: this process uses the choice, the next predicts
            warnings.warn(
                f"cannot keep the measured variant choice in the model cache {path.parent} ({e.strerror or e}): "
                "it is used in this process, and the next runs the variant the CPU's features predict",
                CacheFolderWarning,
                stacklevel=2,
            )
        return choice
