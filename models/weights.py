"""Read a BERT-family sentence-transformers folder: safetensors weights and the configs.

Pure numpy; no torch, no safetensors package. The safetensors format is an 8-byte little-endian
header length, a JSON header naming each tensor's dtype, shape and byte range, then the raw bytes.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from contextsieve.errors import ModelError, ModelFilesNotFoundError

__all__ = ["BertConfig", "read_bert_config", "read_safetensors", "sha256_file"]

_DTYPES = {
    "F32": np.float32,
    "F16": np.float16,
    "F64": np.float64,
    "I64": np.int64,
    "I32": np.int32,
    "I8": np.int8,
    "U8": np.uint8,
}


@dataclass(frozen=True)
class BertConfig:
    """Shape of a BERT-family encoder and its sentence pooling, read from the folder's configs.

    Attributes:
        hidden_size: width of the hidden states (384 for MiniLM-L6).
        num_layers: number of transformer layers.
        num_heads: attention heads per layer.
        intermediate_size: width of the feed-forward layer.
        vocab_size: rows of the word-embedding table.
        max_position: rows of the position-embedding table.
        layer_norm_eps: epsilon of every LayerNorm.
        max_seq_length: sentence-transformers' truncation length in tokens (256 for MiniLM-L6).
        pooling: ``"mean"`` or ``"cls"``.
        normalize: whether sentence vectors are L2-normalised.
    """

    hidden_size: int
    num_layers: int
    num_heads: int
    intermediate_size: int
    vocab_size: int
    max_position: int
    layer_norm_eps: float
    max_seq_length: int
    pooling: str
    normalize: bool

    def __post_init__(self) -> None:
        if self.hidden_size % self.num_heads:
            raise ModelError(f"hidden_size {self.hidden_size} is not a multiple of num_heads {self.num_heads}")
        if self.pooling not in ("mean", "cls"):
            raise ModelError(f"pooling {self.pooling!r} is not supported (mean or cls)")


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as e:
        raise ModelFilesNotFoundError(f"missing model file {path}") from e
    except (OSError, ValueError) as e:
        raise ModelError(f"cannot read {path}: {e}") from e


def read_bert_config(folder: Path) -> BertConfig:
    """Read ``config.json``, ``sentence_bert_config.json`` and ``1_Pooling/config.json`` of ``folder``."""
    folder = Path(folder)
    cfg = _read_json(folder / "config.json")
    if cfg.get("model_type") not in ("bert", None) or cfg.get("hidden_act", "gelu") != "gelu":
        raise ModelError(
            f"{folder / 'config.json'}: model_type {cfg.get('model_type')!r} / hidden_act "
            f"{cfg.get('hidden_act')!r} is not a BERT encoder with exact GELU"
        )
    if cfg.get("position_embedding_type", "absolute") != "absolute":
        raise ModelError(f"{folder / 'config.json'}: only absolute position embeddings are supported")
    st_path = folder / "sentence_bert_config.json"
    st = _read_json(st_path) if st_path.exists() else {}
    pool_path = folder / "1_Pooling" / "config.json"
    pool = _read_json(pool_path) if pool_path.exists() else {"pooling_mode_mean_tokens": True}
    if pool.get("pooling_mode_mean_tokens"):
        pooling = "mean"
    elif pool.get("pooling_mode_cls_token"):
        pooling = "cls"
    else:
        raise ModelError(f"{pool_path}: only mean or CLS pooling is supported, got {pool}")
    modules_path = folder / "modules.json"
    normalize = True
    if modules_path.exists():
        modules = _read_json(modules_path)
        normalize = any(str(m.get("type", "")).endswith("Normalize") for m in modules)
    try:
        return BertConfig(
            hidden_size=int(cfg["hidden_size"]),
            num_layers=int(cfg["num_hidden_layers"]),
            num_heads=int(cfg["num_attention_heads"]),
            intermediate_size=int(cfg["intermediate_size"]),
            vocab_size=int(cfg["vocab_size"]),
            max_position=int(cfg["max_position_embeddings"]),
            layer_norm_eps=float(cfg.get("layer_norm_eps", 1e-12)),
            max_seq_length=int(st.get("max_seq_length", min(512, int(cfg["max_position_embeddings"])))),
            pooling=pooling,
            normalize=normalize,
        )
    except KeyError as e:
        raise ModelError(f"{folder / 'config.json'} lacks the field {e.args[0]!r}") from e


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """Return every tensor of a ``.safetensors`` file as a numpy array of its own (copied from disk, one
    read per tensor: dropping a tensor frees its memory, which keeps the peak of a graph build down)."""
    path = Path(path)
    try:
        f = open(path, "rb")
    except FileNotFoundError as e:
        raise ModelFilesNotFoundError(f"missing weights file {path}") from e
    with f:
        size = os.fstat(f.fileno()).st_size
        try:
            (n,) = struct.unpack("<Q", f.read(8))
            if n > size - 8:
                raise ValueError(f"header of {n} bytes in a file of {size}")
            header = json.loads(f.read(n))
            if not isinstance(header, dict):
                raise ValueError("the header is not a JSON object")
        except (struct.error, ValueError) as e:
            raise ModelError(f"{path} is not a safetensors file: {e}") from e
        base = 8 + n
        out: dict[str, np.ndarray] = {}
        for name, meta in header.items():
            if name == "__metadata__":
                continue
            try:
                dtype = np.dtype(_DTYPES[meta["dtype"]])
                start, end = (int(x) for x in meta["data_offsets"])
                if not 0 <= start <= end <= size - base:
                    raise ValueError(f"offsets {start}..{end} outside the file")
                f.seek(base + start)
                raw = f.read(end - start)
                arr = np.frombuffer(raw, dtype=dtype, count=(end - start) // dtype.itemsize)
                out[name] = arr.reshape(meta["shape"])
            except (KeyError, ValueError, TypeError) as e:
                raise ModelError(f"{path}: tensor {name!r} has an unreadable header entry {meta}") from e
    return out


def sha256_file(path: Path, *, chunk: int = 1 << 20) -> str:
    """Hex SHA-256 of a file, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()
