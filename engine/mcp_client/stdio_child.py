"""A stdio MCP server's process: started in a process group of its own, ended with its connection.

:class:`StdioChild` is the transport :func:`~contextsieve.mcp_client.client.open_transport` gives
:class:`mcp.Client` for a stdio server: stdin is closed when the connection ends, then the group gets
SIGTERM and then SIGKILL, each after :data:`STOP_GRACE_SECONDS`, so no child (nor a child of it)
outlives its connection, even one that ignores stdin EOF and SIGTERM. :func:`end_child_groups` ends
every live group at once (the gateway's signal handler); a process that dies without a chance to do
either (SIGKILL, a crash) leaves its groups to the :mod:`~contextsieve.mcp_client.reaper`.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from contextsieve.mcp_client.reaper import REAPER

__all__ = ["StdioChild", "end_child_groups", "STOP_GRACE_SECONDS"]

#: Seconds a stdio server has to exit after its stdin is closed before its process group gets SIGTERM,
#: and again before it gets SIGKILL (the MCP shutdown sequence; the SDK waits 2 s each).
STOP_GRACE_SECONDS = 1.0

#: Process groups of the live stdio servers this process started: group id -> server name.
_GROUPS: dict[int, str] = {}


def _group_alive(pgid: int) -> bool:
    """Whether process group ``pgid`` has a member left (signal 0; only ESRCH proves it gone)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # a member we may not signal, or a zombie: not proof that the group is gone
    return True


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass  # gone, or nothing left that we may signal


def end_child_groups(grace: float = 0.5) -> int:
    """End the process group of every live stdio server this process started, at once: SIGTERM, then
    SIGKILL to what is left after ``grace`` seconds (default 0.5). Blocking and safe in a signal
    handler (the gateway's, for SIGTERM and SIGHUP: a host that stops the gateway ends its servers
    too). Returns the number of groups signalled."""
    groups = list(_GROUPS)
    for pgid in groups:
        _signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(_group_alive(g) for g in groups):
        time.sleep(0.02)
    for pgid in groups:
        if _group_alive(pgid):
            _signal_group(pgid, signal.SIGKILL)
    return len(groups)


class StdioChild:
    """A stdio MCP server as a transport for :class:`mcp.Client`: an async context manager that
    starts ``argv`` in a process group of its own and yields the read stream (each stdout line as a
    JSON-RPC message, or the exception for a line that is not one) and the write stream (one JSON
    line per message to stdin).

    The read stream ends when stdout ends, when the server process exits (its last lines are read
    first) or when stdin breaks, so a connection whose server died is seen as closed without sending
    it anything. Leaving the context ends the server: stdin is closed, then the process group gets
    SIGTERM and then SIGKILL, each after :data:`STOP_GRACE_SECONDS`; the group is ended even when the
    server itself exited on EOF (a child it left behind goes too).

    Attributes:
        pid: the server's process id, which is also its process group id (``None`` before start).
        returncode: its exit status once it ended, else ``None``.
    """

    def __init__(self, argv: list[str], *, env: dict[str, str], cwd: str | None, errlog: Any, name: str = "") -> None:
        self.argv, self.env, self.cwd, self.errlog, self.name = argv, env, cwd, errlog, name
        self.process: Any = None
        self._tg: Any = None
        self._streams: tuple[Any, ...] = ()
        self._stopping = False

    @property
    def pid(self) -> int | None:
        return None if self.process is None else int(self.process.pid)

    @property
    def returncode(self) -> int | None:
        return None if self.process is None else self.process.returncode

    async def __aenter__(self) -> tuple[Any, Any]:
        import anyio

        self.process = await anyio.open_process(
            self.argv, env=self.env, cwd=self.cwd, stderr=self.errlog, start_new_session=True
        )
        _GROUPS[self.process.pid] = self.name
        REAPER.watch(self.process.pid)  # ended by the reaper if this process dies first, even of SIGKILL
        read_send, read_recv = anyio.create_memory_object_stream[Any](0)
        write_send, write_recv = anyio.create_memory_object_stream[Any](0)
        self._streams = (read_send, read_recv, write_send, write_recv)
        self._writer_done = anyio.Event()
        self._tg = anyio.create_task_group()
        try:
            await self._tg.__aenter__()
        except BaseException:  # cancelled right after the start: the child must not outlive it
            _signal_group(self.process.pid, signal.SIGKILL)
            _GROUPS.pop(self.process.pid, None)
            REAPER.forget(self.process.pid)
            raise
        self._tg.start_soon(self._read_stdout, read_send)
        self._tg.start_soon(self._write_stdin, write_recv, read_send)
        self._tg.start_soon(self._watch_exit, read_send)
        return read_recv, write_send

    async def __aexit__(self, *exc: Any) -> None:
        import anyio

        self._stopping = True
        with anyio.CancelScope(shield=True):
            await self._stop()
        self._tg.cancel_scope.cancel()
        await self._tg.__aexit__(None, None, None)
        for stream in self._streams:
            stream.close()

    async def _read_stdout(self, read_send: Any) -> None:
        import anyio
        from mcp.shared.message import SessionMessage
        from mcp.types import jsonrpc_message_adapter

        buffer = bytearray()
        delivering = True  # after the session is gone the rest is read and dropped (a full pipe blocks exit)
        try:
            async for chunk in self.process.stdout:
                buffer += chunk
                while (end := buffer.find(b"\n")) >= 0:
                    line = bytes(buffer[:end]).decode("utf-8", "replace")
                    del buffer[: end + 1]
                    if not delivering or not line.strip():
                        continue
                    item: Any
                    try:
                        item = SessionMessage(jsonrpc_message_adapter.validate_json(line, by_name=False))
                    except ValueError as e:  # not JSON-RPC: the session hands it to the message handler
                        item = e
                    try:
                        await read_send.send(item)
                    except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                        delivering = False
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, OSError):
            pass
        finally:
            read_send.close()  # the session sees the connection end

    async def _write_stdin(self, write_recv: Any, read_send: Any) -> None:
        import anyio

        try:
            async for message in write_recv:
                data = message.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n"
                await self.process.stdin.send(data.encode("utf-8", "replace"))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            read_send.close()  # stdin broke: the server cannot hear us, so the connection is over
        finally:
            self._writer_done.set()

    async def _watch_exit(self, read_send: Any) -> None:
        """End the read stream when the server process exited (its stdout may stay open in a child
        it left behind); its last lines get a moment to be read first."""
        import anyio

        while self.process.returncode is None:
            await anyio.sleep(0.1)
        await anyio.sleep(0.5)
        read_send.close()

    async def _stop(self) -> None:
        import anyio

        _, read_recv, write_send, _ = self._streams
        write_send.close()  # the writer flushes what it holds, then ends
        with anyio.move_on_after(0.5):
            await self._writer_done.wait()
        read_recv.close()  # the reader drops the rest of stdout from now on
        try:
            await self.process.stdin.aclose()
        except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass
        pgid = self.process.pid
        with anyio.move_on_after(STOP_GRACE_SECONDS):
            while self.process.returncode is None:
                await anyio.sleep(0.02)
        for sig in (signal.SIGTERM, signal.SIGKILL):  # the whole group: a child it left behind as well
            if not _group_alive(pgid):
                break
            _signal_group(pgid, sig)
            with anyio.move_on_after(STOP_GRACE_SECONDS):
                while _group_alive(pgid):
                    _ = self.process.returncode  # reading it reaps the leader on some event loops
                    await anyio.sleep(0.02)
        _GROUPS.pop(pgid, None)
        REAPER.forget(pgid)
        try:
            await self.process.stdout.aclose()
        except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass
