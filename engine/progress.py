"""What contextsieve says while it does slow first-use work, so nobody waits on it in silence.

Library code calls :func:`note` before work a user would otherwise wait on without a word: building
a model graph (once per machine and version), compiling the scoring kernels (once per machine),
loading the model, embedding an agent's items. The messages go to the standard :mod:`logging` logger
:data:`LOGGER_NAME` at ``INFO``: silent unless the application shows them. The CLI shows them on
stderr as ``contextsieve: <message>`` lines (:func:`to_stderr`; so do ``serve`` and ``gateway``, whose
stderr is the host's log), and an application can attach its own handler to the logger.
"""

from __future__ import annotations

import logging
import sys
from typing import TextIO

__all__ = ["LOGGER_NAME", "note", "to_stderr"]

#: The logger the notes go to (level ``INFO``).
LOGGER_NAME = "contextsieve.progress"

_HANDLER_FLAG = "_contextsieve_progress"


def note(message: str) -> None:
    """Say what slow work starts now (one line, no trailing period needed)."""
    logging.getLogger(LOGGER_NAME).info(message)


def to_stderr(stream: TextIO | None = None) -> None:
    """Show the notes as ``contextsieve: <message>`` lines on ``stream`` (default: ``sys.stderr`` at the
    time of each note). Idempotent: a second call adds no second handler. The notes then stop going up
    to the root logger, so a root handler does not print them twice."""
    log = logging.getLogger(LOGGER_NAME)
    if any(getattr(h, _HANDLER_FLAG, False) for h in log.handlers):
        return
    handler = _StderrHandler(stream)
    handler.setFormatter(logging.Formatter("contextsieve: %(message)s"))
    setattr(handler, _HANDLER_FLAG, True)
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg,unused-ignore]
    """A stream handler that looks ``sys.stderr`` up at each record (pytest and hosts swap it)."""

    def __init__(self, stream: TextIO | None) -> None:
        super().__init__(stream or sys.stderr)
        self._fixed = stream

    def emit(self, record: logging.LogRecord) -> None:
        if self._fixed is None:
            self.stream = sys.stderr
        super().emit(record)
