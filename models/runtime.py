"""The one place contextsieve imports ONNX Runtime, with its telemetry off unless the user turned it on.

ONNX Runtime 1.29 and later, on Linux and macOS, record telemetry from the moment the package is
imported: a device identifier and a queue of events (process, OS, sessions, errors) under
``~/.cache/Microsoft/DeveloperTools/.onnxruntime``, uploaded to Microsoft. contextsieve runs a model
locally for users who keep their agents' data on their own machines, so it imports ONNX Runtime with
``ORT_DISABLE_TELEMETRY=1`` set in the environment first (ONNX Runtime's full opt-out: nothing is
created, written or sent; it is read once, when the runtime starts). A value the user set is kept:
``ORT_DISABLE_TELEMETRY=0`` turns the telemetry back on (an empty value is no choice: it is set to
``1``). A program that imported ``onnxruntime``
itself before contextsieve did has started the runtime with its own setting.
"""

from __future__ import annotations

import os
from types import ModuleType

__all__ = ["TELEMETRY_ENV", "onnxruntime"]

#: ONNX Runtime's telemetry opt-out (``1``: off), read when the runtime starts.
TELEMETRY_ENV = "ORT_DISABLE_TELEMETRY"


def onnxruntime() -> ModuleType:
    """The ``onnxruntime`` module, imported with :data:`TELEMETRY_ENV` set to ``1`` unless the user
    set it (see the module docstring; a blank value is not a setting)."""
    if not os.environ.get(TELEMETRY_ENV, "").strip():
        os.environ[TELEMETRY_ENV] = "1"
    import onnxruntime as ort

    return ort
