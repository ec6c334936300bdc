"""The ``metadata/*`` tree of a D4RL file as flat JSON values (formats.md §1.3, §1.5).

``metadata/*`` is never rejected: whatever cannot be turned into JSON becomes a
description of itself.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["metadata_tree"]

ARRAY_LIMIT = 64
"""Arrays with more elements than this follow the ``metadata_arrays`` option."""


def metadata_tree(group: Any, mode: str) -> dict[str, Any]:
    """``{"a/b": value}`` for every dataset below the h5py ``group``, in HDF5 order."""
    return {name: value for name, value in _values(group, "", mode) if value is not _DROPPED}


_DROPPED = object()


def _values(group: Any, prefix: str, mode: str) -> Iterator[tuple[str, Any]]:
    import h5py

    for name, item in group.items():
        path = f"{prefix}{name}"
        if isinstance(item, h5py.Group):
            yield from _values(item, path + "/", mode)
        elif isinstance(item, h5py.Dataset):
            yield path, _dataset_value(item, mode)


def _dataset_value(dataset: Any, mode: str) -> Any:
    import h5py

    if dataset.shape is None:  # an HDF5 null dataspace (h5py.Empty)
        return None
    size = int(np.prod(dataset.shape, dtype=np.int64))
    if dataset.ndim and size > ARRAY_LIMIT and mode != "keep":
        if mode == "drop":
            return _DROPPED
        return {"shape": list(dataset.shape), "dtype": str(dataset.dtype), "omitted": True}
    try:
        value = dataset[()]
    except (OSError, TypeError, ValueError) as err:  # unreadable types stay described
        return {"shape": list(dataset.shape), "dtype": str(dataset.dtype), "error": str(err)}
    if h5py.check_string_dtype(dataset.dtype) is not None and isinstance(value, np.ndarray):
        value = value.astype(object)
    return _json(value)


def _json(value: Any) -> Any:
    if isinstance(value, bytes | np.bytes_):
        return bytes(value).decode("utf-8", errors="replace")
    if isinstance(value, np.ndarray):
        if value.dtype.kind in "biufSUO":
            return [_json(item) for item in value.tolist()] if value.ndim else _json(value[()])
        return str(value.tolist())
    if isinstance(value, np.generic):
        return _json(value.item())
    if isinstance(value, float) and not math.isfinite(value):
        # JSON has no NaN or infinity; keep the value readable instead of dropping it
        return repr(value)
    if isinstance(value, list):
        return [_json(item) for item in value]
    if isinstance(value, bool | int | float | str) or value is None:
        return value
    return str(value)
