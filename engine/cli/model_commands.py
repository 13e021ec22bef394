"""The commands on the embedding model: ``build`` (build the graphs, measure the variants on this CPU and
cache the choice, printing the table, and compile the scoring kernels) and ``embed`` (one JSON vector
per text)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings

from contextsieve.errors import CacheFolderWarning, InputError, ModelCacheError

__all__ = ["build", "embed"]


def build(args: argparse.Namespace) -> None:
    """``contextsieve build``: build (or load) the graphs of ``--variant``; with ``auto``, measure the
    candidates and cache the fastest that passes (``--force`` measures again); then compile (or load)
    the scoring kernels, so a first request waits for neither. What it builds must be kept: a cache
    folder this user may not write is a :class:`~contextsieve.errors.ModelCacheError` (a graph or
    kernel already there is loaded, so the command checks a read-only image's cache)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", CacheFolderWarning)  # raised where the cache could not keep a graph
        try:
            _build(args)
        except CacheFolderWarning as w:
            raise ModelCacheError(f"contextsieve build cannot fill the cache: {w}") from w


def _build(args: argparse.Namespace) -> None:
    from contextsieve.models.embedder import Embedder
    from contextsieve.models.registry import Variant
    from contextsieve.models.variants import candidates, choose_variant

    if args.variant in ("auto", "all"):
        names = [v.value for v in (list(Variant) if args.variant == "all" else candidates())]
        if args.variant == "auto" and args.candidates:
            names = [c.strip() for c in args.candidates.split(",") if c.strip()]
    else:
        names = [args.variant]
    for variant in names:
        t = time.perf_counter()
        emb = Embedder(variant=variant, rebuild=args.rebuild)
        how = "built" if emb.info.built else "loaded from cache"
        print(f"{variant}: {how} in {time.perf_counter() - t:.2f} s -> {emb.info.onnx_path}")
    if args.variant == "auto":
        t = time.perf_counter()
        cands = None
        if args.candidates:
            try:
                cands = [Variant(c.strip()) for c in args.candidates.split(",") if c.strip()]
            except ValueError:
                raise InputError(
                    f"--candidates must name variants among {', '.join(v.value for v in Variant)}"
                ) from None
        choice = choose_variant(force=args.force, candidate_variants=cands, progress=sys.stderr.isatty())
        how = f"measured in {time.perf_counter() - t:.1f} s" if choice.measured_now else "cached choice"
        print(f"\nvariant choice ({how}; `contextsieve build --force` measures again):\n")
        print(choice.table())
    _compile_kernels()


def _compile_kernels() -> None:
    """The scoring kernels compiled for this CPU now (or loaded, when an earlier run did), so that no
    later request waits for Numba; one line with what it took."""
    from contextsieve.kernels.compiled import compile_kernels, kernel_cache_dir, kernels_compiled
    from contextsieve.kernels.threads import jit_disabled

    if jit_disabled():
        print(
            "\nscoring kernels: not compiled: Numba's JIT is off ($NUMBA_DISABLE_JIT or .numba_config.yaml), "
            "so requests score on numpy"
        )
        return
    if not kernels_compiled():
        from contextsieve.kernels import _jit

        if _jit.CACHE_PROBLEM is not None:  # compiled, they would be lost with this process
            where = "$NUMBA_CACHE_DIR" if os.environ.get("NUMBA_CACHE_DIR") else "$CONTEXTSIEVE_CACHE"
            raise ModelCacheError(
                f"contextsieve build cannot keep the scoring kernels ({_jit.CACHE_PROBLEM}); run it as a user who "
                f"may write that folder, or with {where} naming one"
            )
        print("\ncompiling the scoring kernels for this CPU (once per machine)...", flush=True)
    t = time.perf_counter()
    loads = compile_kernels()
    fresh = [k.name for k in loads if not k.from_cache]
    how = f"compiled {', '.join(fresh)}" if fresh else "loaded from the cache"
    print(f"scoring kernels: {how} in {time.perf_counter() - t:.1f} s -> {kernel_cache_dir()}")
    print(f"kernel threads: {_threads_line()}")


def _threads_line() -> str:
    """How the kernels' thread pool started (:func:`~contextsieve.kernels.threads.start_threads`)."""
    from contextsieve.kernels.threads import start_threads

    r = start_threads()
    line = f"{r.threads} {'thread' if r.threads == 1 else 'threads'} on Numba's {r.layer} layer"
    if r.wait_policy is not None:
        line += ", idle threads asleep"
    if r.serialized:
        chosen = os.environ.get("NUMBA_THREADING_LAYER")
        lift = f"unset $NUMBA_THREADING_LAYER ({chosen})" if chosen else "libgomp or `pip install tbb`"
        line += f"; parallel calls take turns (this layer is not thread-safe: {lift} lifts that)"
    return line


def embed(args: argparse.Namespace) -> None:
    """``contextsieve embed``: one JSON line per text (text, model, vector rounded to ``--digits``)."""
    from contextsieve.models.embedder import Embedder

    emb = Embedder(variant=args.variant)
    for text, vec in zip(args.texts, emb.embed(args.texts)):
        print(
            json.dumps(
                {
                    "text": text,
                    "model": emb.info.model_id,
                    "vector": [round(float(v), args.digits) for v in vec],
                }
            )
        )
