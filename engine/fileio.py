"""Crash-safe file writes: a reader sees the old file or the new one, never half of one.

Every write goes through a temp file in the target's folder (named
``.<name>.<host>-<pid>-<random>.tmp``), fsync, ``os.replace``, then an fsync of the folder. The new
file keeps the mode of the file it replaces (a new file gets the default mode under the process
umask, not ``mkstemp``'s 0600). Symlinks: a user's file
(``follow_symlinks=True``: agent files, sessions) is written through the link, atomically
next to the file the link points to; a cache file (``follow_symlinks=False``) never writes through a
link, the link itself is replaced by a regular file. Temp files of this naming left by a killed
writer are removed by the next write to the same file: at once when their process (on this host) is
gone, otherwise once they are older than :data:`STALE_TEMP_SECONDS` (a process of that id may be a
writer still at work, or a new process that reused the id).
"""

from __future__ import annotations

import hashlib
import os
import socket
import stat
import tempfile
import time
from pathlib import Path

__all__ = [
    "atomic_write_bytes",
    "STALE_TEMP_SECONDS",
    "DATA_ENV",
    "default_data_dir",
    "CACHE_ENV",
    "default_cache_dir",
]

#: Environment variable naming the folder of contextsieve's own data (the default stash stores).
DATA_ENV = "CONTEXTSIEVE_DATA"
#: Environment variable naming contextsieve's cache folder (built models, embeddings, Numba kernels).
CACHE_ENV = "CONTEXTSIEVE_CACHE"

#: Age (seconds) from which a leftover temp file of a write is taken to be a killed writer's (default 600).
STALE_TEMP_SECONDS = 600.0


def _host_tag() -> str:
    return hashlib.sha256(socket.gethostname().encode("utf-8", "replace")).hexdigest()[:8]


_HOST = _host_tag()


def _default_mode() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def atomic_write_bytes(path: Path, data: bytes, *, follow_symlinks: bool = True) -> None:
    """Write ``data`` to ``path`` through a temp file in the same folder, fsync, then ``os.replace``.

    On any error the temp file is removed and ``path`` is left as it was. See the module docstring
    for modes, symlinks (``follow_symlinks``, default ``True``) and stale temp files.
    """
    path = Path(path)
    if follow_symlinks and path.is_symlink():
        path = path.resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_temps(path)
    try:
        st = path.lstat()
        mode = stat.S_IMODE(st.st_mode) if stat.S_ISREG(st.st_mode) else _default_mode()
    except FileNotFoundError:
        mode = _default_mode()
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.{_HOST}-{os.getpid()}-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), mode)
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def _fsync_dir(folder: Path) -> None:
    """Make the rename durable (a no-op where folders cannot be opened, as on Windows)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _writer_gone(temp_name: str, prefix: str) -> bool:
    """Whether the temp file names a process of this host that no longer runs."""
    host, _, rest = temp_name[len(prefix) :].partition("-")
    pid = rest.partition("-")[0]
    if host != _HOST or not pid.isdigit() or int(pid) == os.getpid():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OverflowError, OSError):
        return False  # alive under another user, or not a pid we can ask about
    return False


def _remove_stale_temps(path: Path) -> None:
    """Remove ``.<name>.*.tmp`` files next to ``path`` whose writer is gone or that are older than
    :data:`STALE_TEMP_SECONDS`."""
    cutoff = time.time() - STALE_TEMP_SECONDS
    prefix = f".{path.name}."
    try:
        leftovers = list(path.parent.glob(f".{_glob_escape(path.name)}.*.tmp"))
    except OSError:
        return
    for p in leftovers:
        try:
            st = p.lstat()
            if stat.S_ISREG(st.st_mode) and (st.st_mtime < cutoff or _writer_gone(p.name, prefix)):
                p.unlink()
        except OSError:
            continue  # gone already, or not ours to remove


def _glob_escape(name: str) -> str:
    return "".join(f"[{c}]" if c in "*?[" else c for c in name)


def default_data_dir() -> Path:
    """``$CONTEXTSIEVE_DATA``, else ``$XDG_DATA_HOME/contextsieve``, else ``~/.local/share/contextsieve``:
    where data that must outlive caches lives (``contextsieve serve``'s default stash)."""
    env = os.environ.get(DATA_ENV)
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_DATA_HOME")
    return (Path(xdg) if xdg else Path.home() / ".local" / "share") / "contextsieve"


def default_cache_dir() -> Path:
    """``$CONTEXTSIEVE_CACHE``, else ``$XDG_CACHE_HOME/contextsieve``, else ``~/.cache/contextsieve``:
    the cache root of every layer (built models under ``models/``, the compiled Numba kernels under
    ``numba/``); anything in it can be rebuilt."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "contextsieve"
