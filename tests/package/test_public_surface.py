"""The root package's three lists of public names agree, and a type checker sees real classes."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import contextsieve

INIT = Path(contextsieve.__file__)


def _type_checking_names() -> set[str]:
    tree = ast.parse(INIT.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for imp in node.body:
                assert isinstance(imp, ast.ImportFrom)
                names |= {a.asname or a.name for a in imp.names}
    return names


def test_all_lazy_table_and_type_checking_imports_agree() -> None:
    lazy = set(contextsieve._LAZY)
    exported = set(contextsieve.__all__) - {"__version__"}
    assert exported == lazy, (sorted(exported - lazy), sorted(lazy - exported))
    seen = _type_checking_names()
    assert seen == lazy, (sorted(lazy - seen), sorted(seen - lazy))
    assert len(contextsieve.__all__) == len(set(contextsieve.__all__))


def test_every_public_name_resolves_to_what_its_module_defines() -> None:
    import importlib

    for name, module in contextsieve._LAZY.items():
        assert getattr(contextsieve, name) is getattr(importlib.import_module(module), name), name


ROOT = Path(__file__).resolve().parents[2]


def _link_tree(dest: Path) -> None:
    """The import layout (contextsieve = engine/, .kernels = kernels/, .models = models/) as links,
    as ``make typecheck`` builds it: mypy cannot follow the editable install's import hook."""
    pkg = dest / "contextsieve"
    pkg.mkdir(parents=True)
    for f in (ROOT / "engine").iterdir():
        (pkg / f.name).symlink_to(f)
    (pkg / "kernels").symlink_to(ROOT / "kernels")
    (pkg / "models").symlink_to(ROOT / "models")


def _mypy(tmp_path: Path, code: str) -> subprocess.CompletedProcess[str]:
    """mypy (the project's settings) over ``code`` written to ``tmp_path/probe.py``, the package seen
    through a link tree."""
    _link_tree(tmp_path / "src")
    (tmp_path / "probe.py").write_text(code)
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--no-incremental",
            "--follow-imports=silent",
            "--config-file",
            str(ROOT / "pyproject.toml"),
            str(tmp_path / "probe.py"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        env={**os.environ, "MYPYPATH": str(tmp_path / "src")},
    )


def test_mypy_sees_classes_not_any(tmp_path: Path) -> None:
    code = (
        "import contextsieve\n"
        "reveal_type(contextsieve.StashStore)\n"
        "reveal_type(contextsieve.Engine)\n"
        "reveal_type(contextsieve.NewSegment)\n"
    )
    out = _mypy(tmp_path, code)
    revealed = [line for line in out.stdout.splitlines() if "Revealed type" in line]
    assert len(revealed) == 3, out.stdout + out.stderr
    for line, cls in zip(revealed, ("StashStore", "Engine", "NewSegment")):
        assert "Any" not in line.split("Revealed type is")[1] and cls in line, line


#: Private names imported across modules (none: the one place for each is public).
KNOWN_PRIVATE_IMPORTS: set[tuple[str, str]] = set()


def test_no_module_imports_another_modules_private_names() -> None:
    found = set()
    for folder in (ROOT / "engine", ROOT / "kernels", ROOT / "models"):
        for path in folder.rglob("*.py"):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("contextsieve"):
                    for alias in node.names:
                        private = alias.name.startswith("_") and not alias.name.startswith("__")
                        own_submodule = node.module == "contextsieve.kernels" and alias.name == "_jit"
                        if private and not own_submodule:
                            found.add((str(path.relative_to(folder)), alias.name))
    assert found <= KNOWN_PRIVATE_IMPORTS, sorted(found - KNOWN_PRIVATE_IMPORTS)


def test_settings_overrides_list_every_setting() -> None:
    import dataclasses

    from contextsieve.agent.settings import LLM_SETTINGS, AgentSettings, LlmSettings, SettingsOverrides

    assert LLM_SETTINGS == tuple(f.name for f in dataclasses.fields(LlmSettings))
    fields = {f.name for f in dataclasses.fields(AgentSettings)}
    assert set(SettingsOverrides.__annotations__) == fields | set(LLM_SETTINGS)  # the LLM ones set llm's fields


def test_mypy_checks_setting_names_and_types_where_users_pass_them(tmp_path: Path) -> None:
    code = (
        "from contextsieve import Engine, Session\n"
        "def f(engine: Engine, s: Session) -> None:\n"
        "    engine.select('hi', context_top_n=3, keyword_fusion='rrf')\n"  # fine
        "    engine.select('hi', context_top_n='five')\n"  # line 4: wrong type
        "    engine.session(no_such_setting=1)\n"  # line 5: unknown name
        "    s.build_request('hi', keyword_fusion='median')\n"  # line 6: not one of the choices
    )
    out = _mypy(tmp_path, code)
    lines = {int(line.split(":")[1]) for line in out.stdout.splitlines() if ": error:" in line}
    assert lines == {4, 5, 6}, out.stdout


def _module_files() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for folder, prefix in (
        ("engine", "contextsieve"),
        ("kernels", "contextsieve.kernels"),
        ("models", "contextsieve.models"),
    ):
        for p in (ROOT / folder).rglob("*.py"):
            parts = list(p.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join([prefix, *parts])] = p
    return out


def _defined(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def test_each_public_name_has_one_path() -> None:
    """A name in a module's ``__all__`` is defined in that module: no module re-exports another's
    names (subpackages' ``__init__`` included), so each public name is reachable by one path besides
    the root's."""
    found = []
    for module, path in _module_files().items():
        if module == "contextsieve":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        listed = [
            elt.value
            for node in tree.body
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)
            for elt in node.value.elts  # type: ignore[attr-defined]
        ]
        found += [f"{module}.{name}" for name in listed if name not in _defined(tree)]
    assert found == []


def test_the_root_names_the_module_that_defines_each_name() -> None:
    import importlib

    files = _module_files()
    for name, module in contextsieve._LAZY.items():
        assert name in _defined(ast.parse(files[module].read_text(encoding="utf-8"))), (name, module)
        assert getattr(importlib.import_module(module), name) is getattr(contextsieve, name)


def test_every_error_and_warning_class_lives_in_errors() -> None:
    """One module holds the exception hierarchy and the warnings; the root exports them all (a
    private exception a module raises and catches itself is no part of the surface)."""
    import contextsieve.errors as errors

    elsewhere = []
    for module, path in _module_files().items():
        if module == "contextsieve.errors":
            continue
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if (
                isinstance(node, ast.ClassDef)
                and not node.name.startswith("_")
                and any(
                    isinstance(b, ast.Name) and (b.id.endswith(("Error", "Warning", "Exception"))) for b in node.bases
                )
            ):
                elsewhere.append(f"{module}.{node.name}")
    assert elsewhere == []
    classes = {n for n in errors.__all__ if isinstance(getattr(errors, n), type)}
    assert classes <= set(contextsieve.__all__)
    assert {"AgentFileWarning", "CacheIntegrityWarning", "GraphFileWarning", "StashIntegrityWarning"} <= classes
