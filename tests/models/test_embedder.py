"""The Embedder on the real all-MiniLM-L6-v2 weights, against sentence-transformers golden vectors."""

from __future__ import annotations

import os

import numpy as np
import pytest

from contextsieve import Embedder
from contextsieve.errors import ContextSieveError, InputError, ModelFilesNotFoundError, UnknownModelError
from contextsieve.models.build import build_onnx
from contextsieve.models.cpu import WEIGHTS_ENV
from contextsieve.models.registry import get_model, list_models, resolve_folder


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def test_fp32_matches_sentence_transformers_on_every_golden_text(fp32, golden) -> None:  # noqa: ANN001
    texts, ref, _ = golden
    got = fp32.embed(texts)
    c = cosines(got, ref)
    assert c.min() >= 0.99999, [(texts[i][:30], float(c[i])) for i in np.argsort(c)[:3]]


def test_int8_within_the_quality_bar(int8, golden) -> None:  # noqa: ANN001
    texts, ref, _ = golden
    c = cosines(int8.embed(texts), ref)
    assert c.min() >= 0.99, [(texts[i][:30], float(c[i])) for i in np.argsort(c)[:3]]
    assert c.mean() >= 0.998, c.mean()


def test_unsigned_int8_weights_pass_the_quality_bar_on_any_cpu(model_cache, golden, monkeypatch) -> None:  # noqa: ANN001
    """The graph CPUs without VNNI get (forced here, whatever this CPU is): same recipe, uint8 weights."""
    monkeypatch.setenv(WEIGHTS_ENV, "u8")
    emb = Embedder(variant="int8", cache_dir=model_cache)
    texts, ref, _ = golden
    c = cosines(emb.embed(texts), ref)
    assert c.min() >= 0.99 and c.mean() >= 0.998, (float(c.min()), float(c.mean()))


