"""The root package: every public name resolves, and importing it loads nothing heavy."""

from __future__ import annotations

import subprocess
import sys

import contextsieve


def test_every_exported_name_resolves() -> None:
    for name in contextsieve.__all__:
        assert getattr(contextsieve, name) is not None, name
    assert issubclass(contextsieve.SessionFileError, contextsieve.ContextSieveError)
    assert contextsieve.Request.__module__ == "contextsieve.assembly"


def test_import_is_light() -> None:
    heavy = "('numpy', 'numba', 'onnxruntime', 'yaml', 'tokenizers')"
    code = f"import sys, contextsieve; print(sorted(m for m in {heavy} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]"


def test_all_lists_exactly_the_lazy_names() -> None:
    assert set(contextsieve.__all__) == {*contextsieve._LAZY, "__version__"}
