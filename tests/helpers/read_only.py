"""Running a command on folders and files this user may not write: as root, whom file modes do not stop,
without the capabilities that override them (util-linux's ``setpriv``); the tree of a folder to show
that nothing was written; an agent and an environment of its own for each test."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from contextsieve import example_agent_path

#: As root, runs a command without the capabilities that let root ignore file modes, so a read-only
#: folder or file is read-only to it too.
NO_OVERRIDE = (
    "setpriv",
    "--inh-caps=-dac_override,-dac_read_search,-fowner",
    "--bounding-set=-dac_override,-dac_read_search,-fowner",
    "--",
)


def root_without_override() -> tuple[str, ...]:
    """:data:`NO_OVERRIDE` when this is root and setpriv can drop those capabilities here, else ()."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        return ()
    probe = subprocess.run([*NO_OVERRIDE, sys.executable, "-c", "pass"], capture_output=True, timeout=120)
    return NO_OVERRIDE if probe.returncode == 0 else ()


def prefix() -> tuple[str, ...]:
    """What runs a command so that file modes bind it: nothing for a user other than root, else
    :data:`NO_OVERRIDE` (the test is skipped where setpriv cannot drop those capabilities here)."""
    if os.geteuid() != 0:
        return ()
    found = root_without_override()
    if not found:
        pytest.skip("root, and setpriv cannot drop the capabilities that let root write a read-only folder")
    return found


def tree(folder: Path) -> dict[str, tuple[int, int]]:
    """Each file and folder under ``folder`` with its size and modification time."""
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*")}


def set_writable(folder: Path, writable: bool) -> None:
    """Make ``folder`` and everything in it writable (755 / 644) or read-only (555 / 444)."""
    for p in [folder, *folder.rglob("*")]:
        p.chmod((0o755 if writable else 0o555) if p.is_dir() else (0o644 if writable else 0o444))


def setting(tmp_path: Path, **folders: Path) -> tuple[Path, dict[str, str]]:
    """A copy of the example agent in ``tmp_path`` (made enterable by every user) and an environment
    without the caller's CONTEXTSIEVE_ and XDG_ variables: ``HOME`` a new ``tmp_path/home``, each of
    ``folders`` created as ``CONTEXTSIEVE_<NAME>`` (``data=...``, ``cache=...``)."""
    tmp_path.chmod(0o755)
    home = tmp_path / "home"
    home.mkdir()
    for folder in folders.values():
        folder.mkdir(parents=True, exist_ok=True)
    agent = tmp_path / "agent.yaml"
    shutil.copy(example_agent_path(), agent)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("CONTEXTSIEVE_", "XDG_"))},
        "HOME": str(home),
        "PYTHONDONTWRITEBYTECODE": "1",
        **{f"CONTEXTSIEVE_{name.upper()}": str(folder) for name, folder in folders.items()},
    }
    return agent, env


def run(
    args: list[str], env: dict[str, str], cwd: Path, with_prefix: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    """``args`` run under ``with_prefix`` with ``env`` in ``cwd``; its output as text."""
    return subprocess.run([*with_prefix, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=600)
