"""The root package: every public name resolves, and importing it loads nothing heavy."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import contextsieve


def test_every_exported_name_resolves() -> None:
    for name in contextsieve.__all__:
        assert getattr(contextsieve, name) is not None, name
    assert issubclass(contextsieve.SessionFileError, contextsieve.ContextSieveError)
    assert contextsieve.Request.__module__ == "contextsieve.session.assembly"


def test_import_is_light() -> None:
    heavy = "('numpy', 'numba', 'onnxruntime', 'yaml', 'tokenizers')"
    code = f"import sys, contextsieve; print(sorted(m for m in {heavy} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]"


def test_all_lists_exactly_the_lazy_names() -> None:
    assert set(contextsieve.__all__) == {*contextsieve._LAZY, "__version__"}


def test_collecting_no_test_is_a_failure() -> None:
    """conftest.py used to turn pytest's exit 5 (no test collected) into success; CI must see it."""
    tests = Path(__file__).parents[1]
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "no_test_has_this_name", str(tests)]
    res = subprocess.run(cmd, capture_output=True, text=True)
    assert res.returncode == 5, res.stdout[-500:]


def test_the_top_layers_are_imported_by_nothing_below_them() -> None:
    """Data flows one way: the framework integrations sit above everything (nothing in the engine
    imports them), the inspect page is reached from the command line only, and the kernels never
    import the engine."""
    import re

    root = Path(__file__).resolve().parents[2]
    engine = root / "engine"

    def importers(module: str, where: Path) -> set[str]:
        pattern = re.compile(rf"^\s*(from|import)\s+{re.escape(module)}\b", re.MULTILINE)
        return {str(p.relative_to(root)) for p in where.rglob("*.py") if pattern.search(p.read_text(encoding="utf-8"))}

    assert {
        p for p in importers("contextsieve.integrations", engine) if not p.startswith("engine/integrations/")
    } == set()
    page_users = {p for p in importers("contextsieve.inspect", engine) if not p.startswith("engine/inspect/")}
    assert page_users == {"engine/cli/server_commands.py"}
    kernels = root / "kernels"
    assert not {
        p
        for m in (
            "contextsieve.engine",
            "contextsieve.session.session",
            "contextsieve.mcp_client",
            "contextsieve.stash",
        )
        for p in importers(m, kernels)
    }
