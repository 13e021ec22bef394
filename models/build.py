"""Build the ONNX bytes of a model variant from a sentence-transformers folder (no torch).

``BUILDER_VERSION`` (in :mod:`~contextsieve.models.registry`, so loading never imports ``onnx``) is
part of every cache key: bump it whenever the graph or the int8 recipe changes, so caches built by
older code are rebuilt, never reused.
"""

from __future__ import annotations

from pathlib import Path

from contextsieve.models.graph import QuantPlan, build_graph, collect_bert_weights
from contextsieve.models.quantize import (
    LAYER_KINDS,
    SMOOTH_ALPHA,
    activation_ranges,
    calibration_texts,
    smooth_weights,
    split_outliers,
)
from contextsieve.models.registry import Variant
from contextsieve.models.tokenizer import TextTokenizer
from contextsieve.models.weights import read_bert_config, read_safetensors

__all__ = ["build_onnx", "W7_OUTLIER_CHANNELS", "W7_OUTLIER_KINDS"]

#: int8w7 keeps this many of the largest-range input channels in fp32 in each layer of
#: :data:`W7_OUTLIER_KINDS` (int8 keeps 8, in ``ffn_out`` only). Measured on the golden set: 7-bit
#: weights with int8's 8 channels reach min / mean cosine 0.9912 / 0.9971 (below the mean bar of
#: 0.998); 16 in ffn_out and ffn_in 0.9948 / 0.9979; 32 in qkv, ffn_in and ffn_out 0.9959 / 0.9983.
W7_OUTLIER_CHANNELS = 32
W7_OUTLIER_KINDS = ("qkv", "ffn_in", "ffn_out")


def build_onnx(folder: Path, variant: Variant | str, *, output: str = "sentence", weight_type: str = "s8") -> bytes:
    """Serialized ONNX model of ``variant`` built from ``folder``'s weights.

    Args:
        folder: a sentence-transformers BERT folder (``model.safetensors``, ``config.json``, ``tokenizer.json``).
        variant: ``"fp32"``, ``"int8"`` or ``"int8w7"`` (7-bit weights); the int8 variants calibrate
            activation ranges on the shipped text first.
        output: ``"sentence"`` (unit vectors) or ``"token"`` (last hidden state, for other runtimes).
        weight_type: int8 weights as ``"s8"`` (default) or ``"u8"`` (the same integers for CPUs without
            VNNI; see :func:`contextsieve.models.cpu.int8_weight_type`). Ignored for fp32 and int8w7
            (7-bit weights are stored signed: they cannot saturate the u8 x s8 kernel).
    """
    folder = Path(folder)
    variant = Variant(variant)
    cfg = read_bert_config(folder)
    weights = collect_bert_weights(read_safetensors(folder / "model.safetensors"), cfg)
    if variant is Variant.FP32:
        return build_graph(weights, cfg, output=output).SerializeToString()
    layers = [f"L{i}.{kind}" for i in range(cfg.num_layers) for kind in LAYER_KINDS]
    tok = TextTokenizer.from_file(folder / "tokenizer.json", cfg.max_seq_length)
    amax = activation_ranges(weights, cfg, calibration_texts(), tok)
    prepared = smooth_weights(weights, amax, SMOOTH_ALPHA, layers)
    if variant is Variant.INT8_W7:  # 7-bit weights lose more: more fp32 input channels, in three layer kinds
        kinds = W7_OUTLIER_KINDS
        prepared = split_outliers(
            prepared, amax, [f"L{i}.{k}" for i in range(cfg.num_layers) for k in kinds], k=W7_OUTLIER_CHANNELS
        )
    else:
        prepared = split_outliers(prepared, amax, [f"L{i}.ffn_out" for i in range(cfg.num_layers)])
    return build_graph(
        prepared,
        cfg,
        QuantPlan(
            frozenset(layers),
            int8_embeddings=True,
            unsigned_weights=variant is Variant.INT8 and weight_type == "u8",
            weight_levels=63 if variant is Variant.INT8_W7 else 127,
        ),
        output=output,
    ).SerializeToString()
