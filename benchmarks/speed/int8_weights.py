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

import argparse
import json
import os
import tempfile

import numpy as np

from benchmarks import workloads
from benchmarks.common import ROOT, cpu_line, run_times, timed
from contextsieve.models.cpu import WEIGHTS_ENV

GOLDEN = ROOT / "models" / "data" / "golden_minilm.npz"


def main() -> None:
    from contextsieve import Embedder

    z = np.load(GOLDEN)
    texts, ref = json.loads(str(z["texts"])), z["vectors"]
    sents, chunks = list(workloads.sentences(600, seed=5)), list(workloads.doc_chunks(100, seed=5))
    print(f"{cpu_line()}\n")
    print("| graph | sentences / s | ms / chunk | query p50 ms | min cos | mean cos |")
    print("| --- | --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as cache:
        graphs = (("fp32", "fp32", None), ("int8, s8 weights", "int8", "s8"), ("int8, u8 weights", "int8", "u8"))
        for name, variant, weights in graphs:
            if weights:
                os.environ[WEIGHTS_ENV] = weights
            emb = Embedder(variant=variant, cache_dir=cache)
            emb.embed(sents[:20])
            s = min(run_times(lambda: emb.embed(sents), 3))  # noqa: B023
            c = min(run_times(lambda: emb.embed(chunks), 3))  # noqa: B023
            q = [timed(lambda text=text: emb.embed([text])) for text in sents[:60]]
            cos = (emb.embed(texts) * ref).sum(1) / np.linalg.norm(ref, axis=1)
            print(
                f"| {name} | {len(sents) / s:.0f} | {c / len(chunks) * 1e3:.2f} | {np.median(q) * 1e3:.2f} | "
                f"{cos.min():.5f} | {cos.mean():.5f} |",
                flush=True,
            )
            emb.close()
    os.environ.pop(WEIGHTS_ENV, None)


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    main()
