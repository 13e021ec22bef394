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


def test_a_candidate_below_the_bars_is_never_chosen(tmp_path: Path) -> None:
    """7-bit weights (the candidate for CPUs without VNNI) measure below the mean bar on MiniLM: the
    table shows them, the choice never takes them."""
    choice = V.choose_variant(cache_dir=tmp_path, candidate_variants=[Variant.INT8_W7, Variant.FP32])
    w7 = next(m for m in choice.measurements if m.variant == "int8w7")
    assert w7.min_cos > 0.98
    if not w7.passes:
        assert math.isnan(w7.query_p50_ms) and choice.query == choice.batch == "fp32"
        assert "| int8w7 | s7 |" in choice.table() and "| no |" in choice.table()
    else:  # a recipe change that lifts it over the bars keeps the rule: chosen only when measured fastest
        assert w7.min_cos >= V.MIN_COSINE and w7.mean_cos >= V.MEAN_COSINE


def test_seven_bit_weights_lie_in_the_unsaturated_range(tmp_path: Path) -> None:
    import onnx
    from onnx import numpy_helper

    emb = Embedder(variant="int8w7", cache_dir=tmp_path)
    assert emb.info.variant == "int8w7" and emb.info.choice is None
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
