"""The files a user names on the command line (``--tools CATALOG``, ``--message-file FILE``, the task file of
``eval``, ``inspect --session FILE``) and standard input, read with guards: only a regular file is opened (a
FIFO would wait for a writer forever, ``/dev/zero`` never ends), and no more than :data:`MAX_INPUT_BYTES`
is read. Every refusal is an :class:`~contextsieve.errors.InputError` naming the option and the file."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO

from contextsieve.errors import InputError

__all__ = ["MAX_INPUT_BYTES", "LIMIT_TEXT", "regular_file", "read_user_file", "read_stream"]

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


def _check(st: os.stat_result, path: Path, what: str, limit: int) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"{what} {path} is {_kind(st.st_mode)}, not a regular file")
    if st.st_size > limit:
        raise InputError(f"{what} {path} is {st.st_size:,} bytes, over the limit of {_size(limit)}")


def _size(limit: int) -> str:
    return LIMIT_TEXT if limit == MAX_INPUT_BYTES else f"{limit:,} bytes"


def regular_file(path: Path, what: str, limit: int = MAX_INPUT_BYTES) -> os.stat_result:
    """``path``'s status (links followed) when it is a regular file of at most ``limit`` bytes, checked
    without opening it; else :class:`InputError` starting with ``what`` (e.g. ``"--tools"``)."""
    try:
        st = os.stat(path)
    except OSError as e:
        raise InputError(f"cannot read {what} {path} ({e.strerror or e})") from e
    _check(st, path, what, limit)
    return st


def read_user_file(path: Path, what: str, limit: int = MAX_INPUT_BYTES) -> bytes:
    """The bytes of the regular file ``path`` (:func:`regular_file`), at most ``limit`` of them: checked
    before it is opened, and again on the opened file (opened without waiting, so a FIFO put in its place
    meanwhile is refused too); a file that grew past ``limit`` since is refused as well."""
    regular_file(path, what, limit)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        raise InputError(f"cannot read {what} {path} ({e.strerror or e})") from e
    with os.fdopen(fd, "rb") as f:
        _check(os.fstat(f.fileno()), path, what, limit)
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
