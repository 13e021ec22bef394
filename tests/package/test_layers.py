"""The package's layers: each imports only what is below it, and the top level stays small.

Every import counts, wherever it is written (module level, inside a function, under
``TYPE_CHECKING``): a deferred import that runs upward is still an upward arrow. The one exception is
``from contextsieve import __version__`` (a constant of the root, not one of its lazily loaded names).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

from tests.helpers.layers import RANK

TOP_LEVEL_MODULES = 8


def _sources(root: Path) -> dict[str, Path]:
    """Dotted module name -> file, for contextsieve (engine/), its kernels and its models."""
    out: dict[str, Path] = {}
    for folder, prefix in (
        ("engine", "contextsieve"),
        ("kernels", "contextsieve.kernels"),
        ("models", "contextsieve.models"),
    ):
        base = root / folder
        for path in base.rglob("*.py"):
            out[".".join([prefix, *path.relative_to(base).with_suffix("").parts])] = path
    return out


def _unit(module: str) -> str | None:
    """The layer unit of a dotted name: ``contextsieve.session.assembly`` -> ``session``; the root -> None."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "contextsieve" else None


def _imports(module: str, path: Path) -> list[tuple[int, str, list[str]]]:
    """(line, imported module, names) of every import in one file, relative ones resolved."""
    package = module.rsplit(".", 1)[0] if not module.endswith(".__init__") else module[: -len(".__init__")]
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            target = node.module or ""
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join([*base, *([node.module] if node.module else [])])
            out.append((node.lineno, target, [alias.name for alias in node.names]))
    return out


def upward_imports(root: Path = ROOT) -> list[str]:
    """Every import of a module of the package from a higher layer, as ``file:line: ...``."""
    found = []
    for module, path in sorted(_sources(root).items()):
        here = _unit(module)
        if here is None or here == "__init__" or here not in RANK:
            continue  # the root package re-exports everything: it is the top
        for line, target, names in _imports(module, path):
            if not target.startswith("contextsieve"):
                continue
            there = _unit(target)
            if there is None:
                if names == ["__version__"]:
                    continue
                found.append(f"{path.relative_to(root)}:{line} imports the root package ({names})")
                continue
            if there not in RANK:
                found.append(f"{path.relative_to(root)}:{line} imports {target}, which is in no layer")
            elif RANK[there] > RANK[here]:
                found.append(f"{path.relative_to(root)}:{line}: {here} imports {target} (a higher layer)")
    return found


def test_no_import_runs_upward() -> None:
    assert upward_imports() == []


def test_every_unit_of_the_package_is_in_a_layer() -> None:
    units = {p.stem for p in (ROOT / "engine").glob("*.py")} | {
        p.parent.name for p in (ROOT / "engine").glob("*/__init__.py")
    }
    units -= {"__init__", "__pycache__", "data"}
    assert units - set(RANK) == set()


def test_the_top_level_holds_at_most_eight_modules() -> None:
    modules = sorted(p.name for p in (ROOT / "engine").glob("*.py"))
    assert len(modules) <= TOP_LEVEL_MODULES, modules


def test_the_check_sees_an_upward_import(tmp_path: Path) -> None:
    """The check can fail: a deferred import of the session from the retrieval core is reported, and so
    is an import of one of the root's names."""
    fake = tmp_path / "engine" / "retrieval"
    fake.mkdir(parents=True)
    (fake / "bad.py").write_text("def f():\n    from contextsieve.session.session import Session\n")
    (fake / "root.py").write_text("from contextsieve import Engine, __version__\n")
    (tmp_path / "kernels").mkdir()
    (tmp_path / "models").mkdir()
    assert upward_imports(tmp_path) == [
        "engine/retrieval/bad.py:2: retrieval imports contextsieve.session.session (a higher layer)",
        "engine/retrieval/root.py:1 imports the root package (['Engine', '__version__'])",
    ]


def test_the_wheel_lists_every_package() -> None:
    """Every folder of the package is in pyproject's ``packages`` (a missing one is a wheel that
    cannot be imported), and py.typed ships with it."""
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    found = {
        "contextsieve." + ".".join(p.parent.relative_to(ROOT / "engine").parts)
        for p in (ROOT / "engine").rglob("__init__.py")
    }
    found = {name.rstrip(".") for name in found}
    found |= {"contextsieve.kernels", "contextsieve.models"}
    assert set(config["packages"]) == found
    assert (ROOT / "engine" / "py.typed").is_file()
    assert "py.typed" in config["package-data"]["contextsieve"]


def test_the_module_map_in_the_docs_is_current() -> None:
    """docs/internals.md's module map is the one the code draws (regenerate it with
    ``python -m tests.helpers.module_map --write``)."""
    from tests.helpers.module_map import PAGE, page_with_map

    page = PAGE.read_text(encoding="utf-8")
    assert page == page_with_map(page), "docs/internals.md: run python -m tests.helpers.module_map --write"


def test_test_modules_say_what_behaviour_they_specify() -> None:
    """Every test module opens with a docstring that says what behaviour it specifies, not which issue
    it came from (the issue history lives in git)."""
    import ast

    told = {
        str(p.relative_to(ROOT)): ast.get_docstring(ast.parse(p.read_text(encoding="utf-8")))
        for p in (ROOT / "tests").rglob("test_*.py")
    }
    assert [p for p, d in told.items() if not d] == []
    assert [p for p, d in told.items() if d and d.lstrip().lower().startswith("issue")] == []


def test_no_module_outgrows_its_limit() -> None:
    """No source module over 600 lines, no test module over 800: a module that grows past it is
    holding two jobs."""
    source = [p for folder in ("engine", "kernels", "models") for p in (ROOT / folder).rglob("*.py")]
    tests = list((ROOT / "tests").rglob("*.py"))
    over = [
        f"{p.relative_to(ROOT)}: {n} lines"
        for paths, limit in ((source, 600), (tests, 800))
        for p in paths
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > limit
    ]
    assert over == []


def test_tests_import_nothing_from_the_benchmarks_and_benchmarks_keep_to_kinds() -> None:
    """What tests share with benchmarks lives in tests/helpers or the package; the benchmarks are
    sorted by kind with at most six modules at their top."""
    found = []
    for p in (ROOT / "tests").rglob("*.py"):
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            found += [f"{p.relative_to(ROOT)}: {n}" for n in names if n == "benchmarks" or n.startswith("benchmarks.")]
    assert found == []
    top = sorted(p.name for p in (ROOT / "benchmarks").glob("*.py"))
    assert len(top) <= 6, top
    assert {"speed", "quality", "robustness", "data"} <= {
        p.parent.name for p in (ROOT / "benchmarks").glob("*/__init__.py")
    }
