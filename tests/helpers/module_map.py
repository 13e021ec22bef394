"""docs/internals.md's module map, drawn from the code: every module of the package by layer, bottom
to top, with the first sentence of its docstring.

``python -m tests.helpers.module_map`` prints it; ``--write`` replaces the map in docs/internals.md
(between its two ``module map`` markers); ``tests/package/test_layers.py`` fails while the page is out of date.
"""

from __future__ import annotations

import argparse
import ast
import re
from pathlib import Path

from tests.helpers.layers import LAYERS

ROOT = Path(__file__).resolve().parent.parent.parent
PAGE = ROOT / "docs" / "internals.md"
BEGIN = "<!-- module map: begin (python -m tests.helpers.module_map --write) -->"
END = "<!-- module map: end -->"
#: where each unit's code lives, and its import name
FOLDERS = {"kernels": (ROOT / "kernels", "contextsieve.kernels"), "models": (ROOT / "models", "contextsieve.models")}


def first_sentence(path: Path) -> str:
    """The first sentence of a module's docstring, on one line (``""`` when it has none)."""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    para = " ".join(doc.split("\n\n", 1)[0].split())
    para = re.sub(r":[a-z]+:`~?(?:[\w.]+\.)?([^`<]+?)(?: <[^>]+>)?`", r"`\1`", para)  # :class:`~a.b.C` -> `C`
    para = para.replace("``", "`")
    m = re.match(r"(.+?\.)(\s|$)", para)
    text = m.group(1) if m else para
    if len(text) > 200:
        text = text[:200].rsplit(" ", 1)[0] + " ..."
    return text.replace("|", "\\|")


def _files(unit: str) -> list[tuple[str, Path]]:
    """(shown path, file) of a unit's modules: a top-level module, or a package's modules in order."""
    if unit in FOLDERS:
        folder = FOLDERS[unit][0]
        shown = f"{folder.name}/"
    else:
        single = ROOT / "engine" / f"{unit}.py"
        if single.is_file():
            return [(f"{unit}.py", single)]
        folder = ROOT / "engine" / unit
        shown = f"{unit}/"
    return [
        (shown + ("" if p.name == "__init__.py" else p.name), p)
        for p in sorted(folder.glob("*.py"), key=lambda p: (p.name != "__init__.py", p.name))
        if not (p.name == "__init__.py" and not first_sentence(p))
    ]


def module_map() -> str:
    """The map as markdown: one row per module, layers bottom to top."""
    rows = [
        "Paths are inside `engine/` (the package `contextsieve`) except `kernels/` and `models/`. Layers",
        "run bottom to top: a module imports only modules of its own layer and the layers above it in this",
        "table (`tests/package/test_layers.py` fails on any other import).",
        "",
        "| layer | module | what |",
        "| --- | --- | --- |",
    ]
    for number, units in enumerate(LAYERS):
        for unit in units:
            for shown, path in _files(unit):
                rows.append(f"| {number} | `{shown}` | {first_sentence(path)} |")
    return "\n".join(rows) + "\n"


def page_with_map(page: str) -> str:
    """``page`` with the text between the markers replaced by the current map."""
    start, end = page.index(BEGIN) + len(BEGIN), page.index(END)
    return page[:start] + "\n" + module_map() + page[end:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true", help="replace the map in docs/internals.md")
    args = parser.parse_args()
    if args.write:
        PAGE.write_text(page_with_map(PAGE.read_text(encoding="utf-8")), encoding="utf-8")
    else:
        print(module_map(), end="")


if __name__ == "__main__":
    main()
