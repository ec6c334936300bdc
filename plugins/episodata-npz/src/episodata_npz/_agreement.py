"""Checks that ``manifest.json`` and ``episodes.jsonl`` agree with the archives they describe.

The manifest's schema sizes every read buffer (``[batch, rows, *shape]`` of each field's
dtype) and the log's lengths size every episode read, but either file can be edited by
hand: ``"shape": [1000000000000]`` would ask for terabytes. :func:`check_archive`
compares the ``.npy`` headers of one archive (a few hundred bytes each; no array data
is read) with both: the set of fields, each field's dtype and per-row shape, and its
number of rows. It raises :class:`~episodata_core.errors.SchemaError` naming the field,
the value on each side and the fix.

Opening a dataset checks one archive before anything else is read (the manifest is the
same for every archive, so one is enough to catch an edited schema); a read whose
archive disagrees with its log line is diagnosed the same way; ``verify`` checks all.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from episodata_core.errors import DatasetStateError, SchemaError
from episodata_core.location import MANIFEST_NAME
from episodata_npz._layout import LOG_NAME

if TYPE_CHECKING:
    from collections.abc import Mapping

    from episodata_core.schema import FieldSpec
    from episodata_npz._archive import EpisodeArchive

__all__ = ["check_archive", "check_logged_length"]

_OWN = "its 'episode/length' member"


def check_archive(
    archive: EpisodeArchive,
    where: str,
    specs: Mapping[str, FieldSpec],
    *,
    length: int,
    recorded: str,
) -> None:
    """Raise ``SchemaError`` where the archive's members disagree with the schema or ``length``.

    Parameters
    ----------
    archive
        The open archive; only its member headers are read.
    where
        The archive, relative to the dataset folder, for messages.
    specs
        The manifest's fields by qualified key.
    length
        The episode's transitions as recorded elsewhere: every field member must hold
        ``length + 1`` rows.
    recorded
        Where ``length`` comes from, for messages (``"episodes.jsonl"``).
    """
    foreign = archive.foreign_members
    if foreign:
        raise SchemaError(
            f"{where} holds members {foreign} that are not .npy arrays; it was not written "
            "by episodata. Remove it, or run `episodata verify` on the dataset"
        )
    headers = archive.headers()
    unknown = sorted(headers.keys() - specs.keys())
    if unknown:
        found = ", ".join(
            f"{key!r} ({headers[key][0]}, {list(headers[key][1][1:])})" for key in unknown
        )
        raise SchemaError(
            f"{where} stores the fields {found}, which the schema in {MANIFEST_NAME} does not "
            f"list (it lists {sorted(specs)}); {MANIFEST_NAME} was edited or belongs to "
            "another dataset. Restore it, or add those fields back with the dtype and "
            "per-row shape given here"
        )
    missing = sorted(key for key, spec in specs.items() if not spec.optional and key not in headers)
    if missing:
        raise SchemaError(
            f"the schema in {MANIFEST_NAME} lists the required fields {missing}, but {where} "
            f"does not store them; {MANIFEST_NAME} was edited or belongs to another dataset. "
            "Restore it, or remove those fields from its schema"
        )
    for key, (dtype, shape) in headers.items():
        spec = specs[key]
        if dtype != spec.np_dtype:
            raise SchemaError(
                f"field {key!r}: {MANIFEST_NAME} says dtype {spec.np_dtype}, but {where} holds "
                f"{dtype}. Set the field's dtype in {MANIFEST_NAME} back to {str(dtype)!r}"
            )
        if shape[1:] != tuple(spec.shape) or not shape:
            raise SchemaError(
                f"field {key!r}: {MANIFEST_NAME} says shape {list(spec.shape)} per row, but "
                f"{where} holds {list(shape[1:])} per row (array shape {list(shape)}). Set "
                f"the field's shape in {MANIFEST_NAME} back to {list(shape[1:])}"
            )
        if shape[0] != length + 1:
            raise SchemaError(
                f"{where}: {recorded} records length {length} ({length + 1} rows), but field "
                f"{key!r} holds {shape[0]} rows (length {shape[0] - 1}); the record was "
                f'edited or damaged. Set "length" back to {shape[0] - 1} in {recorded}'
            )


def check_logged_length(
    archive: EpisodeArchive, where: str, specs: Mapping[str, FieldSpec], length: int
) -> None:
    """Raise ``SchemaError`` when a sound archive holds another length than its log line.

    An archive that disagrees with itself or with the schema is left to the caller,
    which reports it as damaged: the schema was checked against other archives at open.
    """
    try:
        check_archive(archive, where, specs, length=archive.meta().length, recorded=_OWN)
    except (SchemaError, DatasetStateError):
        return
    check_archive(archive, where, specs, length=length, recorded=LOG_NAME)
