"""contextsieve: choose which rules, references and tools go into each LLM request.

The public entry point for embeddings is :class:`Embedder`; everything else is reached by submodule.
``import contextsieve`` is light: ONNX Runtime loads when the first model is loaded, Numba never here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from contextsieve.errors import ContextSieveError

__version__ = "0.1.0"
__all__ = ["Embedder", "ContextSieveError", "__version__"]

if TYPE_CHECKING:
    from contextsieve.models.embedder import Embedder


def __getattr__(name: str) -> object:
    if name == "Embedder":
        from contextsieve.models.embedder import Embedder

        return Embedder
    raise AttributeError(f"module 'contextsieve' has no attribute {name!r}")
