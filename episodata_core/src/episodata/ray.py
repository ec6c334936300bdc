"""Ray Data access to episodata datasets, reached lazily from the episodata-ray plugin.

``from episodata.ray import read_windows`` imports the plugin (never Ray itself) when
the name is first used, so ``import episodata`` stays light; Ray is imported when a
function runs. The same functions are ``episodata_ray.read_episodes`` and friends.
"""

from __future__ import annotations

import importlib
from typing import Any

from episodata_core.errors import MissingDependencyError

__all__ = ["read_episodes", "read_windows", "write_episodes"]  # noqa: F822 (resolved lazily)


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module 'episodata.ray' has no attribute {name!r}")
    try:
        module = importlib.import_module("episodata_ray")
    except ModuleNotFoundError as err:
        if err.name != "episodata_ray":
            raise
        raise MissingDependencyError(
            f"episodata.ray.{name} ships in episodata-ray, which is not installed: "
            'pip install "episodata[ray]"'
        ) from err
    value = getattr(module, name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
