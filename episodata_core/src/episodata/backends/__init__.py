"""``episodata.backends``: the backend contract, the registry and the built-in backends.

The backend classes ship in their plugins and are imported on first use (also as
``episodata.backends.memory``, ``.npz`` and ``.zarr``).
"""

from __future__ import annotations

from typing import Any

from episodata._lazy import resolve as _resolve
from episodata._names import LAZY as _NAMES
from episodata_core.protocols import StorageBackend
from episodata_core.registry import get_backend, register_backend
from episodata_core.selection import Selection

_BACKENDS = {name: _NAMES[name] for name in ("MemoryBackend", "NpzDirectoryBackend", "ZarrBackend")}

__all__ = [
    "MemoryBackend",
    "NpzDirectoryBackend",
    "Selection",
    "StorageBackend",
    "ZarrBackend",
    "get_backend",
    "register_backend",
]


def __getattr__(name: str) -> Any:
    return _resolve(_BACKENDS, name, globals())


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
