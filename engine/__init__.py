"""contextsieve: choose which rules, references and tools go into each LLM request, and record why.

The entry point is :class:`Engine` (an agent with its sessions); :class:`Embedder` is the embedding
runner underneath. ``import contextsieve`` is light: ONNX Runtime, numpy and Numba load only when
something needs them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from contextsieve.errors import ContextSieveError

__version__ = "0.1.0"
__all__ = ["Engine", "Embedder", "load_agent", "save_agent", "example_agent_path", "ContextSieveError", "__version__"]

if TYPE_CHECKING:
    from contextsieve.agentfile import load_agent, save_agent
    from contextsieve.cli import example_agent_path
    from contextsieve.engine import Engine
    from contextsieve.models.embedder import Embedder

_LAZY = {
    "Engine": ("contextsieve.engine", "Engine"),
    "Embedder": ("contextsieve.models.embedder", "Embedder"),
    "load_agent": ("contextsieve.agentfile", "load_agent"),
    "save_agent": ("contextsieve.agentfile", "save_agent"),
    "example_agent_path": ("contextsieve.cli", "example_agent_path"),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'contextsieve' has no attribute {name!r}")
