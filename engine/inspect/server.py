"""The inspect page's server: :func:`~.app.build_app`'s app under uvicorn on 127.0.0.1, in this
thread or in a background one."""

from __future__ import annotations

import socket
import threading
import time

from contextsieve.errors import ContextSieveError, InputError
from contextsieve.inspect.app import build_app
from contextsieve.inspect.inspector import MAX_BODY_BYTES, Inspector

__all__ = ["InspectServer"]


class InspectServer:
    """The page served on ``127.0.0.1:port`` (``port`` 0: any free port) by uvicorn, with the header
    deadline of ``serve --transport http``. The socket is bound at construction (:attr:`url` is then
    known); :meth:`serve_forever` serves in this thread, :meth:`start` / :meth:`stop` (or ``with``) in
    a background thread."""

    def __init__(
        self,
        inspector: Inspector,
        *,
        port: int = 0,
        header_seconds: float = 10.0,
        body_seconds: float = 30.0,
        max_body_bytes: int = MAX_BODY_BYTES,
    ) -> None:
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
            raise InputError(f"port must be an int from 0 to 65535, got {port!r}")
        app = build_app(inspector, max_body_bytes=max_body_bytes, body_seconds=body_seconds)
        import uvicorn

        from contextsieve.mcp_server.http_transport import header_deadline_protocol

        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", port))
            sock.listen(64)
        except OSError as e:
            sock.close()
            raise InputError(f"cannot listen on 127.0.0.1:{port}: {e.strerror or e}") from None
        self._sock = sock
        self.port: int = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/"
        config = uvicorn.Config(app, log_level="warning", lifespan="off", http=header_deadline_protocol(header_seconds))
        self._server = uvicorn.Server(config)
        self._thread: threading.Thread | None = None

    def serve_forever(self) -> None:
        """Serve until interrupted (Ctrl-C) or :meth:`stop`."""
        try:
            self._server.run(sockets=[self._sock])
        finally:
            self._sock.close()

    def start(self, timeout: float = 30.0) -> InspectServer:
        """Serve in a background thread; returns once the server accepts connections."""
        self._thread = threading.Thread(target=self.serve_forever, name="contextsieve-inspect", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise ContextSieveError("the inspect server did not start")
            time.sleep(0.02)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop serving and wait for the background thread."""
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout)
        self._sock.close()

    def __enter__(self) -> InspectServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
