"""Validate a plugin's options with its ``Options`` model, with errors that say where."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ValidationError

from episodata_core.errors import SchemaError

__all__ = ["located_errors", "validate_options"]


def located_errors(err: ValidationError, prefix: str) -> str:
    """Each problem of ``err`` as ``prefix.path.to.field: message``, joined by ``; ``."""
    problems = []
    for error in err.errors():
        path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error["loc"])
        problems.append(f"{prefix}{path}: {error['msg']}")
    return "; ".join(problems)


def validate_options(plugin: Any, options: dict[str, Any], where: str) -> BaseModel:
    """``plugin.Options(**options)``, raising :class:`SchemaError` located at ``where``."""
    try:
        validated: BaseModel = plugin.Options(**options)
    except ValidationError as err:
        raise SchemaError(located_errors(err, where)) from err
    return validated
