"""Helpers that live in optional plugins, reached lazily.

``from episodata.utils import schema_from_gym_spaces`` imports the Gymnasium adapter only
when the name is first used, so ``import episodata`` stays light.
"""

from __future__ import annotations

import importlib
from typing import Any

from episodata_core.errors import MissingDependencyError

__all__ = [  # noqa: F822 (resolved lazily)
    "batch_to_tensordict",
    "record_episodes",
    "schema_from_gym_spaces",
    "tensordict_to_episodes",
]

# name -> (module, distribution, extra); the module is imported on first access
_LAZY: dict[str, tuple[str, str, str]] = {
    "schema_from_gym_spaces": ("episodata_gym", "episodata-gym", "gym"),
    "record_episodes": ("episodata_gym", "episodata-gym", "gym"),
    "batch_to_tensordict": ("episodata_torch", "episodata-torch", "torch"),
    "tensordict_to_episodes": ("episodata_torch", "episodata-torch", "torch"),
}


def __getattr__(name: str) -> Any:
    try:
        module_name, distribution, extra = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'episodata.utils' has no attribute {name!r}") from None
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        if err.name != module_name:
            raise
        raise MissingDependencyError(
            f"episodata.utils.{name} ships in {distribution}, which is not installed: "
            f'pip install "episodata[{extra}]"'
        ) from err
    value = getattr(module, name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
