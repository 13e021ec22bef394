"""The int8 recipe: calibrate activation ranges on shipped text, smooth outliers, quantise per channel.

Dynamic int8 quantisation (``DynamicQuantizeMatMul``) scales each activation tensor with one number per
call. MiniLM's LayerNorm and GELU outputs carry a few outlier channels (an order of magnitude above
the median), which squeeze every other channel into a few int8 steps, so plain per-channel int8 falls
short of fp32 quality. SmoothQuant (Xiao et al., 2023) divides each input channel by
``s_j = amax_x[j]**alpha / amax_w[j]**(1 - alpha)`` and multiplies the matching weight row by ``s_j``,
an exact rewrite that moves the outliers into the weights, where per-output-channel scales absorb them.
For the attention output projection the division folds into the value weights for free; elsewhere the
graph gets one ``Mul`` in front of the int8 matmul.

Two more steps reach fp32 quality: activations are quantised per token row (special tokens carry
their own outliers, and one scale per tensor let them flatten every other token), and the FFN output
layer keeps its 8 largest-range input channels (of 1536) in fp32.

``python -m benchmarks.speed.int8_recipe`` measures each step against fp32 (docs/internals.md has the table).

Activation ranges come from :data:`CALIBRATION_FILE`, text written for this project and shipped with it.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from importlib import resources

import numpy as np

from contextsieve.models.graph import BertWeights, LinearWeights, build_graph
from contextsieve.models.runtime import onnxruntime
from contextsieve.models.tokenizer import TextTokenizer
from contextsieve.models.weights import BertConfig

__all__ = [
    "calibration_texts",
    "activation_ranges",
    "smooth_weights",
    "split_outliers",
    "LAYER_KINDS",
    "SMOOTH_ALPHA",
    "OUTLIER_CHANNELS",
]

LAYER_KINDS = ("qkv", "attn_out", "ffn_in", "ffn_out")
#: SmoothQuant migration strength, swept on the varied accuracy set (``benchmarks/workloads.py``):
#: lower moves too little of the outliers, much higher saturates the weights.
SMOOTH_ALPHA = 0.65
#: Input channels of each FFN output layer kept in fp32 (the largest calibration ranges): where the
#: cosine against fp32 stopped improving on the golden set. Doing the same on ffn_in and qkv gave
#: little for its speed cost, so it is not done.
OUTLIER_CHANNELS = 8


def calibration_texts() -> list[str]:
    """The shipped calibration texts (one per line of ``models/data/calibration.txt``; ``\\n`` escapes)."""
    raw = resources.files("contextsieve.models").joinpath("data/calibration.txt").read_text(encoding="utf-8")
    return [line.replace("\\n", "\n") for line in raw.splitlines() if line and not line.startswith("#")]


def activation_ranges(
    weights: BertWeights, cfg: BertConfig, texts: Sequence[str], tokenizer: TextTokenizer, *, threads: int = 2
) -> dict[str, np.ndarray]:
    """Per-input-channel max |activation| of every dense layer over the real tokens of ``texts`` (fp32 run).

    The calibration graph carries only the word-table rows the texts use (the same arithmetic without
    the 47 MB table held three times, as graph, bytes and session), and batches stay under 512 tokens
    (every layer's input is an output here, 64 KB a token): a first run's graph build peaks under 400 MB.
    """
    ort = onnxruntime()

    batches = list(tokenizer.batches(texts, 16, 512))  # at most 512 tokens: the taps of a batch are 64 KB a token
    used = np.unique(np.concatenate([b.input_ids.reshape(-1) for b in batches]))
    remap = np.zeros(weights.word.shape[0], dtype=np.int64)
    remap[used] = np.arange(used.shape[0])
    compact = copy.copy(weights)
    compact.word = np.ascontiguousarray(weights.word[used])
    data = build_graph(compact, cfg, taps=True).SerializeToString()
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.add_session_config_entry("session.disable_prepacking", "1")  # a packed copy of every weight: 40 MB more
    sess = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
    del data
    names = [o.name for o in sess.get_outputs() if o.name.startswith("tap:")]
    amax: dict[str, np.ndarray] = {}
    for b in batches:
        outs = sess.run(names, {"input_ids": remap[b.input_ids], "attention_mask": b.attention_mask})
        real = b.attention_mask.astype(bool).reshape(-1)
        for name, out in zip(names, outs):
            a = np.abs(out.reshape(real.shape[0], -1)[real]).max(axis=0)
            key = name[4:]
            amax[key] = np.maximum(amax[key], a) if key in amax else a
    return amax


def smooth_weights(
    weights: BertWeights, amax: dict[str, np.ndarray], alpha: float, layers: Sequence[str]
) -> BertWeights:
    """Return a copy of ``weights`` with SmoothQuant scales applied to ``layers`` (exact in real arithmetic).

    ``attn_out`` layers are folded into the value columns of the same layer's ``qkv`` weights; the others
    get ``LinearWeights.smooth`` set, which the graph builder turns into a ``Mul`` plus scaled weights.
    """
    out = _copy(weights)
    for name in layers:
        lw = out.linears[name]
        wmax = np.maximum(np.abs(lw.w).max(axis=1), 1e-5)
        s = np.power(np.maximum(amax[name], 1e-5), alpha) / np.power(wmax, 1.0 - alpha)
        s = (s / np.exp(np.mean(np.log(s)))).astype(np.float32)  # geometric mean 1: keeps magnitudes familiar
        if name.endswith(".attn_out"):
            qkv = out.linears[name.replace("attn_out", "qkv")]
            h = lw.w.shape[0]
            qkv.w[:, 2 * h :] /= s[None, :]
            qkv.b[2 * h :] /= s
            lw.w = (s[:, None] * lw.w).astype(np.float32)
        else:
            lw.smooth = s
    return out


def split_outliers(
    weights: BertWeights, amax: dict[str, np.ndarray], layers: Sequence[str], k: int = OUTLIER_CHANNELS
) -> BertWeights:
    """Return a copy where ``layers`` keep their ``k`` largest-range input channels in fp32."""
    out = _copy(weights)
    for name in layers:
        out.linears[name].fp32_inputs = np.sort(np.argsort(-amax[name], kind="stable")[:k]).astype(np.int64)
    return out


def _copy(weights: BertWeights) -> BertWeights:
    out = copy.copy(weights)
    out.linears = {
        k: LinearWeights(
            v.w.copy(),
            v.b.copy(),
            None if v.smooth is None else v.smooth.copy(),
            None if v.fp32_inputs is None else v.fp32_inputs.copy(),
        )
        for k, v in weights.linears.items()
    }
    return out
