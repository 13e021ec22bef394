"""docs/settings.md's reference, drawn from the code: every settings class of the package (a dataclass
or TypedDict whose name ends in ``Config``, ``Settings`` or ``Options``, exported or not), each with its
module, the first sentence of its docstring and a table of its fields, their defaults and what each
governs (read from the class docstring's ``Attributes:`` / ``Args:`` entries).

``python -m tests.helpers.settings_page`` prints it; ``--write`` replaces the reference in
docs/settings.md (between its two ``settings`` markers); ``tests/package/test_settings_page.py`` fails
while the page is out of date. Fields the docstrings do not describe and modules that could not be
imported (an optional dependency missing) are listed on stderr, one ``settings_page:`` line each.

The classes are found by importing every module of ``contextsieve`` (its kernels and models too), so
run it in a process of its own: it imports Numba, ONNX Runtime and every framework integration.
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import importlib
import inspect
import json
import pkgutil
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent.parent
PAGE = ROOT / "docs" / "settings.md"
BEGIN = "<!-- settings: begin (python -m tests.helpers.settings_page --write) -->"
END = "<!-- settings: end -->"
#: the packages walked (kernels and models live in folders of their own, outside engine/)
PACKAGES = ("contextsieve", "contextsieve.kernels", "contextsieve.models")
#: a settings class's name ends in one of these
SUFFIXES = ("Config", "Settings", "Options")
#: what a field the docstring does not describe gets in the table
UNDESCRIBED = "(not described)"
#: longest "what it governs" cell (cut at a word boundary beyond it)
MAX_CHARS = 300
#: docstring sections whose entries describe fields
_SECTIONS = re.compile(r"(Attributes|Args|Arguments|Parameters|Keys|Fields):")
#: an entry's head: one name, or several sharing the text (``hnsw_m / ef_construction:``)
_NAMES = r"[A-Za-z_]\w*(?:\s*/\s*[A-Za-z_]\w*)*"
_ENTRY = re.compile(rf"({_NAMES}):(?:\s+(.*)|$)")
#: a further entry inside an entry's text, after the end of a sentence (``default 20. max_output_tokens: ...``)
_INLINE = re.compile(rf"(?<=[.)])\s+({_NAMES}):\s")
#: a Sphinx role: ``:class:`~a.b.C```, ``:meth:`title <a.b.c>```, ``:data:`NAME```
_ROLE = re.compile(r":[a-z]+:`(~?)([^`<]*?)\s*(?:<([^>`]+)>)?`")


@dataclass(frozen=True)
class Found:
    """A settings class: its import path, the class, whether ``contextsieve`` exports it."""

    module: str
    name: str
    cls: type
    exported: bool


@dataclass(frozen=True)
class Reference:
    """The generated reference (markdown), the fields left undescribed (``Class.field``) and the
    modules that could not be imported (``module: reason``)."""

    text: str
    undescribed: tuple[str, ...]
    skipped: tuple[str, ...]


def module_names() -> list[str]:
    """Every module of the package, sorted (``__main__`` left out: importing it runs the CLI)."""
    names = set()
    for package in PACKAGES:
        names.add(package)
        root = importlib.import_module(package)
        for info in pkgutil.walk_packages(root.__path__, package + "."):
            names.add(info.name)
    return sorted(n for n in names if n.rsplit(".", 1)[-1] != "__main__")


def is_typeddict(obj: object) -> bool:
    """Whether ``obj`` is a TypedDict class (``typing``'s or ``typing_extensions``')."""
    return isinstance(obj, type) and issubclass(obj, dict) and hasattr(obj, "__total__")


def keys_of(td: type) -> list[str]:
    """A TypedDict's keys, in declaration order."""
    return list(getattr(td, "__annotations__", {}))


def _modules() -> tuple[list[ModuleType], list[str]]:
    """The package's modules, imported; and those whose import failed (an optional dependency missing)."""
    modules, skipped = [], []
    for name in module_names():
        try:
            modules.append(importlib.import_module(name))
        except ImportError as e:  # MissingExtraError is one
            skipped.append(f"{name}: {e}")
    return modules, skipped


