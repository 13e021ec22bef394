"""Ablation of the int8 recipe: accuracy against fp32 and speed, one step at a time, in one run.

    python -m benchmarks.speed.int8_recipe

Accuracy: min / mean / 1st-percentile cosine against contextsieve fp32 on the ~300 varied texts of
``benchmarks/workloads.py`` (prose, code, lists, non-English, degenerate, over 256 tokens). Speed: the
151-chunk workload through :class:`contextsieve.Embedder`'s batching (2 threads), median of 3.
"""

from __future__ import annotations

import argparse

from benchmarks import workloads
from benchmarks.common import cpu_line, median_time, percentile
from contextsieve.models.cpu import int8_weight_type
from contextsieve.models.graph import QuantPlan, build_graph, collect_bert_weights
from contextsieve.models.quantize import (
    LAYER_KINDS,
    SMOOTH_ALPHA,
    activation_ranges,
    calibration_texts,
    smooth_weights,
    split_outliers,
)
from contextsieve.models.registry import get_model, resolve_folder
from contextsieve.models.runtime import onnxruntime
from contextsieve.models.tokenizer import TextTokenizer
from contextsieve.models.weights import read_bert_config, read_safetensors

ort = onnxruntime()  # telemetry off, as contextsieve imports it


def main() -> None:
    from contextsieve.models.embedder import Embedder

    folder = resolve_folder(get_model("all-MiniLM-L6-v2"))
    cfg = read_bert_config(folder)
    w = collect_bert_weights(read_safetensors(folder / "model.safetensors"), cfg)
    tok = TextTokenizer.from_file(folder / "tokenizer.json", cfg.max_seq_length)
    layers = [f"L{i}.{k}" for i in range(cfg.num_layers) for k in LAYER_KINDS]
    ffn_out = [f"L{i}.ffn_out" for i in range(cfg.num_layers)]
    amax = activation_ranges(w, cfg, calibration_texts(), tok)
    smoothed = smooth_weights(w, amax, SMOOTH_ALPHA, layers)
    all8 = frozenset(layers)
    u8 = int8_weight_type() == "u8"  # uint8 weights where the CPU has no VNNI (exact there; see QuantPlan)
    print(f"{cpu_line()}\n")
    steps = [
        ("fp32", w, QuantPlan()),
        ("int8, one activation scale per tensor", w, QuantPlan(all8, per_tensor_activations=True, unsigned_weights=u8)),
        ("  + SmoothQuant", smoothed, QuantPlan(all8, per_tensor_activations=True, unsigned_weights=u8)),
        ("int8, one activation scale per row", w, QuantPlan(all8, unsigned_weights=u8)),
        ("  + SmoothQuant", smoothed, QuantPlan(all8, unsigned_weights=u8)),
        (
            "  + 8 fp32 outlier channels in ffn_out",
            split_outliers(smoothed, amax, ffn_out),
            QuantPlan(all8, unsigned_weights=u8),
        ),
        (
            "  + int8 word embeddings (shipped)",
            split_outliers(smoothed, amax, ffn_out),
            QuantPlan(all8, int8_embeddings=True, unsigned_weights=u8),
        ),
    ]
    varied, chunks = list(workloads.varied_texts()), list(workloads.doc_chunks())
    ref = None
    print("| variant | min cos | mean cos | 1st pct | MB | 151 chunks ms |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, weights, plan in steps:
        data = build_graph(weights, cfg, plan).SerializeToString()
        emb = Embedder.__new__(Embedder)
        emb._init(data, tok, threads=2, batch_size=64, batch_tokens=512)
        vec = emb.embed(varied)
        ref = vec if ref is None else ref
        c = (vec * ref).sum(1)
        emb.embed(chunks)
        ms = median_time(lambda: emb.embed(chunks), 3)[0] * 1000  # noqa: B023
        emb.close()
        print(
            f"| {name} | {c.min():.4f} | {c.mean():.5f} | {percentile(c, 1):.4f} | {len(data) / 1e6:.1f} | {ms:.0f} |",
            flush=True,
        )


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    ort.set_default_logger_severity(3)
    main()
