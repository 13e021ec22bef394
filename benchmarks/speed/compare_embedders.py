"""Side-by-side: contextsieve (default ``auto``, fp32, int8) vs sentence-transformers (torch CPU) vs fastembed.

    python -m benchmarks.speed.compare_embedders            # needs the bench extra for the peers
    python -m benchmarks.speed.compare_embedders --engines contextsieve-auto,contextsieve-fp32,contextsieve-int8
    python -m benchmarks.speed.compare_embedders --threads 2,1 --load idle,busy --no-cold

``--load busy`` runs the rounds with a competing process beside them (another Python process spinning
on one core for as long as the rounds last: what a user's machine running a build, a browser tab or a
test suite looks like); ``--threads 2,1`` times every engine with each thread count (contextsieve's
``threads=`` default is every core this process may use, and it then runs each call on as many
threads as the cores others leave free: see :class:`contextsieve.models.embedder.Embedder`).

``contextsieve-auto`` is the default a user gets: the variants measured on this CPU, the fastest that
passes the fidelity bars per use (``contextsieve build`` prints that table), each call on as many
threads as there are free cores; ``contextsieve-auto-fixed`` is the same on a fixed thread count
(``adapt_threads=False``, what every call did before).

Workloads (``benchmarks/workloads.py``): 151 documentation-like chunks (~100 tokens; ms per chunk),
1,000 short sentences (sentences/s), one 13-token query (p50/p99 over 200 calls after 10 warm-ups),
cold load (a fresh process: imports + model load + first query; median of 3; the contextsieve
graphs already built), and resident memory, each engine in a fresh process of its own: after the
model load and first query, the peak, and after then embedding the 1,000 sentences and 151 chunks
(``VmRSS`` / ``VmHWM`` of ``/proc/self/status``, MB). Engines run round-robin in each round so drift
hits all alike; medians are reported. Accuracy is the min / mean cosine against sentence-transformers
on ~300 varied texts. Every engine gets 2 threads. fastembed runs contextsieve's fp32 graph with a token output (its own
mean pooling), as it cannot read the sentence-output graph.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from benchmarks import workloads
from benchmarks.common import cpu_line, p50_p99, timed

THREADS = 2


@dataclass
class Engine:
    name: str
    load: Callable[[], object]
    embed: Callable[[object, list[str]], np.ndarray]
    cold_code: str
    work_code: str  # embeds the list T (in the memory subprocess)
    model: object = None
    times: dict[str, list[float]] = field(default_factory=dict)


def _cs(variant: str, threads: int = THREADS, adapt: bool = True) -> Engine:
    def load() -> object:
        from contextsieve import Embedder

        return Embedder(variant=variant, threads=threads, adapt_threads=adapt)

    code = (
        f"from contextsieve import Embedder; m = Embedder(variant='{variant}', threads={threads}, "
        f"adapt_threads={adapt}); m.embed([Q])"
    )
    name = f"contextsieve-{variant}" + ("" if adapt else " (fixed threads)")
    return Engine(name, load, lambda m, t: m.embed(t), code, "m.embed(T)")


def _st(threads: int = THREADS) -> Engine:
    def load() -> object:
        import torch
        from sentence_transformers import SentenceTransformer

        torch.set_num_threads(threads)
        return SentenceTransformer(str(_folder()), device="cpu")

    def embed(m: object, t: list[str]) -> np.ndarray:
        import torch

        torch.set_num_threads(threads)  # torch's thread count is global: set it for this engine's calls
        return m.encode(t, batch_size=32, normalize_embeddings=True, convert_to_numpy=True)  # type: ignore[attr-defined,no-any-return]

    code = (
        f"import torch; torch.set_num_threads({threads}); from sentence_transformers import SentenceTransformer; "
        f"m = SentenceTransformer({str(_folder())!r}, device='cpu'); m.encode([Q])"
    )
    return Engine(
        "sentence-transformers",
        load,
        embed,
        code,
        "m.encode(T, batch_size=32, normalize_embeddings=True, convert_to_numpy=True)",
    )


def _fastembed_dir() -> Path:
    d = Path(tempfile.gettempdir()) / "contextsieve-bench-fastembed"
    if not (d / "model.onnx").exists():
        from contextsieve.models.build import build_onnx

        d.mkdir(parents=True, exist_ok=True)
        (d / "model.onnx").write_bytes(build_onnx(_folder(), "fp32", output="token"))
        for f in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "config.json"):
            shutil.copy(_folder() / f, d / f)
    return d


def _fe(threads: int = THREADS) -> Engine:
    def load() -> object:
        from fastembed import TextEmbedding

        return TextEmbedding(
            model_name="sentence-transformers/all-MiniLM-L6-v2",
            specific_model_path=str(_fastembed_dir()),
            local_files_only=True,
            threads=threads,
        )

    code = (
        "from fastembed import TextEmbedding; "
        "m = TextEmbedding(model_name='sentence-transformers/all-MiniLM-L6-v2', "
        f"specific_model_path={str(_fastembed_dir())!r}, local_files_only=True, threads={threads}); "
        "list(m.embed([Q]))"
    )
    return Engine(
        "fastembed",
        load,
        lambda m, t: np.asarray(list(m.embed(t, batch_size=32)), dtype=np.float32),
        code,
        "list(m.embed(T, batch_size=32))",
    )


def _folder() -> Path:
    from contextsieve.models.registry import get_model, resolve_folder

    return resolve_folder(get_model("all-MiniLM-L6-v2"))


ENGINES: dict[str, Callable[[int], Engine]] = {
    "contextsieve-auto": lambda n: _cs("auto", n),
    "contextsieve-auto-fixed": lambda n: _cs("auto", n, adapt=False),
    "contextsieve-fp32": lambda n: _cs("fp32", n),
    "contextsieve-int8": lambda n: _cs("int8", n),
    "sentence-transformers": _st,
    "fastembed": _fe,
}

#: The competing process of ``--load busy``: one core's worth of pure-Python work until killed.
_SPIN = "while True:\n    pass\n"


class _Competitor:
    """A process spinning on one core while the ``with`` block runs (nothing when ``busy`` is False)."""

    def __init__(self, busy: bool) -> None:
        self.busy = busy
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> None:
        if self.busy:
            self.proc = subprocess.Popen([sys.executable, "-c", _SPIN])
            import time

            time.sleep(0.5)  # let the scheduler see it

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()


def cold_load(code: str, runs: int = 3) -> float:
    """Median seconds from the first import to the first vector, each in a fresh process."""
    prog = f"import time; _t = time.perf_counter(); Q = {workloads.QUERY!r}\n{code}\nprint(time.perf_counter() - _t)"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "true"}
    out = []
    for _ in range(runs):
        r = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, env=env, timeout=600)
        if r.returncode != 0:
            raise RuntimeError(r.stderr[-2000:])
        out.append(float(r.stdout.strip().splitlines()[-1]))
    return float(np.median(out))


_RSS = (
    "def _mem():\n"
    "    d = dict(l.split(':', 1) for l in open('/proc/self/status'))\n"
    "    return int(d['VmRSS'].split()[0]) / 1024, int(d['VmHWM'].split()[0]) / 1024\n"
)


def memory(e: Engine) -> tuple[float, float, float]:
    """(resident MB after load + first query, peak MB, resident MB after 1,151 more texts), in a fresh process."""
    prog = (
        f"{_RSS}Q = {workloads.QUERY!r}\n{e.cold_code}\nloaded = _mem()[0]\n"
        "from benchmarks import workloads\nT = list(workloads.sentences()) + list(workloads.doc_chunks())\n"
        f"{e.work_code}\nafter, peak = _mem()\nprint(loaded, peak, after)"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "true"}
    r = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, env=env, timeout=600)
    if r.returncode != 0:
        raise RuntimeError(r.stderr[-2000:])
    loaded, peak, after = (float(x) for x in r.stdout.strip().splitlines()[-1].split())
    return loaded, peak, after


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engines", default=",".join(ENGINES))
    ap.add_argument(
        "--rounds", type=int, default=5, help="timed rounds of the chunk workload (sentences: rounds - 2, min 3)"
    )
    ap.add_argument("--threads", default=str(THREADS), help="comma-separated thread counts to time (default 2)")
    ap.add_argument("--load", default="idle", help="comma-separated: idle, busy (a process spinning on one core)")
    ap.add_argument("--no-cold", action="store_true", help="skip the cold-load and memory subprocesses")
    args = ap.parse_args(argv)
    print(cpu_line())
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    chunks, sents, varied = list(workloads.doc_chunks()), list(workloads.sentences()), list(workloads.varied_texts())
    thread_counts = [int(x) for x in args.threads.split(",") if x.strip()]
    loads = [x.strip() for x in args.load.split(",") if x.strip()]
    if not set(loads) <= {"idle", "busy"}:
        ap.error("--load takes idle and/or busy")
    engines: list[tuple[int, Engine]] = []
    for n in thread_counts:
        for name in args.engines.split(","):
            try:
                e = ENGINES[name](n)
                e.model = e.load()
                engines.append((n, e))
            except ImportError as exc:
                print(f"# {name}: not installed ({exc}); pip install -e '.[bench]'", file=sys.stderr)
    for _, e in engines:  # warm-up + accuracy reference (sentence-transformers if present, else the first engine)
        e.times["vec"] = [e.embed(e.model, varied)]
        e.embed(e.model, chunks[:32])
    ref_engine = next((e for _, e in engines if e.name == "sentence-transformers"), engines[0][1])
    ref = ref_engine.times["vec"][0]
    for load in loads:
        with _Competitor(load == "busy"):
            for r in range(args.rounds):
                for _, e in engines:
                    e.times.setdefault(f"chunks {load}", []).append(timed(lambda: e.embed(e.model, chunks)))
                    if r < max(3, args.rounds - 2):
                        e.times.setdefault(f"sents {load}", []).append(timed(lambda: e.embed(e.model, sents)))
            for _, e in engines:  # one engine's queries back to back: another engine's threads (ORT sessions
                # that spin after a call, torch's OpenMP pool) would otherwise still be spinning in this process
                for _ in range(10):
                    e.embed(e.model, [workloads.QUERY])
                e.times[f"query {load}"] = [timed(lambda: e.embed(e.model, [workloads.QUERY])) for _ in range(200)]
    for n, e in engines:
        first = n == thread_counts[0]
        e.times["cold"] = [] if args.no_cold or not first else [cold_load(e.cold_code)]
        e.times["memory"] = [] if args.no_cold or not first else list(memory(e))
    print(
        f"\n{len(chunks)} chunks (mean {np.mean([len(c) for c in chunks]):.0f} chars), {len(sents)} sentences, "
        f"query {workloads.QUERY!r}; medians of {args.rounds} rounds; accuracy vs {ref_engine.name} on "
        f"{len(varied)} varied texts; busy: another process spinning on one core during the rounds\n"
    )
    print(
        "| engine | threads | load | ms / chunk | sentences / s | query p50 ms | query p99 ms | cold load s | "
        "MB loaded | MB peak | MB after 1,151 texts | min cos | mean cos |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for load in loads:
        for n, e in engines:
            v = e.times["vec"][0]
            p50, p99 = p50_p99(e.times[f"query {load}"], 1000)
            c = (v * ref).sum(1) / (np.linalg.norm(v, axis=1) * np.linalg.norm(ref, axis=1))
            chunk = np.median(e.times[f"chunks {load}"]) * 1000 / len(chunks)
            sent = len(sents) / np.median(e.times[f"sents {load}"])
            cold = f"{e.times['cold'][0]:.2f}" if e.times["cold"] and load == loads[0] else "-"
            mem = (
                " | ".join(f"{m:.0f}" for m in e.times["memory"])
                if e.times["memory"] and load == loads[0]
                else "- | - | -"
            )
            print(
                f"| {e.name} | {n} | {load} | {chunk:.2f} | {sent:.0f} | {p50:.2f} | {p99:.2f} | {cold} | "
                f"{mem} | {c.min():.5f} | {c.mean():.5f} |"
            )


if __name__ == "__main__":
    main()
