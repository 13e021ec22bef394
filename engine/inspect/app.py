"""The inspect page's web app: the Starlette routes over an :class:`~.inspector.Inspector`.

The page is static HTML with a little vanilla JavaScript that renders the JSON endpoints below (all
text goes in as text nodes, never as markup); its files (``index.html``, ``inspect.css``,
``inspect.js``) are package data of ``contextsieve.inspect``, read with :mod:`importlib.resources`. The
HTTP stack is the one ``serve --transport http`` runs (Starlette under uvicorn, from the MCP SDK: the
``mcp`` extra), bound to 127.0.0.1 only (by :class:`~.server.InspectServer`).

Endpoints: ``GET /`` (the page), ``GET /api/info``, ``GET /api/turns`` (the saved session's turns,
replayed), ``POST /api/select`` with ``{"message": "..."}`` (a turn of the page's session), ``POST
/api/reset`` (a new page session). Bad input is a 4xx JSON ``{"error": "..."}``: an empty or
oversize message, a body over :data:`~.inspector.MAX_BODY_BYTES` (413), a body that is not JSON (400),
another content type than ``application/json`` (415), a request from another origin or host name (403).
"""

from __future__ import annotations

import json
import sys
from importlib import resources
from typing import Any

from contextsieve.errors import ContextSieveError, InputError, MissingExtraError, UnknownItemError
from contextsieve.inspect.inspector import MAX_BODY_BYTES, Inspector

__all__ = ["build_app", "page_file", "PageEndpoints", "json_endpoint", "error_response"]

_LOCAL_HOSTS = ("127.0.0.1", "localhost")
_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; "
        "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
}


class _HttpError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _require_stack() -> None:
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as e:
        raise MissingExtraError(
            "contextsieve inspect serves its page with the MCP SDK's web stack (starlette, uvicorn): "
            "pip install 'contextsieve[mcp]'"
        ) from e


def page_file(name: str) -> bytes:
    """One of the page's static files (``index.html``, ``inspect.css``, ``inspect.js``: package data of
    ``contextsieve.inspect``), as the bytes served. Every text from the JSON goes into the page through
    ``textContent``, never as markup."""
    return resources.files("contextsieve.inspect").joinpath(name).read_bytes()


def _host_name(value: str) -> str:
    """The host name of a ``Host`` header value or an origin's authority (no port, no brackets)."""
    if value.startswith("["):
        return value[1:].partition("]")[0]
    return value.rpartition(":")[0] if value.count(":") == 1 else value


class PageEndpoints:
    """The page's JSON endpoints over ``inspector``, one method each (``GET /api/info``, ``GET
    /api/turns``, ``POST /api/select``, ``POST /api/reset``): each takes the HTTP request and returns
    the JSON-ready answer, or raises :class:`_HttpError` for bad input (:func:`json_endpoint` turns
    it into the response). POST bodies are read by :func:`_read_json` within ``max_body_bytes`` and
    ``body_seconds``."""

    def __init__(self, inspector: Inspector, max_body_bytes: int = MAX_BODY_BYTES, body_seconds: float = 30.0) -> None:
        self.inspector = inspector
        self.max_body_bytes = max_body_bytes
        self.body_seconds = body_seconds

    async def info(self, request: Any) -> Any:
        """The agent and the page session's settings."""
        from starlette.concurrency import run_in_threadpool

        return await run_in_threadpool(self.inspector.info)

    async def turns(self, request: Any) -> Any:
        """The saved session's turns, replayed."""
        from starlette.concurrency import run_in_threadpool

        return {"turns": await run_in_threadpool(self.inspector.turns)}

    async def select(self, request: Any) -> Any:
        """A turn of the page's session for the body's ``message``."""
        from starlette.concurrency import run_in_threadpool

        body = await _read_json(request, self.max_body_bytes, self.body_seconds)
        if not isinstance(body, dict):
            raise _HttpError(400, 'the body must be a JSON object: {"message": "..."}')
        if "message" not in body:
            raise _HttpError(400, 'the body has no "message"')
        return await run_in_threadpool(self.inspector.select, body["message"])

    async def reset(self, request: Any) -> Any:
        """A new page session."""
        from starlette.concurrency import run_in_threadpool

        await _read_json(request, self.max_body_bytes, self.body_seconds)
        return await run_in_threadpool(self.inspector.reset)


def error_response(status: int, message: str) -> Any:
    """The JSON ``{"error": message}`` response with ``status`` and the page's security headers."""
    from starlette.responses import JSONResponse

    return JSONResponse({"error": message}, status_code=status, headers=_HEADERS)


