"""variant="auto": candidates measured on this CPU against the golden vectors, the choice cached and
reused, explicit variants and $CONTEXTSIEVE_VARIANT winning, damaged choices measured again."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from contextsieve import Embedder
from contextsieve.errors import InputError
from contextsieve.models import variants as V
from contextsieve.models.registry import Variant, model_family


def _choice_files(cache: Path) -> list[Path]:
    return sorted((cache / "models").glob("*-variant-choice-*.json"))


def test_auto_measures_once_keeps_the_fastest_passing_variant_per_use_and_reuses_it(tmp_path: Path) -> None:
    choice = V.choose_variant(cache_dir=tmp_path)
    assert choice.measured_now
    by = {m.variant: m for m in choice.measurements}
    assert set(by) == {v.value for v in V.candidates()}
    assert by["fp32"].passes and by["fp32"].min_cos > 0.99999  # the reference graph reproduces ST
    passing = [m for m in choice.measurements if m.passes]
    assert all(m.min_cos >= V.MIN_COSINE and m.mean_cos >= V.MEAN_COSINE for m in passing)
    assert choice.query == min(passing, key=lambda m: m.query_p50_ms).variant
    assert choice.batch == min(passing, key=lambda m: m.chunk_ms).variant
    assert all(m.query_p50_ms > 0 and m.chunk_ms > 0 for m in passing)
    table = choice.table()
    assert table.startswith("CPU: ") and "| fp32 |" in table and "queries" in table and "batches" in table
    [path] = _choice_files(tmp_path)
    again = V.choose_variant(cache_dir=tmp_path)
    assert not again.measured_now and again.measurements == choice.measurements
    emb = Embedder(cache_dir=tmp_path)  # the default is auto: the cached choice, no second measurement
    assert emb.info.choice is not None and not emb.info.choice.measured_now
    assert (emb.info.variant, emb.info.query_variant) == (choice.batch, choice.query)
    assert path.stat().st_mtime_ns == _choice_files(tmp_path)[0].stat().st_mtime_ns
    forced = V.choose_variant(cache_dir=tmp_path, force=True)
    assert forced.measured_now


def test_a_candidate_below_the_bars_is_measured_but_never_timed_or_chosen(fp32, int8, golden) -> None:  # noqa: ANN001
    class Noisy:
        """int8 with noise on its vectors: a candidate that misses the bars."""

        def embed(self, texts: list[str]) -> np.ndarray:
            v = int8.embed(texts) + 0.08 * np.random.default_rng(0).standard_normal((len(texts), 384))
            return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)

    texts, ref, _ = golden
    rows = V.measure({Variant.FP32: fp32, Variant.INT8: Noisy()}, texts, ref)  # type: ignore[dict-item]
    by = {m.variant: m for m in rows}
    assert by["fp32"].passes and not by["int8"].passes and by["int8"].mean_cos < V.MEAN_COSINE
    assert math.isnan(by["int8"].query_p50_ms) and math.isnan(by["int8"].chunk_ms)
    choice = V.VariantChoice("fp32", "fp32", "cpu", "ort", 2, tuple(rows), 0.0)
    assert "| int8 |" in choice.table() and "| no | - | - | - |" in choice.table()


def test_seven_bit_weights_pass_the_bars(tmp_path: Path, golden) -> None:  # noqa: ANN001
    """The candidate for CPUs without VNNI: 7-bit weights plus 32 fp32 channels in three layer kinds
    (the u8 x s8 kernel computes it exactly everywhere, so these cosines hold on every CPU)."""
    emb = Embedder(variant="int8w7", cache_dir=tmp_path)
    texts, ref, _ = golden
    c = (emb.embed(texts) * ref).sum(1)
    assert c.min() >= V.MIN_COSINE and c.mean() >= V.MEAN_COSINE, (float(c.min()), float(c.mean()))


def test_seven_bit_weights_lie_in_the_unsaturated_range(tmp_path: Path) -> None:
    import onnx
    from onnx import numpy_helper

    emb = Embedder(variant="int8w7", cache_dir=tmp_path)
    assert emb.info.variant == "int8w7" and emb.info.choice is None
    assert emb.info.onnx_path is not None
    model = onnx.load(str(emb.info.onnx_path))
    wq = [numpy_helper.to_array(t) for t in model.graph.initializer if t.name.endswith(".wq")]
    assert len(wq) == 24 and all(w.dtype == np.int8 for w in wq)
    assert max(int(np.abs(w.astype(np.int16)).max()) for w in wq) == 63  # 255 x 63 x 2 < 32,767


def test_explicit_variant_and_the_environment_win_over_auto(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(V.VARIANT_ENV, "fp32")
    emb = Embedder(cache_dir=tmp_path)
    assert (emb.info.variant, emb.info.query_variant, emb.info.choice) == ("fp32", "fp32", None)
    assert not _choice_files(tmp_path)  # nothing measured
    emb = Embedder(variant="int8", cache_dir=tmp_path)
    assert emb.info.variant == "int8" and emb.info.choice is None
    monkeypatch.setenv(V.VARIANT_ENV, "int4")
    with pytest.raises(InputError, match=r"\$CONTEXTSIEVE_VARIANT must be one of fp32, int8, int8w7, auto"):
        Embedder(cache_dir=tmp_path)
    with pytest.raises(InputError, match="variant must be one of"):
        Embedder(variant="fast", cache_dir=tmp_path)
    assert not _choice_files(tmp_path)


def test_a_damaged_choice_is_measured_again(tmp_path: Path) -> None:
    V.choose_variant(cache_dir=tmp_path, candidate_variants=[Variant.FP32])
    [path] = _choice_files(tmp_path)
    for bad in (b"{not json", json.dumps({"format": 1, "query": "int4"}).encode(), b"\xff\xfe"):
        path.write_bytes(bad)
        choice = V.choose_variant(cache_dir=tmp_path, candidate_variants=[Variant.FP32])
        assert choice.measured_now and choice.query == "fp32"
        assert json.loads(path.read_text())["query"] == "fp32"
    d = json.loads(path.read_text())
    d["query"] = "int8"  # a variant that was not measured (or did not pass) is refused
    path.write_text(json.dumps(d))
    assert V.choose_variant(cache_dir=tmp_path, candidate_variants=[Variant.FP32]).measured_now


def test_queries_and_batches_may_run_different_graphs_and_share_one_vector_family(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, golden
) -> None:  # noqa: ANN001
    """When the choice differs per use, short calls run the query graph and long ones the batch graph;
    both are within the bars and the model family (what caches key on) is the same."""
    fp32 = Embedder(variant="fp32", cache_dir=tmp_path)
    int8 = Embedder(variant="int8", cache_dir=tmp_path)
    real = V.choose_variant

    def split(*a: object, **k: object) -> V.VariantChoice:
        c = real(*a, **k)  # type: ignore[arg-type]
        return V.VariantChoice("int8", "fp32", c.cpu, c.onnxruntime, c.threads, c.measurements, c.measured_at)

    import contextsieve.models.embedder as E

    monkeypatch.setattr(E, "choose_variant", split)
    emb = Embedder(cache_dir=tmp_path)
    assert (emb.info.variant, emb.info.query_variant) == ("fp32", "int8")
    short = ["where is my parcel?"]
    np.testing.assert_array_equal(emb.embed(short), int8.embed(short))
    texts, ref, _ = golden
    long = [t for t in texts if len(t.split()) > 60][:4]
    np.testing.assert_array_equal(emb.embed(long), fp32.embed(long))
    assert model_family(emb.model_id) == model_family(int8.model_id) == model_family(fp32.model_id)


def test_a_first_embedder_runs_the_predicted_variant_without_measuring_and_build_measures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 40: ``variant="auto"`` on an empty cache must not time the candidates before a first
    answer (seconds of work): it runs the variant the CPU's features predict, built alone, and caches
    no choice; ``choose_variant`` (``contextsieve build``) measures, and the next embedder runs that."""
    from contextsieve.models.cpu import has_int8_dot

    monkeypatch.delenv(V.VARIANT_ENV, raising=False)
    timed: list[int] = []
    real_measure = V.measure

    def counting(*a: object, **k: object) -> list[V.Measurement]:
        timed.append(1)
        return real_measure(*a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(V, "measure", counting)
    emb = Embedder(cache_dir=tmp_path)
    predicted = "int8" if has_int8_dot() else "fp32"
    assert (emb.info.variant, emb.info.query_variant) == (predicted, predicted)
    assert emb.info.choice is not None and not emb.info.choice.measured and not emb.info.choice.measured_now
    assert "predicted from the CPU's features" in emb.info.choice.table()
    assert not timed and not _choice_files(tmp_path)
    assert len(list((tmp_path / "models").glob("*.onnx"))) == 1  # one graph built, not every candidate
    assert V.feature_choice(2, [Variant.FP32]).batch == "fp32"  # the candidates asked for bound the prediction
    measured = V.choose_variant(cache_dir=tmp_path)
    assert measured.measured and measured.measured_now and timed == [1]
    later = Embedder(cache_dir=tmp_path)
    assert later.info.choice is not None and later.info.choice.measured and not later.info.choice.measured_now
    assert (later.info.variant, later.info.query_variant) == (measured.batch, measured.query)
    assert model_family(later.model_id) == model_family(emb.model_id)  # stores and caches stay valid
