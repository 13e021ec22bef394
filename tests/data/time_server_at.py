"""The real ``mcp_server_time`` MCP server with its clock pinned at one instant, for tests whose
selection reads the server's result (the current date and weekday are part of the next query).

    python time_server_at.py INSTANT [SERVER ARGS...]

``INSTANT`` is an ISO 8601 time with an offset (``2027-03-17T14:00:00+00:00``). Every
``datetime.now(tz)`` of the server returns that instant converted to ``tz`` (``now()`` without a
zone: the instant in the local zone, naive); nothing else of the server changes. The remaining
arguments go to the server's own entry point, so ``time_server_at.py INSTANT --local-timezone UTC``
runs what ``python -m mcp_server_time --local-timezone UTC`` runs.
"""

from __future__ import annotations

import sys
from datetime import datetime, tzinfo

import mcp_server_time
import mcp_server_time.server


def pinned_datetime(instant: datetime) -> type[datetime]:
    """A ``datetime`` subclass whose clock always reads ``instant``."""
    if instant.tzinfo is None or instant.utcoffset() is None:
        raise SystemExit(f"time_server_at.py: the instant needs an offset, got {instant.isoformat()!r}")

    class PinnedDatetime(datetime):
        @classmethod
        def now(cls, tz: tzinfo | None = None) -> PinnedDatetime:  # type: ignore[override]
            return cls.fromtimestamp(instant.timestamp(), tz)

    return PinnedDatetime


def main() -> None:
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    mcp_server_time.server.datetime = pinned_datetime(datetime.fromisoformat(sys.argv[1]))  # type: ignore[misc]
    sys.argv = ["mcp_server_time", *sys.argv[2:]]  # the server parses the rest as its own arguments
    mcp_server_time.main()


if __name__ == "__main__":
    main()
