"""Version bookkeeping for `make compat` (tests/compat/run.sh). Any Python with pip runs it (it uses pip's
vendored packaging and TOML parser, so nothing has to be installed):

- ``versions.py check``: lowest.txt pins each framework extra's lower bound, and the test extra's pins lie
  inside the extras' ranges (exit 1 and say which otherwise).
- ``versions.py newest EXTRA < REPORT``: print the versions a ``pip install --dry-run --report -`` of EXTRA's
  framework resolved (the registry's newest); exit 0 when those the test extra pins equal the pins (`make test`
  runs them), 3 when one differs.
- ``versions.py downgrades BEFORE AFTER``: the packages of a ``pip freeze`` BEFORE that are lower in AFTER
  (``name old -> new``, one a line).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from pip._vendor.packaging.requirements import Requirement
from pip._vendor.packaging.utils import canonicalize_name
from pip._vendor.packaging.version import Version

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: pip's vendored copy of the same parser
    from pip._vendor import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
LOWEST = Path(__file__).resolve().parent / "lowest.txt"
#: the extras of contextsieve.integrations, each tested alone
FRAMEWORK_EXTRAS = ("langchain", "pydantic-ai", "openai-agents")


def _extras() -> dict[str, list[Requirement]]:
    with open(ROOT / "pyproject.toml", "rb") as f:
        project: dict[str, Any] = tomllib.load(f)
    return {k: [Requirement(r) for r in v] for k, v in project["project"]["optional-dependencies"].items()}


def _pins(requirements: list[Requirement]) -> dict[str, str]:
    """name -> version of the ``==`` requirements."""
    out: dict[str, str] = {}
    for r in requirements:
        exact = [s.version for s in r.specifier if s.operator == "=="]
        if exact:
            out[canonicalize_name(r.name)] = exact[0]
    return out


def _lowest() -> dict[str, str]:
    lines = [ln.split("#", 1)[0].strip() for ln in LOWEST.read_text(encoding="utf-8").splitlines()]
    return _pins([Requirement(ln) for ln in lines if ln])


def check() -> int:
    extras = _extras()
    lowest, test_pins = _lowest(), _pins(extras["test"])
    problems: list[str] = []
    covered: set[str] = set()
    for extra in FRAMEWORK_EXTRAS:
        for r in extras[extra]:
            name = canonicalize_name(r.name)
            covered.add(name)
            lower = [s.version for s in r.specifier if s.operator == ">="]
            if not lower or lowest.get(name) != lower[0]:
                problems.append(f"the {extra} extra's {r} has no lower bound equal to lowest.txt's {lowest.get(name)}")
            if name in test_pins and not r.specifier.contains(test_pins[name]):
                problems.append(f"the test extra's {name}=={test_pins[name]} is outside the {extra} extra's {r}")
    problems += [f"lowest.txt pins {n}, which no framework extra names" for n in sorted(set(lowest) - covered)]
    for p in problems:
        print(f"compat: {p}", file=sys.stderr)
    return 1 if problems else 0


def newest(extra: str) -> int:
    report = json.load(sys.stdin)
    resolved: dict[str, str] = {}
    for item in report["install"]:
        resolved[canonicalize_name(item["metadata"]["name"])] = item["metadata"]["version"]
    extras = _extras()
    names = {canonicalize_name(r.name) for r in extras[extra]}
    test_pins = _pins(extras["test"])
    shown = [f"{n}=={resolved[n]}" for n in sorted(names) if n in resolved]
    print(" ".join(shown))
    same = all(resolved.get(n) == v for n, v in test_pins.items() if n in names)
    return 0 if same else 3


def _freeze(path: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if "==" in line:
            name, version = line.strip().split("==", 1)
            out[canonicalize_name(name)] = version
    return out


def downgrades(before_path: str, after_path: str) -> int:
    before, after = _freeze(before_path), _freeze(after_path)
    for name, version in sorted(before.items()):
        if name in after and Version(after[name]) < Version(version):
            print(f"{name} {version} -> {after[name]}")
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["check"] and len(argv) == 1:
        return check()
    if argv[:1] == ["newest"] and len(argv) == 2 and argv[1] in FRAMEWORK_EXTRAS:
        return newest(argv[1])
    if argv[:1] == ["downgrades"] and len(argv) == 3:
        return downgrades(argv[1], argv[2])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
