"""Build an ONNX Runtime graph for a BERT-family sentence encoder from its weights, with numpy and onnx.

No torch: the weights are read from safetensors and laid into ONNX Runtime's fused CPU contrib ops
(``com.microsoft``): ``EmbedLayerNormalization`` (embeddings + LayerNorm + per-row token count),
``Attention`` (fp32: QKV projection + attention in one op) or ``MultiHeadAttention`` (int8: after an
int8 QKV projection), ``BiasGelu`` (exact erf GELU). Residual + LayerNorm runs as two ``Add`` and
ONNX ``LayerNormalization``, which measured faster here than ORT's ``SkipLayerNormalization`` (that
kernel accumulates in double) and than ``InstanceNormalization`` over a ``[1, rows, hidden]`` view plus
a gamma ``Mul`` and beta ``Add`` (``benchmarks/speed/int8_recipe.py`` has the accuracy of each int8 step).
Masked mean pooling and L2 normalisation end the graph.

Inputs: ``input_ids`` and ``attention_mask`` (int64, ``[batch, seq]``, padding on the right).
Output: ``sentence_embedding`` (float32, ``[batch, hidden]``, unit norm). With ``output="token"`` the
graph instead takes ``token_type_ids`` too and returns ``last_hidden_state`` ``[batch, seq, hidden]``,
the layout other runtimes (fastembed) expect.

int8 dense layers (see :mod:`contextsieve.models.quantize` for why) quantise weights per output
channel and activations per token row: ``QuantizeLinear`` with a per-row scale, then
``MatMulIntegerToFloat`` (u8 x s8, VNNI) with the ``[rows, 1]`` activation scale.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from contextsieve.errors import ModelError
from contextsieve.models.weights import BertConfig

__all__ = ["QuantPlan", "LinearWeights", "BertWeights", "collect_bert_weights", "quantize_weight", "build_graph"]

MS = "com.microsoft"
OPSET = 21


@dataclass(frozen=True)
class QuantPlan:
    """Which dense layers run in int8.

    Attributes:
        int8_layers: names of the linear layers computed in int8 (``"L{i}.qkv"``, ``"L{i}.attn_out"``,
            ``"L{i}.ffn_in"``, ``"L{i}.ffn_out"``); the rest stay fp32. Empty (default) = the fp32 graph.
        int8_embeddings: store the word-embedding table as int8 with one scale per row (4x smaller
            file; ORT folds the dequantisation once when the session is created, so speed is unchanged).
        per_tensor_activations: one activation scale per tensor (ORT's fused ``DynamicQuantizeMatMul``)
            instead of one per token row. Kept as the baseline of ``benchmarks/speed/int8_recipe.py``: it
            loses too much accuracy on MiniLM (mean cosine 0.992) to be a default.
        unsigned_weights: store int8 weights as uint8 with zero point 128 (the same integers, so the
            same vectors) for CPUs without VNNI: there ONNX Runtime's u8 x s8 kernel adds pairs of
            products in saturating 16-bit lanes (``vpmaddubsw``) and loses accuracy, while its u8 x u8
            kernel widens to 16 bits first and is exact. Default ``False`` (u8 x s8, exact with VNNI).
        weight_levels: largest weight integer (symmetric, per output column). 127 (default) is int8;
            63 is 7-bit weights, which the u8 x s8 kernel of CPUs without VNNI can never saturate
            (255 x 63 x 2 = 32,130 < 32,767), so it is exact there without the slower u8 x u8 kernel.
    """

    int8_layers: frozenset[str] = field(default_factory=frozenset)
    int8_embeddings: bool = False
    per_tensor_activations: bool = False
    unsigned_weights: bool = False
    weight_levels: int = 127

    def __post_init__(self) -> None:
        if not 1 <= self.weight_levels <= 127:
            raise ValueError(f"weight_levels must lie in 1..127, got {self.weight_levels}")


@dataclass
class LinearWeights:
    """A dense layer ``y = x @ w + b`` with ``w`` laid out ``[in, out]`` (transposed from torch).

    ``smooth`` (SmoothQuant, per input channel, ``[in]``), when set, means the graph computes
    ``(x / smooth) @ (smooth[:, None] * w)``: the same product with activation outliers moved into the
    weights, where per-channel int8 absorbs them.

    ``fp32_inputs`` (input channel indices), when set on an int8 layer, keeps those channels' share of
    the product in fp32 (LLM.int8-style decomposition): the outlier channels no longer set every row's
    int8 scale.
    """

    w: np.ndarray
    b: np.ndarray
    smooth: np.ndarray | None = None
    fp32_inputs: np.ndarray | None = None


@dataclass
class BertWeights:
    """All tensors the graph needs, in the layout the graph wants (float32, ``[in, out]`` matrices)."""

    word: np.ndarray
    position: np.ndarray
    token_type: np.ndarray
    emb_ln: tuple[np.ndarray, np.ndarray]
    linears: dict[str, LinearWeights]
    lns: dict[str, tuple[np.ndarray, np.ndarray]]


def collect_bert_weights(tensors: dict[str, np.ndarray], cfg: BertConfig) -> BertWeights:
    """Map HF BERT tensor names to :class:`BertWeights`; raises :class:`ModelError` on a missing tensor."""
    prefix = "bert." if "bert.embeddings.word_embeddings.weight" in tensors else ""

    def t(name: str) -> np.ndarray:
        try:
            return np.ascontiguousarray(tensors[prefix + name], dtype=np.float32)
        except KeyError as e:
            raise ModelError(f"weights lack tensor {prefix + name!r}") from e

    linears: dict[str, LinearWeights] = {}
    lns: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for i in range(cfg.num_layers):
        p = f"encoder.layer.{i}."
        q, k, v = (t(p + f"attention.self.{n}.weight") for n in ("query", "key", "value"))
        qb, kb, vb = (t(p + f"attention.self.{n}.bias") for n in ("query", "key", "value"))
        linears[f"L{i}.qkv"] = LinearWeights(
            np.ascontiguousarray(np.concatenate([q.T, k.T, v.T], axis=1)), np.concatenate([qb, kb, vb])
        )
        for name, src in (
            ("attn_out", "attention.output.dense"),
            ("ffn_in", "intermediate.dense"),
            ("ffn_out", "output.dense"),
        ):
            linears[f"L{i}.{name}"] = LinearWeights(
                np.ascontiguousarray(t(p + src + ".weight").T), t(p + src + ".bias")
            )
        lns[f"L{i}.ln1"] = (t(p + "attention.output.LayerNorm.weight"), t(p + "attention.output.LayerNorm.bias"))
        lns[f"L{i}.ln2"] = (t(p + "output.LayerNorm.weight"), t(p + "output.LayerNorm.bias"))
    word = t("embeddings.word_embeddings.weight")
    if word.shape != (cfg.vocab_size, cfg.hidden_size):
        raise ModelError(f"word embeddings have shape {word.shape}, config says {(cfg.vocab_size, cfg.hidden_size)}")
    return BertWeights(
        word=word,
        position=t("embeddings.position_embeddings.weight"),
        token_type=t("embeddings.token_type_embeddings.weight"),
        emb_ln=(t("embeddings.LayerNorm.weight"), t("embeddings.LayerNorm.bias")),
        linears=linears,
        lns=lns,
    )


def quantize_weight(w: np.ndarray, levels: int = 127) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric per-output-column int8 quantisation of ``w`` ``[in, out]``: ``(q int8, scale [out])``,
    integers in ``-levels .. levels`` (default 127; 63 for 7-bit weights, see :class:`QuantPlan`)."""
    scale = np.maximum(np.abs(w).max(axis=0) / float(levels), np.float32(1e-12)).astype(np.float32)
    q = np.clip(np.rint(w / scale), -levels, levels).astype(np.int8)
    return q, scale


class _Builder:
    """Accumulates nodes and initializers; names every node output uniquely."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self._n = 0
        self._shared: dict[str, str] = {}
        self.linear_inputs: dict[str, str] = {}

    def init(self, name: str, arr: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(np.asarray(arr, order="C"), name))  # keeps 0-d scalars 0-d
        return name

    def node(self, op: str, inputs: list[str], n_out: int = 1, domain: str = "", **attrs: Any) -> list[str]:
        self._n += 1
        outs = [f"{op}_{self._n}_{j}" for j in range(n_out)]
        self.nodes.append(helper.make_node(op, inputs, outs, name=f"{op}_{self._n}", domain=domain, **attrs))
        return outs

    def shared(self, key: str, make: Callable[[], str]) -> str:
        """A value computed once per graph (shapes, constants) and reused by every layer."""
        if key not in self._shared:
            self._shared[key] = make()
        return self._shared[key]


def _linear(g: _Builder, x: str, name: str, lw: LinearWeights, plan: QuantPlan, bias: bool) -> str:
    """Emit ``x @ w`` (``+ b`` when ``bias``); the caller fuses the bias later otherwise."""
    g.linear_inputs[name] = x
    w = lw.w
    split = name in plan.int8_layers and lw.fp32_inputs is not None
    keep = np.ones(w.shape[0], dtype=np.float32)
    if split:
        keep[np.asarray(lw.fp32_inputs, dtype=np.int64)] = 0.0
    x_in = x
    if lw.smooth is not None:  # one Mul smooths and, for a split layer, zeroes the fp32 channels too
        x = g.node("Mul", [x, g.init(name + ".inv_smooth", (keep / lw.smooth).astype(np.float32))])[0]
        w = (lw.smooth[:, None] * w).astype(np.float32)
    elif split:
        x = g.node("Mul", [x, g.init(name + ".keep", keep)])[0]
    if split:
        # outlier input channels in fp32 (a K=len(idx) matmul on the unsmoothed input and weights), the
        # rest in int8 with those channels zeroed
        idx = np.asarray(lw.fp32_inputs, dtype=np.int64)
        outl = g.node(
            "MatMul",
            [g.node("Gather", [x_in, g.init(name + ".out_idx", idx)], axis=-1)[0], g.init(name + ".w_out", lw.w[idx])],
        )[0]
        y = g.node("Add", [_row_int8_matmul(g, x, name, w * keep[:, None], plan), outl])[0]
    elif name in plan.int8_layers and plan.per_tensor_activations:
        q, wscale = quantize_weight(w, plan.weight_levels)
        zeros = g.init(name + ".wz", np.zeros(wscale.shape, dtype=np.int8))
        y = g.node(
            "DynamicQuantizeMatMul", [x, g.init(name + ".wq", q), g.init(name + ".ws", wscale), zeros], domain=MS
        )[0]
    elif name in plan.int8_layers:
        y = _row_int8_matmul(g, x, name, w, plan)
    else:
        y = g.node("MatMul", [x, g.init(name + ".w", w)])[0]
    if bias:
        y = g.node("Add", [y, g.init(name + ".b", lw.b)])[0]
    return y


def _row_int8_matmul(g: _Builder, x: str, name: str, w: np.ndarray, plan: QuantPlan) -> str:
    """int8 ``x @ w`` for 2-D ``x`` ``[rows, in]``, one activation scale per row (symmetric, uint8 around 128).

    ``MatMulIntegerToFloat`` applies the ``[rows, 1]`` activation scale and the per-column weight scale.
    (Its own bias input is not used: ORT 1.31 gets it wrong together with a ``[rows, 1]`` scale.)
    """
    q, wscale = quantize_weight(w, plan.weight_levels)
    step = g.shared("c127", lambda: g.init("row.c127", np.array(1.0 / 127.0, dtype=np.float32)))
    floor = g.shared("floor", lambda: g.init("row.floor", np.array(1e-8, dtype=np.float32)))
    zp = g.shared("zp128", lambda: g.init("row.zp128", np.array(128, dtype=np.uint8)))
    zp_rows = g.shared(
        "zp_rows", lambda: g.node("Expand", [zp, g.node("Concat", [_rows(g), _const(g, "one", [1])], axis=0)[0]])[0]
    )  # [T, 1]
    amax = g.node("ReduceMax", [g.node("Abs", [x])[0], _const(g, "one", [1])], keepdims=1)[0]  # [T, 1]
    scale = g.node("Max", [g.node("Mul", [amax, step])[0], floor])[0]
    # one scale per row: a block of the whole row (opset 21 blocked quantization), no reshape of the scale
    xq = g.node("QuantizeLinear", [x, scale, zp_rows], axis=1, block_size=w.shape[0])[0]
    if plan.unsigned_weights:  # the same integers shifted by 128 (see QuantPlan.unsigned_weights)
        q = (q.astype(np.int16) + 128).astype(np.uint8)
        wz = g.init(name + ".wz", np.full(wscale.shape, 128, dtype=np.uint8))
    else:
        wz = g.init(name + ".wz", np.zeros(wscale.shape, dtype=np.int8))
    return g.node(
        "MatMulIntegerToFloat", [xq, g.init(name + ".wq", q), scale, g.init(name + ".ws", wscale), zp, wz], domain=MS
    )[0]


def _const(g: _Builder, key: str, values: list[int]) -> str:
    """A shared int64 constant (shapes, axes)."""
    return g.shared("const." + key, lambda: g.init("const." + key, np.array(values, dtype=np.int64)))


def _rows(g: _Builder) -> str:
    """``[T]`` (T = batch x seq), the row count of every 2-D activation; computed once per graph."""
    return g.shared("rows", lambda: g.node("ReduceProd", [g.node("Shape", ["input_ids"])[0]], keepdims=1)[0])


def _to_3d(g: _Builder, x: str, width: int) -> str:
    """``[T, width]`` -> ``[batch, seq, width]``."""
    shape = g.shared(
        f"bs{width}",
        lambda: g.node(
            "Concat",
            [g.shared("shape_bs", lambda: g.node("Shape", ["input_ids"])[0]), _const(g, f"w{width}", [width])],
            axis=0,
        )[0],
    )
    return g.node("Reshape", [x, shape])[0]


def _add_layer_norm(
    g: _Builder, y: str, skip: str, name: str, gamma: np.ndarray, beta: np.ndarray, bias: np.ndarray, eps: float
) -> str:
    """``LayerNorm(y + bias + skip)`` for 2-D ``[T, hidden]`` (ONNX ``LayerNormalization``, float accumulation)."""
    a = g.node("Add", [g.node("Add", [y, g.init(name + ".bias", bias)])[0], skip])[0]
    return g.node(
        "LayerNormalization", [a, g.init(name + ".g", gamma), g.init(name + ".b", beta)], axis=-1, epsilon=eps
    )[0]


def build_graph(
    weights: BertWeights,
    cfg: BertConfig,
    plan: QuantPlan | None = None,
    *,
    output: str = "sentence",
    taps: bool = False,
) -> onnx.ModelProto:
    """Return the ONNX model of the encoder (see the module docstring for inputs and outputs).

    Args:
        weights: tensors from :func:`collect_bert_weights` (possibly smoothed for int8).
        cfg: the encoder's shape.
        plan: which dense layers are int8; ``None`` builds fp32.
        output: ``"sentence"`` (pooled, normalised vectors) or ``"token"`` (last hidden state).
        taps: also output the input of every dense layer, named ``tap:<layer>`` (``[batch*seq, in]``,
            for calibration).
    """
    if output not in ("sentence", "token"):
        raise ModelError(f"output must be 'sentence' or 'token', got {output!r}")
    plan = plan or QuantPlan()
    g = _Builder()
    eps = float(cfg.layer_norm_eps)
    H = cfg.hidden_size

    ids32 = g.node("Cast", ["input_ids"], to=TensorProto.INT32)[0]
    mask32 = g.node("Cast", ["attention_mask"], to=TensorProto.INT32)[0]
    if output == "token":
        tt32 = g.node("Cast", ["token_type_ids"], to=TensorProto.INT32)[0]
        emb_inputs = [
            ids32,
            tt32,
            g.init("word", weights.word),
            g.init("position", weights.position),
            g.init("token_type", weights.token_type),
        ]
    elif not plan.int8_embeddings:  # sentence encoders run with token type 0 everywhere: fold that row in
        emb_inputs = [ids32, "", g.init("word", weights.word), _positions(g, weights), ""]
    if output == "token" or not plan.int8_embeddings:
        emb_inputs += [g.init("emb_ln.g", weights.emb_ln[0]), g.init("emb_ln.b", weights.emb_ln[1]), mask32]
        x3, mask_index = g.node("EmbedLayerNormalization", emb_inputs, n_out=2, domain=MS, epsilon=eps)
    else:
        x3, mask_index = _int8_embeddings(g, weights, ids32, mask32, eps)
    x = g.node("Reshape", [x3, _const(g, f"flat{H}", [-1, H])])[0]  # activations stay [T, H] between layers

    for i in range(cfg.num_layers):
        L = f"L{i}."
        qkv = weights.linears[L + "qkv"]
        if L + "qkv" in plan.int8_layers or qkv.smooth is not None:
            packed = _to_3d(g, _linear(g, x, L + "qkv", qkv, plan, bias=False), 3 * H)
            q, k, v = g.node("Split", [packed, _const(g, "split", [H, H, H])], n_out=3, axis=2)
            att = g.node(
                "MultiHeadAttention",
                [q, k, v, g.init(L + "qkv.b", qkv.b), mask_index],
                domain=MS,
                num_heads=cfg.num_heads,
            )[0]
        else:
            g.linear_inputs[L + "qkv"] = x
            att = g.node(
                "Attention",
                [_to_3d(g, x, H), g.init(L + "qkv.w", qkv.w), g.init(L + "qkv.b", qkv.b), mask_index],
                domain=MS,
                num_heads=cfg.num_heads,
            )[0]
        att = g.node("Reshape", [att, _const(g, f"flat{H}", [-1, H])])[0]
        ao = _linear(g, att, L + "attn_out", weights.linears[L + "attn_out"], plan, bias=False)
        x1 = _add_layer_norm(g, ao, x, L + "ln1", *weights.lns[L + "ln1"], weights.linears[L + "attn_out"].b, eps)
        h = _linear(g, x1, L + "ffn_in", weights.linears[L + "ffn_in"], plan, bias=False)
        h = g.node("BiasGelu", [h, g.init(L + "ffn_in.b", weights.linears[L + "ffn_in"].b)], domain=MS)[0]
        o = _linear(g, h, L + "ffn_out", weights.linears[L + "ffn_out"], plan, bias=False)
        x = _add_layer_norm(g, o, x1, L + "ln2", *weights.lns[L + "ln2"], weights.linears[L + "ffn_out"].b, eps)

    inputs = [
        helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"]),
        helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "seq"]),
    ]
    x = _to_3d(g, x, H)
    if output == "token":
        inputs.append(helper.make_tensor_value_info("token_type_ids", TensorProto.INT64, ["batch", "seq"]))
        _rename_last(g, g.node("Identity", [x])[0], "last_hidden_state")
        outputs = [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["batch", "seq", H])]
    else:
        _rename_last(g, _pool(g, x, cfg), "sentence_embedding")
        outputs = [helper.make_tensor_value_info("sentence_embedding", TensorProto.FLOAT, ["batch", H])]
    if taps:
        for name, src in g.linear_inputs.items():
            _rename_last(g, g.node("Identity", [src])[0], f"tap:{name}")
            outputs.append(helper.make_tensor_value_info(f"tap:{name}", TensorProto.FLOAT, None))
    graph = helper.make_graph(g.nodes, "contextsieve_encoder", inputs, outputs, initializer=g.inits)
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET), helper.make_opsetid(MS, 1)], producer_name="contextsieve"
    )
    model.ir_version = 10
    return model


def _positions(g: _Builder, weights: BertWeights) -> str:
    """Position embeddings with the token-type-0 row added (sentence encoders use type 0 throughout)."""
    return g.init("position", weights.position + weights.token_type[0][None, :])


def _int8_embeddings(g: _Builder, weights: BertWeights, ids32: str, mask32: str, eps: float) -> tuple[str, str]:
    """Embeddings + LayerNorm from an int8 word table (one scale per row), and the per-row token counts.

    Only the rows of the input's tokens are gathered and dequantised: the table stays int8 in the session
    (12 MB instead of a 47 MB float table folded at load, which also took time at every start).
    Returns ``[batch, seq, hidden]`` and the ``[batch]`` int32 token counts (right padding) that
    ``MultiHeadAttention`` takes as its key padding mask.
    """
    scale = np.maximum(np.abs(weights.word).max(axis=1) / 127.0, 1e-12).astype(np.float32)
    q = np.clip(np.rint(weights.word / scale[:, None]), -127, 127).astype(np.int8)
    rows = g.node("Cast", [g.node("Gather", [g.init("word.q", q), ids32], axis=0)[0]], to=TensorProto.FLOAT)[0]
    word = g.node("Mul", [rows, g.node("Gather", [g.init("word.scale", scale[:, None]), ids32], axis=0)[0]])[0]
    seq = g.node("Slice", [g.node("Shape", ["input_ids"])[0], _const(g, "one", [1]), _const(g, "two", [2])])[0]
    pos = g.node("Slice", [_positions(g, weights), _const(g, "zero", [0]), seq, _const(g, "zero", [0])])[0]
    x3 = g.node(
        "LayerNormalization",
        [g.node("Add", [word, pos])[0], g.init("emb_ln.g", weights.emb_ln[0]), g.init("emb_ln.b", weights.emb_ln[1])],
        axis=-1,
        epsilon=eps,
    )[0]
    counts = g.node("ReduceSum", [mask32, _const(g, "one", [1])], keepdims=0)[0]
    return x3, counts


def _rename_last(g: _Builder, produced: str, name: str) -> None:
    """Give the output of the last node (which must be ``produced``) a public graph-output name."""
    if g.nodes[-1].output[0] != produced:
        raise AssertionError("internal: only the last node's output can be renamed")
    g.nodes[-1].output[0] = name


def _pool(g: _Builder, x: str, cfg: BertConfig) -> str:
    """Masked mean (or CLS) pooling, then L2 normalisation (norm floored at 1e-12, like torch)."""
    if cfg.pooling == "mean":
        maskf = g.node("Cast", ["attention_mask"], to=TensorProto.FLOAT)[0]
        axes1 = g.init("pool.axes1", np.array([1], dtype=np.int64))
        cnt = g.node("ReduceSum", [maskf, axes1], keepdims=1)[0]
        cnt = g.node("Max", [cnt, g.init("pool.count_floor", np.array(1e-9, dtype=np.float32))])[0]
        w = g.node("Unsqueeze", [g.node("Div", [maskf, cnt])[0], axes1])[0]  # [B, 1, S]
        pooled = g.node("Squeeze", [g.node("MatMul", [w, x])[0], axes1])[0]  # [B, H]
    else:
        pooled = g.node("Gather", [x, g.init("pool.zero", np.array(0, dtype=np.int64))], axis=1)[0]
    if not cfg.normalize:
        return g.node("Identity", [pooled])[0]
    norm = g.node("ReduceL2", [pooled, g.init("pool.l2_axes", np.array([1], dtype=np.int64))], keepdims=1)[0]
    norm = g.node("Max", [norm, g.init("pool.norm_floor", np.array(1e-12, dtype=np.float32))])[0]
    return g.node("Div", [pooled, norm])[0]
