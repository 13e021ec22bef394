"""The graph builder against a float64 numpy BERT, on a tiny random model (no real weights needed)."""

from __future__ import annotations

import numpy as np
import pytest

from contextsieve.errors import ModelError
from contextsieve.models.cpu import int8_weight_type
from contextsieve.models.graph import QuantPlan, build_graph, collect_bert_weights, quantize_weight
from contextsieve.models.quantize import LAYER_KINDS, smooth_weights
from contextsieve.models.runtime import onnxruntime
from tests.conftest import bert_oracle, tiny_config, tiny_tensors

ort = onnxruntime()  # telemetry off, as contextsieve imports it


def run(model, ids: np.ndarray, mask: np.ndarray, name: str = "sentence_embedding") -> np.ndarray:  # noqa: ANN001
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    feeds = {"input_ids": ids, "attention_mask": mask}
    if "token_type_ids" in {i.name for i in sess.get_inputs()}:
        feeds["token_type_ids"] = np.zeros_like(ids)
    return sess.run([name], feeds)[0]


def batch(seed: int, lengths: list[int], vocab: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    S = max(lengths)
    ids = np.zeros((len(lengths), S), dtype=np.int64)
    mask = np.zeros_like(ids)
    for r, n in enumerate(lengths):
        ids[r, :n] = rng.integers(1, vocab, n)
        mask[r, :n] = 1
    return ids, mask


@pytest.mark.parametrize("lengths", [[1], [2, 2], [7, 3, 1], [17, 16, 5, 2]])
def test_fp32_graph_matches_numpy_oracle(tiny, tiny_weights, lengths: list[int]) -> None:  # noqa: ANN001
    cfg, tensors = tiny
    ids, mask = batch(len(lengths), lengths, cfg.vocab_size)
    got = run(build_graph(tiny_weights, cfg), ids, mask)
    want = bert_oracle(tensors, cfg, ids, mask)
    np.testing.assert_allclose(got, want, atol=2e-5)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)


def test_token_output_pools_to_the_same_vectors(tiny, tiny_weights) -> None:  # noqa: ANN001
    from contextsieve.kernels.pooling import mean_pool_normalize

    cfg, tensors = tiny
    ids, mask = batch(3, [9, 4, 6], cfg.vocab_size)
    hidden = run(build_graph(tiny_weights, cfg, output="token"), ids, mask, "last_hidden_state")
    assert hidden.shape == (3, 9, cfg.hidden_size)
    np.testing.assert_allclose(mean_pool_normalize(hidden, mask), bert_oracle(tensors, cfg, ids, mask), atol=2e-5)


def test_padding_does_not_change_a_row(tiny, tiny_weights) -> None:  # noqa: ANN001
    cfg, _ = tiny
    model = build_graph(tiny_weights, cfg)
    ids, mask = batch(5, [11, 4], cfg.vocab_size)
    together = run(model, ids, mask)
    alone = run(model, ids[1:, :4], mask[1:, :4])
    np.testing.assert_allclose(together[1], alone[0], atol=1e-6)


def test_smoothing_is_exact_in_fp32(tiny, tiny_weights) -> None:  # noqa: ANN001
    cfg, tensors = tiny
    rng = np.random.default_rng(3)
    layers = [f"L{i}.{k}" for i in range(cfg.num_layers) for k in LAYER_KINDS]
    amax = {name: rng.uniform(0.1, 20.0, tiny_weights.linears[name].w.shape[0]).astype(np.float32) for name in layers}
    smoothed = smooth_weights(tiny_weights, amax, 0.65, layers)
    assert tiny_weights.linears["L0.ffn_in"].smooth is None, "smoothing must not modify its input"
    ids, mask = batch(7, [12, 8, 3], cfg.vocab_size)
    np.testing.assert_allclose(
        run(build_graph(smoothed, cfg), ids, mask), bert_oracle(tensors, cfg, ids, mask), atol=3e-5
    )


@pytest.mark.parametrize("weights", ["this cpu", "u8"])
def test_int8_graph_stays_close_to_oracle(tiny, tiny_weights, weights) -> None:  # noqa: ANN001
    """int8 graphs with the weight type this CPU gets, and with uint8 weights (the no-VNNI path) forced."""
    cfg, tensors = tiny
    layers = frozenset(f"L{i}.{k}" for i in range(cfg.num_layers) for k in LAYER_KINDS)
    plan = QuantPlan(layers, unsigned_weights=(weights == "u8" or int8_weight_type() == "u8"))
    ids, mask = batch(11, [15, 15, 9, 2], cfg.vocab_size)
    got = run(build_graph(tiny_weights, cfg, plan), ids, mask)
    cos = (got * bert_oracle(tensors, cfg, ids, mask)).sum(1)
    assert cos.min() > 0.99, cos
    # and int8 is really in the graph
    ops = {n.op_type for n in build_graph(tiny_weights, cfg, plan).graph.node}
    assert "MatMulIntegerToFloat" in ops and "MatMul" in ops  # MatMul only in pooling


