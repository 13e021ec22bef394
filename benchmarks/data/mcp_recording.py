"""What ``mcp_catalog/build.py`` and ``mcp_live/build.py`` share to record real MCP servers' tool lists.

Both scripts install servers from npm (run through ``npx -y PACKAGE@VERSION``) and PyPI (into throw-away
virtualenvs, never the project's), read each package's version, licence and summary from its registry
metadata, keep only servers whose licence allows redistribution (:data:`ALLOWED_LICENCES`), and have
the same command line (``list`` records, the default ``write`` step writes the jsonl files). Each
script keeps its own server table, tasks and way of listing (``mcp_catalog``: contextsieve's MCP
client; ``mcp_live``: the official MCP SDK's client); this module holds the rest:

- :func:`npm_info`, :func:`pypi_info`: a package's version, licence and summary;
- :func:`make_venv`: a virtualenv holding some packages (``uv`` when there is one);
- :func:`fill_root`, :func:`base_env`, :func:`npm_launch`, :func:`pypi_launch`: how a server is started;
- :func:`read_jsonl`, :func:`write_jsonl`, :func:`tool_names`: the data files;
- :func:`run_build`, :class:`CommandLine`: the scripts' ``main`` and its options.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

#: A server table's row: (registry, package, arguments after the command, environment). ``{root}`` in
#: the arguments and environment stands for a temp folder (:func:`fill_root`).
ServerSpec = tuple[str, str, list[str], dict[str, str]]

#: Licences that allow the recorded tool lists to be redistributed; a server under any other is left out.
ALLOWED_LICENCES = {"MIT", "Apache-2.0", "BSD-3-Clause", "BSD-2-Clause", "ISC", "MPL-2.0", "0BSD", "Unlicense"}
#: ``@modelcontextprotocol/*`` npm packages say "SEE LICENSE IN LICENSE" and ship no LICENSE file; their
#: READMEs say MIT, and the repository (modelcontextprotocol/servers) is MIT with Apache-2.0 for
#: contributions since January 2026 (its pull request #3206).
MCP_REFERENCE_LICENCE = "MIT"
#: PyPI packages of the same repository (some declare no licence in their metadata): :data:`MCP_REFERENCE_LICENCE`.
REFERENCE_PYPI = {"mcp-server-sqlite", "mcp-server-fetch", "mcp-server-time", "mcp-server-git"}
#: The variables of this process a started server inherits (its own environment is added to them).
BASE_ENV = ("PATH", "HOME", "SSL_CERT_FILE", "LANG")
#: PyPI licence names (as metadata or classifiers give them) -> SPDX identifiers.
PYPI_LICENCES = {
    "MIT License": "MIT",
    "Apache Software License": "Apache-2.0",
    "Apache 2.0": "Apache-2.0",
    "BSD License": "BSD-3-Clause",
    "GNU General Public License v3 (GPLv3)": "GPL-3.0",
}

#: Run by the virtualenv's Python: ``[version, licence, summary]`` of the package named by ``argv[1]``.
#: The licence: ``License-Expression``, else ``License`` (a short one), else the first licence
#: classifier, else the first line of the licence file the wheel ships (MIT or Apache).
_PYPI_METADATA = (
    "import json, importlib.metadata as m, sys\n"
    "d = m.metadata(sys.argv[1])\n"
    "lic = d.get('License-Expression') or d.get('License') or ''\n"
    "if not lic or len(lic) > 40:\n"
    "    cl = [c.split('::')[-1].strip() for c in d.get_all('Classifier') or [] if c.startswith('License ::')]\n"
    "    lic = cl[0] if cl else lic[:40]\n"
    "lic = 'Apache-2.0' if lic.startswith('Apache License') else 'MIT' if lic.startswith('MIT License') else lic\n"
    "if not lic:  # no licence in the metadata: the licence file the wheel ships, by its first line\n"
    "    for f in m.distribution(sys.argv[1]).files or []:\n"
    "        if 'licen' in str(f).lower() and '.dist-info' in str(f):\n"
    "            head = f.read_text()[:200].strip().lower()\n"
    "            lic = 'MIT' if head.startswith('mit license') else 'Apache-2.0' if 'apache license' in head else ''\n"
    "            break\n"
    "print(json.dumps([d['Version'], lic, d.get('Summary') or '']))\n"
)


class PackageInfo(NamedTuple):
    """A package's registry metadata.

    Attributes:
        version: the version (npm: the latest published; PyPI: the one installed).
        licence: an SPDX identifier where the metadata allows one, else the metadata's text (``""``: none).
        description: the package's own one-line summary (``""``: none).
    """

    version: str
    licence: str
    description: str


def npm_info(package: str) -> PackageInfo:
    """The latest version, licence and description of an npm package (``npm view``, 120 s at most).

    A licence given as an object is read by its ``type``; the reference servers' "SEE LICENSE IN
    LICENSE" is :data:`MCP_REFERENCE_LICENCE`. Raises ``subprocess.SubprocessError`` when ``npm``
    fails or times out, ``ValueError`` when it prints no JSON.
    """
    out = subprocess.run(
        ["npm", "view", package, "version", "license", "description", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    info = json.loads(out)
    lic = info.get("license", "")
    lic = lic.get("type", "") if isinstance(lic, dict) else str(lic)
    if package.startswith("@modelcontextprotocol/") and lic.startswith("SEE LICENSE"):
        lic = MCP_REFERENCE_LICENCE
    return PackageInfo(str(info.get("version", "")), lic, str(info.get("description", "")))


def pypi_info(python: Path, package: str) -> PackageInfo:
    """The version, licence and summary of ``package`` as installed for the interpreter ``python``.

    Licence names are mapped to SPDX by :data:`PYPI_LICENCES`; a package of :data:`REFERENCE_PYPI`
    without one is :data:`MCP_REFERENCE_LICENCE`. Raises ``subprocess.CalledProcessError`` when the
    package is not installed there.
    """
    out = subprocess.run(
        [str(python), "-c", _PYPI_METADATA, package], capture_output=True, text=True, check=True
    ).stdout
    version, lic, summary = json.loads(out)
    lic = PYPI_LICENCES.get(lic, lic)
    if not lic and package in REFERENCE_PYPI:
        lic = MCP_REFERENCE_LICENCE
    return PackageInfo(version, lic, summary)


def find_python(version: str) -> str:
    """A ``python{version}`` (e.g. ``"3.12"``) that runs: on PATH, or one of pyenv's versions (its shims
    refuse versions not selected). Raises ``OSError`` when there is none."""
    for exe in (shutil.which(f"python{version}"), *sorted(Path.home().glob(f".pyenv/versions/{version}*/bin/python3"))):
        if exe and subprocess.run([str(exe), "-V"], capture_output=True).returncode == 0:
            return str(exe)
    raise OSError(f"no python{version} that runs")


def make_venv(path: Path, packages: list[str], python: str | None = None) -> Path:
    """A virtualenv at ``path`` (made unless it has a ``bin/python``) with ``packages`` installed in it.

    Uses ``uv`` when one is on PATH or named by the ``UV`` environment variable, else ``venv`` and
    ``pip``. ``python``: the Python version to make it with (:func:`find_python`; default: the Python
    running this). An install may take 900 s at most. Raises ``subprocess.SubprocessError`` when a step
    fails, ``OSError`` when there is no such Python.
    """
    uv = shutil.which("uv") or os.environ.get("UV")
    env = os.environ | {"UV_NATIVE_TLS": "1"}
    if not (path / "bin" / "python").exists():
        exe = find_python(python) if python else sys.executable
        cmd = [uv, "venv", "-q", "-p", exe, str(path)] if uv else [exe, "-m", "venv", str(path)]
        subprocess.run(cmd, check=True, env=env)
    if uv:
        subprocess.run(
            [uv, "pip", "install", "-q", "-p", str(path / "bin" / "python"), *packages],
            check=True,
            env=env,
            timeout=900,
        )
    else:
        subprocess.run([str(path / "bin" / "pip"), "install", "-q", *packages], check=True, timeout=900)
    return path


def fill_root(args: list[str], env: dict[str, str], root: Path) -> tuple[list[str], dict[str, str]]:
    """A server's arguments and environment with ``{root}`` replaced by the folder ``root``."""
    return [a.replace("{root}", str(root)) for a in args], {k: v.replace("{root}", str(root)) for k, v in env.items()}


