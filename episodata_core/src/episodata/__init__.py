"""episodata: episodic data for world models, control and reinforcement learning.

This package re-exports the public API of ``episodata_core``; names outside
``__all__`` may change without notice. The core's public names have one owner,
``episodata_core.__all__``, which the star import takes exactly (type checkers treat a
star import as an explicit re-export). The few names that live elsewhere (the backend
classes in their plugins, the 0.2 writer names and ``Fields``) are listed in
:data:`episodata._names.LAZY` and imported on first use, so ``import episodata`` stays
light.
"""

from __future__ import annotations

from typing import Any

from episodata._lazy import resolve as _resolve
from episodata._names import LAZY as _LAZY
from episodata_core import *  # the facade is the core's public names
from episodata_core import __all__ as _core_names

__all__ = [*_core_names, *_LAZY]  # noqa: PLE0604 (both lists are of str)


def __getattr__(name: str) -> Any:
    return _resolve(_LAZY, name, globals())


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
