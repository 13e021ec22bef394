"""Regenerate ``models/data/golden_minilm.npz``: sentence-transformers vectors of a varied text set.

Needs the ``bench`` extra (torch 2.13 CPU + sentence-transformers); the tests only read the file.

    python -m benchmarks.data.make_golden
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from benchmarks import workloads
from benchmarks.common import ROOT
from contextsieve.models.registry import get_model, resolve_folder

OUT = ROOT / "models" / "data" / "golden_minilm.npz"


def golden_texts() -> list[str]:
    """About 70 texts: edge cases, non-English, lists, code, sentences, chunks, and 8 over 256 tokens."""
    v = workloads
    edge = list(v._EDGE)
    long_texts = [" ".join(v.doc_chunks(600, seed=99)[i : i + 4]) for i in range(300, 324, 4)]
    long_texts += ["the " * 400, "word " * 700]
    return (
        edge
        + list(v._NON_ENGLISH[::2])
        + list(v._LISTS[:4])
        + list(v.code_snippets(40)[:5])
        + list(v.sentences(1100, seed=99)[1000:1008])
        + list(v.doc_chunks(600, seed=99)[:8])
        + long_texts
    )


def main() -> None:
    from sentence_transformers import SentenceTransformer

    folder = resolve_folder(get_model("all-MiniLM-L6-v2"))
    model = SentenceTransformer(str(folder), device="cpu")
    if model.max_seq_length != 256:
        raise SystemExit(f"unexpected max_seq_length {model.max_seq_length}")
    texts = golden_texts()
    vecs = model.encode(texts, batch_size=16, normalize_embeddings=True, convert_to_numpy=True).astype(np.float32)
    ntok = [len(model.tokenizer(t, truncation=False)["input_ids"]) for t in texts]
    OUT.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(OUT, vectors=vecs, texts=np.array(json.dumps(texts)), tokens=np.array(ntok))
    print(f"wrote {OUT} ({len(texts)} texts, {sum(n > 256 for n in ntok)} over 256 tokens)")


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    main()