def json_endpoint(fn: Any) -> Any:
    """A Starlette endpoint answering ``fn``'s result as JSON: :class:`_HttpError` as its status,
    contextsieve's input errors as 400, others as 500, never a traceback (the console gets one line)."""
    from starlette.responses import JSONResponse

    async def endpoint(request: Any) -> Any:
        try:
            result = await fn(request)
        except _HttpError as e:
            return error_response(e.status, e.message)
        except (InputError, UnknownItemError) as e:
            return error_response(400, str(e).strip("'\""))
        except ContextSieveError as e:
            return error_response(500, str(e))
        except Exception as e:  # noqa: BLE001 - the page gets a message, the console one line
            print(f"contextsieve inspect: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
            return error_response(500, f"internal error ({type(e).__name__}); see the server's console")
        return JSONResponse(result, headers=_HEADERS)

    return endpoint


def _asset(body: bytes, media_type: str) -> Any:
    """An endpoint answering one of the page's static files."""
    from starlette.responses import Response

    async def get(request: Any) -> Any:
        return Response(body, media_type=media_type, headers=_HEADERS)

    return get


async def _no_icon(request: Any) -> Any:
    from starlette.responses import Response

    return Response(status_code=204, headers=_HEADERS)


async def _http_error(request: Any, exc: Exception) -> Any:
    """Starlette's own errors (404, 405) as the page's JSON errors."""
    status = getattr(exc, "status_code", 500)
    words = {404: "no such page", 405: "method not allowed"}
    response = error_response(status, words.get(status, getattr(exc, "detail", "") or "error"))
    response.headers.update(getattr(exc, "headers", None) or {})  # Allow, for a 405
    return response


def _local_only(app: Any) -> Any:
    """``app`` behind the host and origin check (:func:`_refused`: 403)."""

    async def guarded(scope: dict[str, Any], receive: Any, send: Any) -> None:
        why = _refused(scope) if scope["type"] == "http" else None
        if why is not None:
            await error_response(403, why)(scope, receive, send)
            return
        await app(scope, receive, send)

    return guarded


def build_app(inspector: Inspector, *, max_body_bytes: int = MAX_BODY_BYTES, body_seconds: float = 30.0) -> Any:
    """The page's ASGI application (Starlette): :class:`PageEndpoints` and the static files. Requests
    must name 127.0.0.1 or localhost as their host and, when they carry an ``Origin``, come from the
    page itself (403 otherwise: no other web site can read or drive it, also not through DNS
    rebinding); POST bodies must be ``application/json`` (415), at most ``max_body_bytes`` (413) and
    arrive within ``body_seconds`` (408)."""
    _require_stack()
    from starlette.applications import Starlette
    from starlette.exceptions import HTTPException
    from starlette.routing import Route

    api = PageEndpoints(inspector, max_body_bytes, body_seconds)
    files = [("/", "index.html", "text/html"), ("/inspect.js", "inspect.js", "text/javascript")]
    files.append(("/inspect.css", "inspect.css", "text/css"))
    routes = [Route(path, _asset(page_file(f), f"{kind}; charset=utf-8"), methods=["GET"]) for path, f, kind in files]
    routes.append(Route("/favicon.ico", _no_icon, methods=["GET"]))
    for path, fn, method in (
        ("/api/info", api.info, "GET"),
        ("/api/turns", api.turns, "GET"),
        ("/api/select", api.select, "POST"),
        ("/api/reset", api.reset, "POST"),
    ):
        routes.append(Route(path, json_endpoint(fn), methods=[method]))
    return _local_only(Starlette(routes=routes, exception_handlers={HTTPException: _http_error}))


def _refused(scope: dict[str, Any]) -> str | None:
    """Why an HTTP request is refused (403): a host other than 127.0.0.1 or localhost, or an ``Origin``
    other than the page's own; ``None`` when it may pass."""
    headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers") or []}
    host = headers.get("host", "")
    origin = headers.get("origin")
    if _host_name(host) not in _LOCAL_HOSTS:
        return "this page answers requests for 127.0.0.1 or localhost only"
    if origin is not None and origin != f"http://{host}":
        return "requests from other origins are refused"
    return None


async def _read_json(request: Any, max_body_bytes: int, body_seconds: float) -> Any:
    """A POST body as JSON: ``application/json`` (else 415), at most ``max_body_bytes`` (413), within
    ``body_seconds`` (408), valid (400); errors as :class:`_HttpError`."""
    import anyio

    kind = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if kind != "application/json":
        raise _HttpError(415, "send the body as application/json")
    length = request.headers.get("content-length")
    if length is not None and (not length.isdigit() or int(length) > max_body_bytes):
        raise _HttpError(413, f"request body over {max_body_bytes} bytes")
    parts: list[bytes] = []
    seen = 0
    try:
        with anyio.fail_after(body_seconds):
            async for chunk in request.stream():
                seen += len(chunk)
                if seen > max_body_bytes:
                    raise _HttpError(413, f"request body over {max_body_bytes} bytes")
                parts.append(chunk)
    except TimeoutError:
        raise _HttpError(408, f"request body not received within {body_seconds:g} s") from None
    try:
        return json.loads(b"".join(parts).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise _HttpError(400, f"the body is not valid JSON: {e}") from None
    except RecursionError:
        raise _HttpError(400, "the body is not valid JSON: nested too deeply") from None