def _classes(modules: list[ModuleType]) -> list[tuple[str, type]]:
    """(module, class) of every dataclass and TypedDict defined at the top level of ``modules``."""
    out = []
    for module in modules:
        for name, obj in vars(module).items():
            if (
                isinstance(obj, type)
                and obj.__module__ == module.__name__
                and obj.__qualname__ == name
                and (dataclasses.is_dataclass(obj) or is_typeddict(obj))
            ):
                out.append((module.__name__, obj))
    return sorted(out, key=lambda mc: (mc[0], mc[1].__name__))


def settings_classes(classes: list[tuple[str, type]]) -> list[Found]:
    """The settings classes among ``classes``, sorted by module then name, each marked exported or not."""
    import contextsieve

    exported = set(contextsieve.__all__)
    return [
        Found(module, cls.__name__, cls, cls.__name__ in exported and getattr(contextsieve, cls.__name__) is cls)
        for module, cls in classes
        if cls.__name__.endswith(SUFFIXES)
    ]


# -- docstrings ---------------------------------------------------------------------------------------


def docstring(cls: type) -> str:
    """The class's own docstring, dedented (``""`` when it has none: not the signature a dataclass makes up)."""
    doc = cls.__dict__.get("__doc__") or ""
    if dataclasses.is_dataclass(cls) and doc.startswith(cls.__name__ + "("):
        return ""
    return inspect.cleandoc(doc)


def plain(text: str) -> str:
    """``text`` on one line for a table cell: Sphinx roles as their names (``:class:`~a.b.C``` -> `C`,
    ``:meth:`title <target>``` -> `title`), double backticks single, ``|`` escaped."""
    text = " ".join(text.split())

    def role(m: re.Match[str]) -> str:
        tilde, title, target = m.group(1), m.group(2).strip(), m.group(3)
        if target and title:
            shown = title
        elif tilde:
            shown = (target or title).rsplit(".", 1)[-1]
        else:
            shown = target or title
        return f"`{shown}`"

    text = _ROLE.sub(role, text).replace("``", "`")
    return text.replace("|", "\\|")


def cut(text: str, limit: int = MAX_CHARS) -> str:
    """``text`` cut at a word boundary near ``limit`` characters (never inside a code span), `` ...`` added."""
    if len(text) <= limit:
        return text
    text = text[:limit].rsplit(" ", 1)[0]
    if text.count("`") % 2:
        text = text[: text.rindex("`")]
    return text.rstrip(" ,;:(") + " ..."


def first_sentence(doc: str) -> str:
    """The first sentence of a docstring's first paragraph, on one line."""
    para = plain(doc.split("\n\n", 1)[0])
    m = re.match(r"(.+?\.)(\s|$)", para)
    return cut(m.group(1) if m else para, 200)


def _entries(doc: str) -> list[tuple[str, str]]:
    """(head, text) of every entry of the docstring's ``Attributes:`` / ``Args:`` sections, in order;
    continuation lines joined to their entry."""
    out: list[tuple[str, str]] = []
    lines = doc.splitlines()
    i = 0
    while i < len(lines):
        header = lines[i]
        indent = len(header) - len(header.lstrip())
        i += 1
        if not _SECTIONS.fullmatch(header.strip()):
            continue
        body: int | None = None  # the entries' indentation
        while i < len(lines):
            line = lines[i]
            if not line.strip():
                i += 1
                continue
            at = len(line) - len(line.lstrip())
            if at <= indent:
                break  # the section is over
            if body is None:
                body = at
            m = _ENTRY.fullmatch(line.strip()) if at == body else None
            if m:
                out.append((m.group(1), m.group(2) or ""))
            elif out:
                out[-1] = (out[-1][0], out[-1][1] + " " + line.strip())
            i += 1
    return out


def _names(head: str) -> list[str]:
    return [n.strip() for n in head.split("/")]


