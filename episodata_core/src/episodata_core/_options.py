"""Validate a plugin's options with its ``Options`` model, with errors that say where."""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from episodata_core.errors import SchemaError

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["located_errors", "unknown_key", "validate_options"]


def unknown_key(key: str, valid: Iterable[str], what: str = "key") -> str:
    """``unknown key 'importr'; did you mean 'importer'? (valid keys: importer, path)``."""
    names = sorted(valid)
    close = difflib.get_close_matches(key, names, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    listed = ", ".join(names) if names else "none"
    return f"unknown {what} {key!r}{hint} (valid {what}s: {listed})"


def _model_at(model: type[BaseModel] | None, loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The model that holds the field at ``loc``, following nested model fields."""
    for part in loc:
        if model is None or not isinstance(part, str) or part not in model.model_fields:
            return None
        annotation = model.model_fields[part].annotation
        model = (
            annotation
            if isinstance(annotation, type) and issubclass(annotation, BaseModel)
            else None
        )
    return model


def located_errors(
    err: ValidationError, prefix: str, model: type[BaseModel] | None = None, what: str = "key"
) -> str:
    """Each problem of ``err`` as ``prefix.path.to.field: message``, joined by ``; ``.

    With ``model`` (the model that was validated), an unknown key names the valid keys
    of its table and the closest one, instead of pydantic's "Extra inputs are not
    permitted".
    """
    problems = []
    for error in err.errors():
        loc = tuple(error["loc"])
        path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc)
        message = error["msg"]
        holder = _model_at(model, loc[:-1]) if model is not None else None
        if error["type"] == "extra_forbidden" and holder is not None and loc:
            message = unknown_key(str(loc[-1]), holder.model_fields, what)
        problems.append(f"{prefix}{path}: {message}")
    return "; ".join(problems)


def validate_options(plugin: Any, options: dict[str, Any], where: str) -> BaseModel:
    """``plugin.Options(**options)``, raising :class:`SchemaError` located at ``where``."""
    try:
        validated: BaseModel = plugin.Options(**options)
    except ValidationError as err:
        raise SchemaError(located_errors(err, where, plugin.Options, "option")) from err
    return validated
