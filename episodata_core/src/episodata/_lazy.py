"""Names of the facade that live in modules ``import episodata`` must not import.

The backend classes ship in plugin distributions (which import the core, so the core
cannot import them), and the 0.2 writer names live in facade modules of their own;
each is imported on first use and cached in the module that asked.
"""

from __future__ import annotations

import importlib
from typing import Any

from episodata_core.errors import MissingDependencyError

__all__ = ["LazyName", "resolve"]

LazyName = tuple[str, str, str | None]
"""Where a name lives: (module, attribute, the distribution that ships the module)."""


def resolve(names: dict[str, LazyName], name: str, namespace: dict[str, Any]) -> Any:
    """Import ``name`` from where ``names`` says, store it in ``namespace`` and return it."""
    try:
        module_name, attribute, distribution = names[name]
    except KeyError:
        raise AttributeError(
            f"module {namespace['__name__']!r} has no attribute {name!r}"
        ) from None
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        if distribution is None or err.name != module_name:
            raise
        raise MissingDependencyError(
            f"{namespace['__name__']}.{name} ships in {distribution}, which is not "
            f'installed: pip install "{distribution}" (or pip install episodata)'
        ) from err
    value = getattr(module, attribute)
    namespace[name] = value  # later lookups skip __getattr__
    return value