def descriptions(doc: str, fields: list[str]) -> dict[str, str]:
    """What the docstring says of each of ``fields`` (those it names; the first entry naming a field
    wins). An entry's text may hold further entries of fields after a sentence's end (``max_chat_turns:
    default 20. max_output_tokens: default 1000.``): each field gets its own part."""
    known = set(fields)
    out: dict[str, str] = {}
    for head, text in _entries(doc):
        text = " ".join(text.split())
        parts = [(head, text)]
        while True:  # split off the last inline entry of the last part, until none is left
            last_head, last_text = parts[-1]
            splits = [m for m in _INLINE.finditer(last_text) if all(n in known for n in _names(m.group(1)))]
            if not splits:
                break
            m = splits[0]
            parts[-1] = (last_head, last_text[: m.start()].strip())
            parts.append((m.group(1), last_text[m.end() :].strip()))
        for part_head, part_text in parts:
            for name in _names(part_head):
                if name in known and name not in out and part_text:
                    out[name] = cut(plain(part_text))
    return out


# -- defaults -----------------------------------------------------------------------------------------


def shown_value(value: Any) -> str:
    """A default as a code span: a dataclass at its own defaults as ``Name()``, strings in double
    quotes, large ints with ``_``; never a memory address."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        try:
            same = value == type(value)()
        except TypeError:  # required fields
            same = False
        text = f"{type(value).__name__}()" if same else repr(value)
    elif isinstance(value, enum.Enum):
        text = repr(value.value)
    elif isinstance(value, str):
        text = json.dumps(value)
    elif isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10_000:
        text = f"{value:_}"
    else:
        text = repr(value)
    if " at 0x" in text:
        text = type(value).__name__
    return f"`{text}`".replace("|", "\\|")


def default_of(f: dataclasses.Field[Any]) -> str:
    """A dataclass field's default as shown: its value, its factory's value, or ``required``."""
    if f.default is not dataclasses.MISSING:
        return shown_value(f.default)
    if f.default_factory is not dataclasses.MISSING:
        return shown_value(f.default_factory())
    return "required"


# -- mirrors ------------------------------------------------------------------------------------------


def nested_fields(cls: type) -> dict[str, list[str]]:
    """The fields of ``cls`` whose default is a dataclass, each with that dataclass's field names
    (``AgentSettings.llm``: ``model``, ``temperature``, ...)."""
    out = {}
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(f.default) and not isinstance(f.default, type):
            out[f.name] = [g.name for g in dataclasses.fields(f.default)]
    return out


def mirrored_class(td: type, dataclasses_: list[type]) -> type | None:
    """The dataclass whose field names are exactly ``td``'s keys, if one is; or whose field names and
    those of its dataclass fields (:func:`nested_fields`, taken by their own names) are."""
    keys = set(keys_of(td))
    for cls in dataclasses_:
        names = {f.name for f in dataclasses.fields(cls)}
        if names == keys or names | {n for ns in nested_fields(cls).values() for n in ns} == keys:
            return cls
    return None


def mirrored_callable(td: type, module: ModuleType) -> tuple[str, inspect.Signature] | None:
    """The callable named in ``td``'s docstring (a Sphinx role resolved in its module) that takes every
    key of ``td`` as a parameter: (its name as written, its signature)."""
    keys = set(keys_of(td))
    for m in _ROLE.finditer(docstring(td)):
        dotted = (m.group(3) or m.group(2)).strip()
        obj: Any = module
        for part in dotted.split("."):
            obj = getattr(obj, part, None)
        if obj is None or isinstance(obj, type) or not callable(obj):
            continue
        try:
            signature = inspect.signature(obj)
        except (TypeError, ValueError):
            continue
        if keys <= set(signature.parameters):
            return dotted, signature
    return None


# -- the page -----------------------------------------------------------------------------------------


def _where(found: Found) -> str:
    kind = "TypedDict" if is_typeddict(found.cls) else "dataclass"
    if kind == "dataclass" and not found.cls.__dataclass_params__.frozen:
        kind = "dataclass, not frozen"
    exported = f"; `from contextsieve import {found.name}`" if found.exported else ""
    return f"`{found.module}.{found.name}` ({kind}{exported})"


def _section(found: Found, mirrors: list[tuple[str, type]], all_dataclasses: list[type]) -> tuple[list[str], list[str]]:
    """A class's part of the page, and its undescribed fields (``Class.field``)."""
    doc = docstring(found.cls)
    lines = [f"### {found.name}", "", _where(found) + ". " + (first_sentence(doc) or UNDESCRIBED), ""]
    if is_typeddict(found.cls):
        module = sys.modules[found.cls.__module__]
        optional = "some keys required" if found.cls.__required_keys__ else "every key optional"
        twin = mirrored_class(found.cls, all_dataclasses)
        if twin is not None:
            lines.append(f"Mirrors `{twin.__name__}` ({optional}): its fields, by the same names and types; see there.")
            return lines + [""], []
        called = mirrored_callable(found.cls, module)
        if called is not None:
            name, signature = called
            params = ", ".join(
                f"`{k}` ({shown_value(signature.parameters[k].default)})"
                if signature.parameters[k].default is not inspect.Parameter.empty
                else f"`{k}` (required)"
                for k in keys_of(found.cls)
            )
            lines.append(
                f"Mirrors the keyword arguments of `{name}` ({optional}; see there), with its defaults: {params}."
            )
            return lines + [""], []
        fields = keys_of(found.cls)
        required = found.cls.__required_keys__
        defaults = {k: "required key" if k in required else "optional key" for k in fields}
    else:
        dc_fields = dataclasses.fields(found.cls)
        fields = [f.name for f in dc_fields]
        defaults = {f.name: default_of(f) for f in dc_fields}
    said = descriptions(doc, fields)
    lines += ["| field | default | what it governs |", "| --- | --- | --- |"]
    lines += [f"| `{name}` | {defaults[name]} | {said.get(name, UNDESCRIBED)} |" for name in fields]
    for mirror_module, td in mirrors:
        nested = [name for name, names in nested_fields(found.cls).items() if set(names) <= set(keys_of(td))]
        too = "".join(f", and `{name}`'s by their own names" for name in nested)
        lines += ["", f"The same fields as keyword arguments{too}: `{td.__name__}` (TypedDict in `{mirror_module}`)."]
    return lines + [""], [f"{found.name}.{name}" for name in fields if name not in said]