def base_env() -> dict[str, str]:
    """The variables of :data:`BASE_ENV` that this process has, for a server's environment."""
    return {k: os.environ[k] for k in BASE_ENV if k in os.environ}


def npm_launch(package: str, args: list[str]) -> tuple[str, list[str], PackageInfo]:
    """The command and arguments that run an npm server at its latest version (``npx -y
    PACKAGE@VERSION ARGS``), and the package's metadata (:func:`npm_info`)."""
    info = npm_info(package)
    return "npx", ["-y", f"{package}@{info.version}", *args], info


def pypi_launch(home: Path, package: str, args: list[str]) -> tuple[str, list[str], PackageInfo]:
    """The command and arguments that run a PyPI server installed in the virtualenv ``home``, and the
    package's metadata (:func:`pypi_info`). The command is the console script named like the package,
    or another one of the package when the arguments begin with ``@SCRIPT``."""
    info = pypi_info(home / "bin" / "python", package)
    script = package
    if args and args[0].startswith("@"):
        script, args = args[0][1:], args[1:]
    return str(home / "bin" / script), args, info


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The rows of a jsonl file (blank lines skipped)."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    """``rows`` as a jsonl file, one JSON object a line, non-ASCII kept as is."""
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")


def tool_names(path: Path) -> set[str]:
    """Every tool of a ``tools.jsonl`` as ``server/name``."""
    return {f"{t['server']}/{t['name']}" for t in read_jsonl(path)}


class CommandLine(NamedTuple):
    """A recording script's options beside ``[list|write]``, ``--timeout`` and ``--only``.

    Attributes:
        venv_option: the option naming the folder of the virtualenvs ``list`` makes (e.g. ``"--venv"``).
        venv_name: that folder's default name, in the temp folder.
        timeout: ``--timeout``'s default, in seconds per server.
        install_note: ``--timeout``'s help after "seconds per server", in parentheses.
        only_into: ``--only``'s help after "(re-)list into": where ``--only``'s listings go.
    """

    venv_option: str
    venv_name: str
    timeout: float
    install_note: str
    only_into: str


def run_build(
    doc: str,
    list_step: Callable[[Path, float, list[str] | None], None],
    write_step: Callable[[], None],
    options: CommandLine,
    argv: list[str] | None = None,
) -> None:
    """A recording script's ``main``: ``[list|write] [VENV_OPTION PATH] [--timeout S] [--only a,b]``.

    ``list`` calls ``list_step(virtualenv folder, timeout, the --only names or None)``; ``write`` (the
    default) calls ``write_step()``. ``doc``: the script's docstring (its first line describes the
    command); ``argv``: the arguments (default: the command line's).
    """
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("step", nargs="?", choices=["list", "write"], default="write")
    ap.add_argument(options.venv_option, type=Path, default=Path(tempfile.gettempdir()) / options.venv_name)
    ap.add_argument(
        "--timeout", type=float, default=options.timeout, help=f"seconds per server ({options.install_note})"
    )
    ap.add_argument("--only", help=f"comma-separated server names to (re-)list into {options.only_into}")
    args = ap.parse_args(argv)
    if args.step == "list":
        venv = getattr(args, options.venv_option.lstrip("-").replace("-", "_"))
        list_step(venv, args.timeout, args.only.split(",") if args.only else None)
    else:
        write_step()
