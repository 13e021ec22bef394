"""A watchdog process that ends the stdio servers' process groups when the process that started them
dies, however it dies (a SIGKILL included, which no handler sees).

The process that starts stdio servers (:class:`~contextsieve.mcp_client.stdio_child.StdioChild`: the
gateway, a listing) starts one reaper while it has any: this file run as a script by the same Python
(``python -I -S reaper.py GRACE``, in a session of its own, so a signal to the parent's process group
does not reach it), whose stdin is the read end of a pipe whose only writer is the parent (the write end
is close-on-exec, so no server inherits it) and whose stdout and stderr are the null device (it holds
none of the host's pipes open). The parent writes ``+PGID`` when it starts a server's
process group and ``-PGID`` once that group has ended. When the pipe reaches end of file (the parent
closed it, or died) the reaper sends SIGTERM to every group it was told of that still has a member,
then SIGKILL to what is left after ``GRACE`` seconds, and exits: the servers end with their children,
and nothing the reaper was not told of is signalled. A parent that exits normally has ended its groups
already, so the reaper exits at once; the parent closes the pipe whenever it has no group left (the
reaper ends) and starts a new reaper for its next server.

POSIX only (process groups); a reaper that cannot be started is a warning, never an error: the servers
still end with a parent that ends normally or by SIGTERM or SIGHUP. Linux's ``PR_SET_PDEATHSIG`` is not
used: it ends only the server and not its children, and it fires when the *thread* that started the
server ends (a listing in a worker thread would lose its servers).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time

__all__ = ["Reaper", "REAPER"]

_log = logging.getLogger(__name__)


class Reaper:
    """The parent's side: the pipe to a reaper process, started when the first group is watched and
    ended when the last one is forgotten. Thread-safe; never raises."""

    def __init__(self, grace: float = 1.0) -> None:
        self.grace = grace
        self._lock = threading.Lock()
        self._groups: set[int] = set()
        self._write: int | None = None
        self._owner = 0  # the pid that started the reaper (a forked child starts its own)
        self._process: subprocess.Popen[bytes] | None = None
        self._ended: list[subprocess.Popen[bytes]] = []
        self._failed = False

    @property
    def pid(self) -> int | None:
        """The running reaper's process id, or ``None``."""
        with self._lock:
            return None if self._process is None or self._write is None else self._process.pid

    def watch(self, pgid: int) -> None:
        """Have process group ``pgid`` ended if this process dies before :meth:`forget` is called."""
        with self._lock:
            if self._owner != os.getpid():  # forked: the reaper (if any) and its groups are the parent's
                if self._write is not None:
                    os.close(self._write)  # this process's copy: the parent's reaper must see its end
                self._write, self._process, self._ended, self._groups = None, None, [], set()
                self._owner = os.getpid()
            self._groups.add(pgid)
            if self._write is None and not self._start():
                return
            self._send(f"+{pgid}\n")

    def forget(self, pgid: int) -> None:
        """``pgid`` has ended (or is being ended by this process): the reaper leaves it alone; the last
        group forgotten ends the reaper."""
        with self._lock:
            if pgid not in self._groups or self._owner != os.getpid():
                return
            self._groups.discard(pgid)
            if self._write is None:
                return
            self._send(f"-{pgid}\n")
            if not self._groups:
                self._close()

    def _start(self) -> bool:
        for ended in list(self._ended):  # collect reapers that ended since (no zombies pile up)
            if ended.poll() is not None:
                self._ended.remove(ended)
        if sys.platform == "win32" or self._failed:
            return False
        try:
            read, write = os.pipe()  # both close-on-exec: no server inherits the write end
        except OSError as e:
            self._warn(e)
            return False
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-I", "-S", os.path.abspath(__file__), str(self.grace)],
                stdin=read,
                stdout=subprocess.DEVNULL,  # it holds none of the host's pipes: none waits for it to end
                stderr=subprocess.DEVNULL,
                start_new_session=True,
                close_fds=True,
            )
        except (OSError, ValueError, subprocess.SubprocessError) as e:
            os.close(write)
            self._warn(e)
            return False
        finally:
            os.close(read)
        self._write, self._owner = write, os.getpid()
        return True

    def _send(self, text: str) -> None:
        assert self._write is not None
        try:
            os.write(self._write, text.encode())  # a few bytes: one atomic write to the pipe
        except OSError as e:  # the reaper died: the servers end with this process's handlers only
            self._warn(e)
            self._close()

    def _close(self) -> None:
        if self._write is not None:
            try:
                os.close(self._write)
            except OSError:
                pass
            self._write = None
        if self._process is not None:
            self._ended.append(self._process)
            self._process = None

    def _warn(self, e: BaseException) -> None:
        self._failed = True  # once: a reaper that cannot start now will not start later either
        _log.warning(
            "could not start the process that ends stdio servers if this process is killed (%s: %s); "
            "they still end when it exits or gets SIGTERM",
            type(e).__name__,
            e,
        )


#: The reaper of this process's stdio servers.
REAPER = Reaper()


def _alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def _signal(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except OSError:
        pass


def main() -> None:
    """The reaper process: read ``+PGID`` / ``-PGID`` lines from stdin until end of file, then end the
    groups still listed (SIGTERM, then SIGKILL after the grace in ``argv[1]``)."""
    grace = float(sys.argv[1]) if len(sys.argv) > 1 else 1.0
    for name in ("SIGINT", "SIGHUP", "SIGPIPE"):  # only the pipe's end ends the reaper
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_IGN)
    groups: set[int] = set()
    pending = b""
    while True:
        try:
            chunk = os.read(0, 4096)
        except OSError:
            break
        if not chunk:
            break
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            try:
                pgid = int(line[1:])
            except ValueError:
                continue
            if line[:1] == b"+" and pgid > 1:
                groups.add(pgid)
            elif line[:1] == b"-":
                groups.discard(pgid)
    live = [g for g in groups if _alive(g)]
    for pgid in live:
        _signal(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(_alive(g) for g in live):
        time.sleep(0.02)
    for pgid in live:
        if _alive(pgid):
            _signal(pgid, signal.SIGKILL)


if __name__ == "__main__":
    main()