def generate() -> Reference:
    """The reference as markdown, with what it could not describe and which modules it could not import."""
    modules, skipped = _modules()
    classes = _classes(modules)
    found = settings_classes(classes)
    all_dataclasses = [cls for _, cls in classes if dataclasses.is_dataclass(cls)]
    typeddicts = [(m, cls) for m, cls in classes if is_typeddict(cls)]
    rows = [
        "The classes, by module (exported: importable as `from contextsieve import ...`; the others from",
        "the module named).",
        "",
        "| class | module | exported |",
        "| --- | --- | --- |",
    ]
    rows += [f"| [`{f.name}`](#{f.name.lower()}) | `{f.module}` | {'yes' if f.exported else 'no'} |" for f in found]
    rows.append("")
    undescribed: list[str] = []
    for f in found:
        mirrors = [
            (m, td)
            for m, td in typeddicts
            if not td.__name__.endswith(SUFFIXES) and dataclasses.is_dataclass(f.cls) and mirrored_class(td, [f.cls])
        ]
        section, missing = _section(f, mirrors, all_dataclasses)
        rows += section
        undescribed += missing
    return Reference("\n".join(rows).rstrip("\n") + "\n", tuple(undescribed), tuple(skipped))


def page_with_reference(page: str, reference: str) -> str:
    """``page`` with the text between the markers replaced by ``reference``."""
    start, end = page.index(BEGIN) + len(BEGIN), page.index(END)
    return page[:start] + "\n" + reference + page[end:]


def generated_part(page: str) -> str:
    """The text between the markers of ``page`` (as :func:`page_with_reference` writes it)."""
    start, end = page.index(BEGIN) + len(BEGIN), page.index(END)
    return page[start:end].removeprefix("\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true", help="replace the reference in docs/settings.md")
    args = parser.parse_args()
    ref = generate()
    for line in ref.skipped:
        print(f"settings_page: skipped {line}", file=sys.stderr)
    for name in ref.undescribed:
        print(f"settings_page: not described: {name}", file=sys.stderr)
    if args.write:
        if ref.skipped:
            raise SystemExit("settings_page: not written: some modules could not be imported (install the extras)")
        PAGE.write_text(page_with_reference(PAGE.read_text(encoding="utf-8"), ref.text), encoding="utf-8")
    else:
        print(ref.text, end="")


if __name__ == "__main__":
    main()