@pytest.mark.parametrize("lengths", [[1], [7, 3, 1], [17, 16, 5, 2]])
def test_int8_word_table_is_gathered_row_by_row_and_matches_its_dequantised_oracle(tiny, tiny_weights, lengths) -> None:  # noqa: ANN001, E501
    """The int8 embedding path (Gather of int8 rows, their scales, positions, LayerNorm, token counts as
    the attention mask) computes exactly what the float graph computes from the dequantised table."""
    import copy

    cfg, tensors = tiny
    model = build_graph(tiny_weights, cfg, QuantPlan(int8_embeddings=True))
    word_q = next(t for t in model.graph.initializer if t.name == "word.q")
    assert word_q.data_type == 3  # int8: no float table in the graph (nor folded into the session)
    assert "EmbedLayerNormalization" not in {n.op_type for n in model.graph.node}
    scale = np.maximum(np.abs(tiny_weights.word).max(axis=1) / 127.0, 1e-12).astype(np.float32)
    deq = copy.copy(tiny_weights)
    deq.word = (np.clip(np.rint(tiny_weights.word / scale[:, None]), -127, 127) * scale[:, None]).astype(np.float32)
    ids, mask = batch(len(lengths) + 20, lengths, cfg.vocab_size)
    np.testing.assert_allclose(run(model, ids, mask), run(build_graph(deq, cfg), ids, mask), atol=2e-6)


def test_quantize_weight_per_column() -> None:
    rng = np.random.default_rng(0)
    w = rng.standard_normal((64, 8)).astype(np.float32) * np.array([1, 10, 100, 0.01, 1, 1, 1, 1], dtype=np.float32)
    q, s = quantize_weight(w)
    assert q.dtype == np.int8 and s.shape == (8,)
    assert np.abs(q).max() <= 127
    np.testing.assert_allclose(q * s, w, atol=float(s.max()) / 2 + 1e-7)
    assert (np.abs(q * s - w) <= s / 2 + 1e-6).all()  # every column within half a step of its own scale


def test_safetensors_reads_each_tensor_and_refuses_bad_headers(tmp_path) -> None:  # noqa: ANN001
    import json
    import struct

    from contextsieve.models.weights import read_safetensors

    a, b = np.arange(6, dtype=np.float32).reshape(2, 3), np.arange(4, dtype=np.float32)
    header = {
        "a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
        "b": {"dtype": "F32", "shape": [4], "data_offsets": [24, 40]},
    }  # noqa: E501

    def write(h: object, body: bytes = a.tobytes() + b.tobytes()) -> object:
        raw = json.dumps(h).encode()
        path = tmp_path / "w.safetensors"
        path.write_bytes(struct.pack("<Q", len(raw)) + raw + body)
        return path

    got = read_safetensors(write(header))
    np.testing.assert_array_equal(got["a"], a)
    np.testing.assert_array_equal(got["b"], b)
    bad_offsets = {**header, "b": {"dtype": "F32", "shape": [4], "data_offsets": [24, 4000]}}
    for bad in (bad_offsets, [1, 2], {"a": {"dtype": "F32"}}):
        with pytest.raises(ModelError):
            read_safetensors(write(bad))
    path = tmp_path / "huge_header.safetensors"
    path.write_bytes(struct.pack("<Q", 10**12) + b"{}")
    with pytest.raises(ModelError):
        read_safetensors(path)


def test_missing_tensor_is_a_model_error(tiny) -> None:  # noqa: ANN001
    cfg, tensors = tiny
    broken = {k: v for k, v in tensors.items() if "layer.1.output.dense.bias" not in k}
    with pytest.raises(ModelError, match="layer.1.output.dense.bias"):
        collect_bert_weights(broken, cfg)


def test_cls_pooling_and_bert_prefix() -> None:
    cfg = tiny_config(pooling="cls")
    tensors = {"bert." + k: v for k, v in tiny_tensors(cfg, seed=4).items()}
    w = collect_bert_weights(tensors, cfg)
    ids, mask = batch(2, [6, 3], cfg.vocab_size)
    hidden = run(build_graph(w, cfg, output="token"), ids, mask, "last_hidden_state")
    cls = hidden[:, 0] / np.linalg.norm(hidden[:, 0], axis=1, keepdims=True)
    np.testing.assert_allclose(run(build_graph(w, cfg), ids, mask), cls, atol=1e-6)


def test_bad_output_kind() -> None:
    cfg = tiny_config()
    with pytest.raises(ModelError, match="output"):
        build_graph(collect_bert_weights(tiny_tensors(cfg), cfg), cfg, output="pooled")


def test_outlier_split_is_exact_without_int8_and_helps_with_it(tiny, tiny_weights) -> None:  # noqa: ANN001
    from contextsieve.models.quantize import split_outliers

    cfg, tensors = tiny
    layers = [f"L{i}.{k}" for i in range(cfg.num_layers) for k in LAYER_KINDS]
    rng = np.random.default_rng(5)
    amax = {n: rng.uniform(0.1, 5.0, tiny_weights.linears[n].w.shape[0]).astype(np.float32) for n in layers}
    split = split_outliers(tiny_weights, amax, ["L0.ffn_out", "L1.ffn_out"], k=4)
    assert split.linears["L0.ffn_out"].fp32_inputs.tolist() == sorted(np.argsort(-amax["L0.ffn_out"])[:4].tolist())
    ids, mask = batch(13, [10, 6], cfg.vocab_size)
    want = bert_oracle(tensors, cfg, ids, mask)
    plan = QuantPlan(frozenset(layers), unsigned_weights=int8_weight_type() == "u8")
    got = run(build_graph(split, cfg, plan), ids, mask)
    assert (got * want).sum(1).min() > 0.99
    ops = [n.op_type for n in build_graph(split, cfg, QuantPlan(frozenset(layers))).graph.node]
    assert ops.count("Gather") == 2  # one outlier gather per split layer
