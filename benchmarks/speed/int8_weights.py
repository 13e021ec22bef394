"""int8 weight types on this CPU: fp32 against int8 with s8 and with u8 weights, speed and accuracy.

    python -m benchmarks.speed.int8_weights

ONNX Runtime's u8 x s8 integer GEMM is exact where the CPU has VNNI (or AMX); without it, it adds
pairs of products in saturating 16-bit lanes. contextsieve then builds its int8 graph with u8
weights (the same integers shifted by 128, exact in ORT's u8 x u8 kernel; see
``contextsieve.models.cpu``). This prints both on the machine it runs on, each in its own graph
cache: sentences per second (600 docstring sentences), ms per ~100-token chunk (100 chunks), one
query's p50 (60 calls), and min / mean cosine against the sentence-transformers golden vectors of
``models/data/golden_minilm.npz`` (78 texts). Times are the best of 3 rounds, in one process.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks import workloads
from contextsieve.models.cpu import WEIGHTS_ENV, cpu_summary

GOLDEN = Path(__file__).resolve().parents[2] / "models" / "data" / "golden_minilm.npz"


def best(f: object, rounds: int = 3) -> float:
    ts = []
    for _ in range(rounds):
        t = time.perf_counter()
        f()  # type: ignore[operator]
        ts.append(time.perf_counter() - t)
    return min(ts)


def main() -> None:
    from contextsieve import Embedder

    z = np.load(GOLDEN)
    texts, ref = json.loads(str(z["texts"])), z["vectors"]
    sents, chunks = list(workloads.sentences(600, seed=5)), list(workloads.doc_chunks(100, seed=5))
    print(f"CPU: {cpu_summary()}\n")
    print("| graph | sentences / s | ms / chunk | query p50 ms | min cos | mean cos |")
    print("| --- | --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as cache:
        graphs = (("fp32", "fp32", None), ("int8, s8 weights", "int8", "s8"), ("int8, u8 weights", "int8", "u8"))
        for name, variant, weights in graphs:
            if weights:
                os.environ[WEIGHTS_ENV] = weights
            emb = Embedder(variant=variant, cache_dir=cache)
            emb.embed(sents[:20])
            s = best(lambda: emb.embed(sents))  # noqa: B023
            c = best(lambda: emb.embed(chunks))  # noqa: B023
            q = []
            for text in sents[:60]:
                t = time.perf_counter()
                emb.embed([text])
                q.append(time.perf_counter() - t)
            cos = (emb.embed(texts) * ref).sum(1) / np.linalg.norm(ref, axis=1)
            print(
                f"| {name} | {len(sents) / s:.0f} | {c / len(chunks) * 1e3:.2f} | {np.median(q) * 1e3:.2f} | "
                f"{cos.min():.5f} | {cos.mean():.5f} |",
                flush=True,
            )
            emb.close()
    os.environ.pop(WEIGHTS_ENV, None)


if __name__ == "__main__":
    main()
