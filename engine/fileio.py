"""Crash-safe file writes: a reader sees the old file or the new one, never half of one; and guarded
reads of the files a user names (:func:`read_user_file`: only a regular file is opened, since a FIFO
would wait for a writer forever and ``/dev/zero`` never ends, and no more than :data:`MAX_INPUT_BYTES`).

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
from typing import BinaryIO

from contextsieve.errors import InputError

__all__ = [
    "atomic_write_bytes",
    "MAX_INPUT_BYTES",
    "LIMIT_TEXT",
    "regular_file",
    "read_user_file",
    "read_stream",
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


def atomic_write_bytes(path: Path, data: bytes, *, follow_symlinks: bool = True, keep_mode: bool = True) -> None:
    """Write ``data`` to ``path`` through a temp file in the same folder, fsync, then ``os.replace``.

    On any error the temp file is removed and ``path`` is left as it was. See the module docstring
    for modes, symlinks (``follow_symlinks``, default ``True``) and stale temp files. ``keep_mode=False``
    gives the file the default mode (``0o666`` less the umask) instead of the mode of the file it
    replaces: a cache's own file that was made unreadable is replaced by a readable one.
    """
    path = Path(path)
    if follow_symlinks and path.is_symlink():
        path = path.resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_temps(path)
    try:
        st = path.lstat()
        mode = stat.S_IMODE(st.st_mode) if stat.S_ISREG(st.st_mode) and keep_mode else _default_mode()
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


#: Most bytes read from a file or standard input named on the command line (64 MiB).
MAX_INPUT_BYTES = 64 * 1024 * 1024
#: The limit as the help and the errors say it.
LIMIT_TEXT = "64 MiB"


def _kind(mode: int) -> str:
    """What a file that is not a regular one is, in words."""
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _check(st: os.stat_result, path: Path, what: str, limit: int | None) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"{what} {path} is {_kind(st.st_mode)}, not a regular file")
    if limit is not None and st.st_size > limit:
        raise InputError(f"{what} {path} is {st.st_size:,} bytes, over the limit of {_size(limit)}")


def _size(limit: int) -> str:
    return LIMIT_TEXT if limit == MAX_INPUT_BYTES else f"{limit:,} bytes"


def regular_file(path: Path, what: str, limit: int | None = MAX_INPUT_BYTES) -> os.stat_result:
    """``path``'s status (links followed) when it is a regular file of at most ``limit`` bytes (``None``:
    any size), checked without opening it; else :class:`InputError` starting with ``what`` (e.g. ``"--tools"``)."""
    try:
        st = os.stat(path)
    except OSError as e:
        raise InputError(f"cannot read {what} {path} ({e.strerror or e})") from e
    _check(st, path, what, limit)
    return st


def read_user_file(path: Path, what: str, limit: int | None = MAX_INPUT_BYTES) -> bytes:
    """The bytes of the regular file ``path`` (:func:`regular_file`), at most ``limit`` of them (``None``:
    all: a file the library wrote itself, such as a saved session): checked before it is opened, and
    again on the opened file (opened without waiting, so a FIFO put in its place meanwhile is refused
    too); a file that grew past ``limit`` since is refused as well."""
    regular_file(path, what, limit)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        raise InputError(f"cannot read {what} {path} ({e.strerror or e})") from e
    with os.fdopen(fd, "rb") as f:
        _check(os.fstat(f.fileno()), path, what, limit)
        if limit is None:
            try:
                return f.read()
            except OSError as e:
                raise InputError(f"cannot read {what} {path} ({e.strerror or e})") from e
        return read_stream(f, f"{what} {path}", limit)


def read_stream(stream: BinaryIO, what: str, limit: int = MAX_INPUT_BYTES) -> bytes:
    """At most ``limit`` bytes of ``stream`` (standard input, say) up to its end; :class:`InputError`
    starting with ``what`` when there are more, or when it cannot be read."""
    try:
        data = stream.read(limit + 1)
    except OSError as e:
        raise InputError(f"cannot read {what} ({e.strerror or e})") from e
    if len(data) > limit:
        raise InputError(f"{what} holds more than {_size(limit)}, the most contextsieve reads")
    return bytes(data)
