"""The manifest's schema against what the dataset stores: checked at open and by ``verify``.

The core reads the schema from ``manifest.json``; this backend reads and writes by the
schema in the root ``zarr.json`` (whose checksum ``commit.json`` holds) and by each
array's ``zarr.json``. A hand-edited or swapped manifest would make the two disagree
without a word, so both are compared before anything is read: the field set, each
field's dtype and per-row shape against its array's metadata, and its other attributes
(``layout``, ``low``, ``high``, ``optional``) against the stored schema. Free text
(``description``, ``metadata``) is left out: it changes nothing that is read.

The backend reads ``manifest.json`` itself, as the npz backend does, so that its
``open(location, options)`` contract stays as it is. A folder without a manifest (a
backend used directly, without the core) has nothing to compare.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import numpy as np

from episodata_core.errors import EpisodataError, SchemaError
from episodata_core.location import MANIFEST_NAME, inside
from episodata_zarr._layout import _array_path

if TYPE_CHECKING:
    from pathlib import Path

    from episodata_core.schema import DatasetSchema, FieldSpec

__all__ = ["check_manifest", "manifest_problems"]

_COMPARED = ("layout", "low", "high", "optional")
_FIX = (
    "manifest.json was edited or belongs to another dataset: restore it from a copy, or "
    "put back the schema stored in zarr.json (attributes.episodata.schema)"
)


def _manifest_schema(folder: Path) -> DatasetSchema | None:
    if not inside(folder, MANIFEST_NAME).exists():
        return None
    # imported here: episodata_core.dataset pulls in the registry, hooks and writers
    from episodata_core.dataset import read_manifest

    return read_manifest(str(folder)).schema


def _array_dtype_shape(document: Any) -> tuple[np.dtype[Any], tuple[int, ...]] | None:
    """A field's dtype and per-row shape as its array's zarr.json says; None if unreadable."""
    try:
        stored = np.dtype(document["data_type"])
        shape = tuple(int(n) for n in document["shape"][1:])
        declared = document.get("attributes", {}).get("episodata", {}).get("dtype")
        dtype = stored if declared is None else np.dtype(declared)
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    if dtype != stored:
        shape = shape[:-1]  # stored as raw bytes: a trailing axis of dtype.itemsize
    return dtype, shape


def _read_document(folder: Path, path: str) -> Any:
    try:
        return json.loads(inside(folder, f"{path}/zarr.json").read_bytes())
    except (OSError, ValueError):
        return None  # a missing or damaged array: the open or verify reports it itself


def _compare_field(folder: Path, spec: FieldSpec, stored: FieldSpec) -> list[str]:
    key, path = spec.qualified_key, _array_path("data", spec.qualified_key)
    problems = []
    found = _array_dtype_shape(_read_document(folder, path))
    if found is not None:
        dtype, shape = found
        if spec.np_dtype != dtype:
            problems.append(
                f"field {key!r}: manifest.json says dtype {spec.dtype}, but "
                f"{path}/zarr.json stores {dtype}"
            )
        if tuple(spec.shape) != shape:
            problems.append(
                f"field {key!r}: manifest.json says per-row shape {list(spec.shape)}, but "
                f"{path}/zarr.json stores {list(shape)}"
            )
    for name in _COMPARED:
        mine, theirs = getattr(spec, name), getattr(stored, name)
        if mine != theirs:
            problems.append(
                f"field {key!r}: manifest.json says {name}={mine!r}, but the schema stored "
                f"in zarr.json says {theirs!r}"
            )
    return problems


def _problems(folder: Path, manifest: DatasetSchema, stored: DatasetSchema) -> list[str]:
    mine = {spec.qualified_key: spec for spec in manifest}
    theirs = {spec.qualified_key: spec for spec in stored}
    problems = [
        f"field {key!r}: manifest.json declares it, but the dataset stores no such field "
        f"(it stores {sorted(theirs)})"
        for key in mine
        if key not in theirs
    ]
    problems += [
        f"field {key!r}: the dataset stores it ({_array_path('data', key)}), but "
        "manifest.json does not declare it"
        for key in theirs
        if key not in mine
    ]
    for key, spec in mine.items():
        if key in theirs:
            problems += _compare_field(folder, spec, theirs[key])
    if not problems and list(mine) != list(theirs):
        problems.append(
            f"manifest.json lists the fields in the order {list(mine)}, but the schema "
            f"stored in zarr.json in the order {list(theirs)}"
        )
    return problems


def check_manifest(folder: Path, stored: DatasetSchema) -> None:
    """Refuse a dataset whose ``manifest.json`` schema disagrees with what it stores.

    Raises
    ------
    SchemaError
        Naming each field that disagrees, the manifest's value and the stored one.
    """
    manifest = _manifest_schema(folder)
    if manifest is None:
        return
    problems = _problems(folder, manifest, stored)
    if problems:
        shown = "; ".join(problems[:5])
        more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
        raise SchemaError(
            f"{folder / MANIFEST_NAME}: its schema disagrees with the stored arrays: "
            f"{shown}{more}. {_FIX}"
        )


def manifest_problems(folder: Path, stored: DatasetSchema) -> list[str]:
    """``verify``'s lines for :func:`check_manifest`: every disagreement, and the fix."""
    try:
        manifest = _manifest_schema(folder)
    except EpisodataError as err:
        return [f"{folder / MANIFEST_NAME}: {err}"]
    if manifest is None:
        return []
    return [f"{MANIFEST_NAME}: {p}; {_FIX}" for p in _problems(folder, manifest, stored)]