def test_int8_weight_type_follows_the_cpu_and_the_override(monkeypatch) -> None:  # noqa: ANN001
    import contextsieve.models.cpu as cpu

    monkeypatch.delenv(WEIGHTS_ENV, raising=False)
    monkeypatch.setattr(cpu.platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(cpu, "cpu_flags", lambda: frozenset({"avx2", "fma"}))
    assert cpu.int8_weight_type() == "u8"
    monkeypatch.setattr(cpu, "cpu_flags", lambda: frozenset({"avx2", "avx512_vnni"}))
    assert cpu.int8_weight_type() == "s8"
    monkeypatch.setattr(cpu.platform, "machine", lambda: "aarch64")
    monkeypatch.setattr(cpu, "cpu_flags", lambda: frozenset())
    assert cpu.int8_weight_type() == "s8"
    monkeypatch.setenv(WEIGHTS_ENV, "u8")
    assert cpu.int8_weight_type() == "u8"
    monkeypatch.setenv(WEIGHTS_ENV, "x9")
    with pytest.raises(InputError, match="must be 's8' or 'u8'"):
        cpu.int8_weight_type()


def test_long_texts_truncate_like_sentence_transformers(fp32, golden) -> None:  # noqa: ANN001
    texts, ref, ntok = golden
    long_idx = [i for i, n in enumerate(ntok) if n > 256]
    assert len(long_idx) >= 5, "the golden set must hold texts over the 256-token window"
    got = fp32.embed([texts[i] for i in long_idx])
    assert cosines(got, ref[long_idx]).min() >= 0.99999
    assert fp32.count_tokens([texts[i] for i in long_idx], truncate=True) == [256] * len(long_idx)
    assert fp32.count_tokens([texts[i] for i in long_idx]) == [int(ntok[i]) for i in long_idx]


@pytest.mark.parametrize("variant", ["fp32", "int8"])
def test_batched_equals_one_by_one(variant: str, request: pytest.FixtureRequest, golden) -> None:  # noqa: ANN001
    emb: Embedder = request.getfixturevalue(variant)
    texts = golden[0][:40]
    together = emb.embed(texts)
    alone = np.vstack([emb.embed([t]) for t in texts])
    assert cosines(together, alone).min() >= 0.99999


def test_sorted_bucketing_keeps_input_order(fp32, golden) -> None:  # noqa: ANN001
    texts = golden[0]
    perm = np.random.default_rng(0).permutation(len(texts))
    base = fp32.embed(texts)
    shuffled = fp32.embed([texts[i] for i in perm])
    np.testing.assert_allclose(shuffled, base[perm], atol=2e-6)


def test_two_threads_give_the_vectors_of_one(model_cache, golden) -> None:  # noqa: ANN001
    texts = golden[0] * 3
    one = Embedder(variant="fp32", cache_dir=model_cache, threads=1, batch_tokens=256)
    two = Embedder(variant="fp32", cache_dir=model_cache, threads=2, batch_tokens=256)
    np.testing.assert_allclose(one.embed(texts), two.embed(texts), atol=2e-6)
    two.close()


def test_edge_inputs(int8) -> None:  # noqa: ANN001
    assert int8.embed([]).shape == (0, 384)
    assert int8.embed(()).dtype == np.float32
    out = int8.embed(["", " ", "\n\t", "🙂", "x" * 10000, "\x00\x01"])
    assert out.shape == (6, 384)
    assert np.isfinite(out).all()
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(out[0], out[1], atol=1e-6)  # empty and blank tokenize the same


@pytest.mark.parametrize("bad", ["one string", b"bytes", ["ok", 3], [None], 42, {"a"}])
def test_non_str_input_is_a_typed_error(int8, bad: object) -> None:  # noqa: ANN001
    with pytest.raises(InputError):
        int8.embed(bad)  # type: ignore[arg-type]
    assert issubclass(InputError, ContextSieveError)


def test_options_are_validated(model_cache) -> None:  # noqa: ANN001
    with pytest.raises(InputError, match="threads"):
        Embedder(variant="int8", cache_dir=model_cache, threads=0)
    with pytest.raises(InputError, match="batch_size"):
        Embedder(variant="int8", cache_dir=model_cache, batch_size=0)


def test_unknown_model_lists_known_names() -> None:
    with pytest.raises(UnknownModelError, match="all-MiniLM-L6-v2"):
        get_model("no-such-model")
    assert "all-MiniLM-L6-v2" in list_models()
    assert get_model("sentence-transformers/all-MiniLM-L6-v2").dim == 384


def test_hub_style_name_resolves_through_the_registry(model_cache) -> None:  # noqa: ANN001
    emb = Embedder("sentence-transformers/all-MiniLM-L6-v2", variant="int8", cache_dir=model_cache)
    assert emb.info.name == "all-MiniLM-L6-v2"
    with pytest.raises(UnknownModelError, match="known models"):
        Embedder("someone/not-a-model", cache_dir=model_cache)


def test_missing_folder_says_what_is_missing(tmp_path) -> None:  # noqa: ANN001
    with pytest.raises(ModelFilesNotFoundError, match="model.safetensors"):
        Embedder(tmp_path)


def test_user_supplied_onnx_with_token_output(tmp_path, fp32, golden) -> None:  # noqa: ANN001
    """A graph with other inputs/outputs (token_type_ids, last_hidden_state) is read, not assumed."""
    folder = resolve_folder(get_model("all-MiniLM-L6-v2"))
    path = tmp_path / "raw.onnx"
    path.write_bytes(build_onnx(folder, "fp32", output="token"))
    custom = Embedder.from_onnx(path, folder / "tokenizer.json")
    assert custom.info.variant == "custom" and custom.dim == 384
    texts = golden[0][:20]
    assert cosines(custom.embed(texts), fp32.embed(texts)).min() >= 0.99999
    fifo = tmp_path / "pipe.onnx"
    os.mkfifo(fifo)  # reading it would block forever
    for bad in (fifo, tmp_path, tmp_path / "absent.onnx"):
        with pytest.raises(ModelFilesNotFoundError):
            Embedder.from_onnx(bad, folder / "tokenizer.json")


def test_an_idle_embedder_takes_no_cpu(int8) -> None:  # noqa: ANN001
    """The session's threads spin only inside a call: after it returns, the process sleeps."""
    import time

    idle = 0.0
    for _ in range(10):
        int8.embed(["wake the threads", "and once more"] * 8)
        before = time.process_time()
        time.sleep(0.05)
        idle += time.process_time() - before
    assert idle < 0.1  # threads left spinning after each call burn most of each 50 ms


def test_model_info(fp32, int8) -> None:  # noqa: ANN001
    assert fp32.info.model_id != int8.info.model_id
    assert fp32.info.model_id.startswith("all-MiniLM-L6-v2/fp32/")
    assert int8.info.onnx_path is not None and int8.info.onnx_path.exists()
    assert "MatMulIntegerToFloat" in int8.info.onnx_path.read_bytes().decode("latin-1")


def test_count_tokens_does_not_break_a_concurrent_embed(int8) -> None:  # noqa: ANN001
    """Failed before the fix: count_tokens switched truncation off on the shared tokenizer, so an embed
    in another thread sent over 256 tokens to ONNX Runtime (InvalidArgument)."""
    import threading

    long_texts = [("word " * 400 + str(i)) for i in range(4)]
    want = int8.embed(long_texts)
    counts = int8.count_tokens(long_texts)
    assert counts == [403] * 4  # [CLS] + 401 words + [SEP]: over the 256-token window
    errors: list[BaseException] = []
    stop = threading.Event()

    def count() -> None:
        while not stop.is_set():
            got = int8.count_tokens(long_texts)
            if got != counts:
                errors.append(AssertionError(f"count_tokens gave {got}"))

    counter = threading.Thread(target=count)
    counter.start()
    try:
        for _ in range(30):
            try:
                np.testing.assert_allclose(int8.embed(long_texts), want, atol=1e-6)
            except BaseException as e:  # noqa: BLE001 - collected and reported below
                errors.append(e)
    finally:
        stop.set()
        counter.join()
    assert not errors, errors[:2]


def test_lone_surrogates_are_a_typed_input_error(int8) -> None:  # noqa: ANN001
    """Failed before: a raw TypeError from the tokenizer (issue 10 item 3)."""
    with pytest.raises(InputError, match=r"texts\[1\] holds a lone surrogate"):
        int8.embed(["fine", "abc \ud800"])
    with pytest.raises(InputError, match="lone surrogate"):
        int8.count_tokens(["abc \udfff"])


def _brute_cuts(lengths: list[int], max_rows: int, max_tokens: int | None, cost: int) -> int:
    """Lowest calls x cost + padded tokens over every split of the sorted lengths into runs."""
    import itertools

    n = len(lengths)
    best = None
    for mask in itertools.product([0, 1], repeat=max(n - 1, 0)):
        starts = [0] + [i + 1 for i, m in enumerate(mask) if m]
        runs = list(zip(starts, starts[1:] + [n]))
        ok = all(
            b - a <= max_rows and (max_tokens is None or b - a == 1 or (b - a) * lengths[a] <= max_tokens)
            for a, b in runs
        )
        if ok:
            total = sum(cost + (b - a) * lengths[a] for a, b in runs)
            best = total if best is None else min(best, total)
    assert best is not None
    return best


@pytest.mark.parametrize("seed", range(30))
def test_batch_cuts_minimise_calls_and_padding_within_the_limits(seed: int) -> None:
    from contextsieve.models.tokenizer import _cuts

    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 10))
    lengths = sorted(rng.integers(3, 120, n).tolist(), reverse=True)
    max_rows, max_tokens, cost = int(rng.integers(1, 6)), [None, 200, 64][seed % 3], [0, 24, 5][seed % 3]
    runs = _cuts(lengths, max_rows, max_tokens, cost)
    assert runs[0][0] == 0 and runs[-1][1] == n and all(a[1] == b[0] for a, b in zip(runs, runs[1:]))
    for a, b in runs:
        assert b - a <= max_rows and (max_tokens is None or b - a == 1 or (b - a) * lengths[a] <= max_tokens)
    if cost:
        assert sum(cost + (b - a) * lengths[a] for a, b in runs) == _brute_cuts(lengths, max_rows, max_tokens, cost)


def test_a_long_text_does_not_pad_short_ones_and_vectors_do_not_depend_on_the_cut(int8) -> None:  # noqa: ANN001
    long = "word " * 120
    short = ["a short query", "another short one", "a third"]
    batches = list(int8.tokenizer.batches([long, *short], 64, 512, 24))
    assert [b.input_ids.shape[0] for b in batches] == [1, 3]
    together = int8.embed([long, *short])
    np.testing.assert_allclose(together[1:], int8.embed(short), atol=1e-6)
    np.testing.assert_allclose(together[:1], int8.embed([long]), atol=1e-6)
