"""The ``data.h5`` file format: layout, check values, creating and reading its index.

::

    data.h5                  every finalized episode, in one HDF5 file
      /rows/<role>/<key>     one chunked dataset per field: [total rows, *shape]
      /episodes              one commit record per finalized episode (compound dtype)
      /commit                uint64[256]: committed records, committed rows, check value

Record ``i`` of the first ``commit[0]`` describes episode ``episode`` stored in rows
``row_start : row_start + num_rows`` of every field, with its flags (bit 0 terminated,
bit 1 truncated), which optional fields it stores, a BLAKE2b-128 digest of each
field's rows and a check value over the record itself. Records are in commit order and
their rows follow each other, so ``commit[1]`` is the number of committed rows.
Everything past the committed counts belongs to no episode.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import struct
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import h5py
import numpy as np
from episodata_core.errors import DatasetStateError, EpisodataError, IntegrityError, SchemaError

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping
    from pathlib import Path

    import numpy.typing as npt
    from episodata_core.schema import DatasetSchema, FieldSpec

    from episodata_plugin_example._index import EpisodeIndex

__all__ = [
    "DATA_NAME",
    "HDF5_ERRORS",
    "READ_ATTEMPTS",
    "READ_PAUSE_S",
    "Layout",
    "check_layout",
    "chunk_rows_for",
    "commit_array",
    "create_file",
    "damaged",
    "digest",
    "field_dataset",
    "from_stored",
    "fsync_file",
    "lookup3",
    "put_records",
    "read_commit",
    "read_records",
    "reading_hdf5",
    "record_check",
    "structure_problem",
    "to_stored",
    "writer_flags",
]

DATA_NAME = "data.h5"
FORMAT = "episodata-plugin-example/hdf5"
FORMAT_VERSION = 1
# HDF5 sub-allocates raw blocks smaller than its 2 KiB "small data" block and leaves the
# unused rest of that block as a zero gap that no checksum covers; chunks at least that
# large (and no metadata aggregation) give files whose every byte verify() can check
MIN_CHUNK_BYTES = 2048
COMMIT_SLOTS = 256
DIGEST_SIZE = 16
_HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
# a read that may race the writer (a superblock being rewritten, a spill being replaced)
# is tried again this many times before it counts as damage
READ_ATTEMPTS = 5
READ_PAUSE_S = 0.02
# what h5py raises for damaged structures, depending on where the damage is
HDF5_ERRORS = (OSError, KeyError, ValueError, RuntimeError, TypeError)


def digest(block: npt.NDArray[Any]) -> npt.NDArray[np.uint8]:
    """BLAKE2b-128 of an array's bytes, as ``[16]`` uint8."""
    raw = np.ascontiguousarray(block).reshape(-1).view(np.uint8).data
    return np.frombuffer(hashlib.blake2b(raw, digest_size=DIGEST_SIZE).digest(), np.uint8)


def _commit_check(count: int, total: int) -> int:
    packed = struct.pack("<QQ", count, total) + FORMAT.encode()
    return int.from_bytes(hashlib.blake2b(packed, digest_size=8).digest(), "little")


def commit_array(count: int, total: int) -> npt.NDArray[np.uint64]:
    """The ``/commit`` values for ``count`` records and ``total`` rows."""
    values = np.zeros(COMMIT_SLOTS, dtype=np.uint64)
    values[:3] = (count, total, _commit_check(count, total))
    return values


def record_check(record: npt.NDArray[Any]) -> npt.NDArray[np.uint8]:
    """The check value of one record: a digest of its bytes with ``check`` zeroed."""
    blank = record.copy()
    blank["check"] = 0
    return digest(blank)


def structure_problem(records: npt.NDArray[Any], total: int) -> str | None:
    """Why ``records`` cannot describe ``total`` consecutive rows of distinct episodes."""
    ends = np.cumsum(records["num_rows"])
    starts = ends - records["num_rows"]
    if (
        (records["num_rows"] < 1).any()
        or (records["row_start"] != starts).any()
        or (int(ends[-1]) if len(records) else 0) != total
        or (records["episode"] < 0).any()
        or len(np.unique(records["episode"])) != len(records)
        or (records["flags"] > 3).any()
        or ("present" in (records.dtype.names or ()) and (records["present"] > 1).any())
    ):
        return (
            f"{DATA_NAME}: the commit records do not describe {total} consecutive rows of "
            "distinct episodes; the file is damaged"
        )
    return None


def writer_flags(path: Path) -> int:
    """HDF5's superblock status flags: non-zero while a writer has the file open.

    A killed writer leaves them set. They are byte 11 of a version 3 superblock (HDF5
    file format specification, "Superblock"). The superblock's checksum is checked
    first: a damaged byte must never send a reader down the SWMR path, where HDF5
    retries checksum failures for a very long time. A live writer may be rewriting the
    superblock, so a mismatch is read again a few times before it counts as damage.
    """
    for attempt in range(READ_ATTEMPTS):
        try:
            with open(path, "rb") as handle:
                head = handle.read(64)
        except FileNotFoundError:
            raise DatasetStateError(
                f"{DATA_NAME} is missing from {str(path.parent)!r}: the folder is not an "
                "hdf5 dataset or the file was deleted"
            ) from None
        if len(head) < 12 or head[:8] != _HDF5_SIGNATURE or head[8] not in (2, 3):
            raise IntegrityError(
                f"{DATA_NAME}: not an HDF5 file with a version 2 or 3 superblock; it is damaged"
            )
        size = 12 + 4 * head[9]  # signature to root object header address
        stored = int.from_bytes(head[size : size + 4], "little")
        if len(head) >= size + 4 and lookup3(head[:size]) == stored:
            return head[11] if head[8] >= 3 else 0
        if attempt + 1 < READ_ATTEMPTS:
            time.sleep(READ_PAUSE_S)
    raise IntegrityError(f"{DATA_NAME}: the HDF5 superblock does not match its checksum")


def lookup3(data: bytes, initval: int = 0) -> int:
    """Bob Jenkins' lookup3 ``hashlittle``, HDF5's checksum of metadata blocks."""
    mask = 0xFFFFFFFF

    def rot(x: int, k: int) -> int:
        return ((x << k) | (x >> (32 - k))) & mask

    length = len(data)
    a = b = c = (0xDEADBEEF + length + initval) & mask
    offset = 0
    while length > 12:
        a = (a + int.from_bytes(data[offset : offset + 4], "little")) & mask
        b = (b + int.from_bytes(data[offset + 4 : offset + 8], "little")) & mask
        c = (c + int.from_bytes(data[offset + 8 : offset + 12], "little")) & mask
        a = ((a - c) & mask) ^ rot(c, 4)
        c = (c + b) & mask
        b = ((b - a) & mask) ^ rot(a, 6)
        a = (a + c) & mask
        c = ((c - b) & mask) ^ rot(b, 8)
        b = (b + a) & mask
        a = ((a - c) & mask) ^ rot(c, 16)
        c = (c + b) & mask
        b = ((b - a) & mask) ^ rot(a, 19)
        a = (a + c) & mask
        c = ((c - b) & mask) ^ rot(b, 4)
        b = (b + a) & mask
        length -= 12
        offset += 12
    if length == 0:
        return c
    tail = data[offset:] + bytes(12 - length)  # the missing bytes add nothing
    a = (a + int.from_bytes(tail[0:4], "little")) & mask
    b = (b + int.from_bytes(tail[4:8], "little")) & mask
    c = (c + int.from_bytes(tail[8:12], "little")) & mask
    c = ((c ^ b) - rot(b, 14)) & mask
    a = ((a ^ c) - rot(c, 11)) & mask
    b = ((b ^ a) - rot(a, 25)) & mask
    c = ((c ^ b) - rot(b, 16)) & mask
    a = ((a ^ c) - rot(c, 4)) & mask
    b = ((b ^ a) - rot(a, 14)) & mask
    return ((c ^ b) - rot(b, 24)) & mask


@dataclass(frozen=True)
class Layout:
    """Field keys, optional fields and the record dtype that a schema gives ``data.h5``."""

    keys: tuple[str, ...]
    optional: tuple[str, ...]
    record: np.dtype[Any]

    @classmethod
    def of(cls, schema: DatasetSchema) -> Layout:
        """The layout of ``schema``; refuses fields that HDF5 cannot store as designed."""
        keys = schema.qualified_keys
        for spec in schema:
            if any(part in (".", "..") for part in spec.key.split("/")):
                raise SchemaError(
                    f"field {spec.qualified_key!r}: the hdf5 backend names datasets after "
                    "keys, and '.' or '..' cannot be part of an HDF5 path; rename the field"
                )
            if field_row_bytes(spec) == 0:
                raise SchemaError(
                    f"field {spec.qualified_key!r} has shape {spec.shape} with no elements; "
                    "the hdf5 backend cannot chunk it. Drop the field or give it a size"
                )
        if not keys:
            raise SchemaError("the hdf5 backend needs a schema with at least one field")
        optional = tuple(spec.qualified_key for spec in schema if spec.optional)
        fields: list[Any] = [
            ("episode", "<i8"),
            ("row_start", "<i8"),
            ("num_rows", "<i8"),
            ("flags", "u1"),
        ]
        if optional:
            fields.append(("present", "u1", (len(optional),)))
        fields += [("digest", "u1", (len(keys), DIGEST_SIZE)), ("check", "u1", (DIGEST_SIZE,))]
        return cls(keys, optional, np.dtype(fields))


def stored_form(spec: FieldSpec) -> tuple[tuple[int, ...], np.dtype[Any]]:
    """Per-row shape and dtype of a field's HDF5 dataset.

    HDF5 has no type for NumPy's UCS-4 strings (``U``): such fields keep their exact
    bytes, as ``uint8`` with one more axis of ``itemsize`` bytes.
    """
    dtype = spec.np_dtype
    if dtype.kind in "biufcS":
        return tuple(spec.shape), dtype
    return (*spec.shape, dtype.itemsize), np.dtype(np.uint8)


def to_stored(spec: FieldSpec, block: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """``[n, *shape]`` rows in the form their HDF5 dataset holds (see :func:`stored_form`)."""
    if spec.np_dtype.kind in "biufcS":
        return block
    raw = np.ascontiguousarray(block).view(np.uint8)
    return raw.reshape(len(block), *spec.shape, spec.np_dtype.itemsize)


def from_stored(spec: FieldSpec, stored: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """The inverse of :func:`to_stored`."""
    if spec.np_dtype.kind in "biufcS":
        return stored
    values = np.ascontiguousarray(stored).view(spec.np_dtype)
    return values.reshape(len(stored), *spec.shape)


def field_row_bytes(spec: FieldSpec) -> int:
    """Bytes of one row of a field."""
    return int(np.prod(spec.shape, dtype=np.int64)) * spec.np_dtype.itemsize


def chunk_rows_for(row_bytes: int, chunk_bytes: int) -> int:
    """Rows per chunk: about ``chunk_bytes``, never under :data:`MIN_CHUNK_BYTES`."""
    return max(math.ceil(MIN_CHUNK_BYTES / row_bytes), chunk_bytes // row_bytes, 1)


def _fields_json(schema: DatasetSchema) -> str:
    return json.dumps([[spec.qualified_key, spec.dtype, list(spec.shape)] for spec in schema])


def create_file(
    path: Path, schema: DatasetSchema, layout: Layout, chunk_rows: Mapping[str, int]
) -> None:
    """Write an empty, fsynced ``data.h5`` at ``path``.

    ``chunk_rows`` holds the rows per chunk of every field and of ``"<episodes>"``.
    """
    with h5py.File(path, "w", libver="latest", meta_block_size=0, locking=False) as file:
        # fixed-length strings live in the object header, which HDF5 checksums;
        # variable-length ones would go to a global heap, which has no checksum
        file.attrs["format"] = np.bytes_(FORMAT)
        file.attrs["format_version"] = np.int64(FORMAT_VERSION)
        file.attrs["fields"] = np.bytes_(_fields_json(schema))
        rows = file.create_group("rows", track_order=False)
        for spec in schema:
            key = spec.qualified_key
            shape, dtype = stored_form(spec)
            rows.create_dataset(
                key,
                shape=(0, *shape),
                maxshape=(None, *shape),
                chunks=(chunk_rows[key], *shape),
                dtype=dtype,
                fillvalue=np.zeros((), dtype),
                track_times=False,
            )
        file.create_dataset(
            "episodes",
            shape=(0,),
            maxshape=(None,),
            chunks=(chunk_rows["<episodes>"],),
            dtype=layout.record,
            track_times=False,
        )
        file.create_dataset("commit", data=commit_array(0, 0), track_times=False)
    fsync_file(path)


def fsync_file(path: Path) -> None:
    """Make a closed file's bytes durable before it is renamed into place."""
    with open(path, "rb") as handle:
        os.fsync(handle.fileno())


def damaged(err: BaseException) -> IntegrityError:
    """The error for an h5py failure that a damaged file explains."""
    return IntegrityError(
        f"{DATA_NAME}: HDF5 cannot read it ({err}). Unless another program holds the file, "
        "it is damaged: run `episodata verify` on the dataset"
    )


@contextlib.contextmanager
def reading_hdf5() -> Iterator[None]:
    """Turn h5py's errors about a damaged file into an :class:`IntegrityError`."""
    try:
        yield
    except EpisodataError:
        raise
    except HDF5_ERRORS as err:
        raise damaged(err) from err


def check_layout(file: h5py.File, schema: DatasetSchema) -> None:
    """``file`` is this plugin's format, written for ``schema``."""
    try:
        format_name = bytes(file.attrs.get("format", b"")).decode()
        version = int(file.attrs.get("format_version", -1))
        fields = bytes(file.attrs.get("fields", b"")).decode()
    except HDF5_ERRORS as err:
        raise damaged(err) from err
    if format_name != FORMAT or version != FORMAT_VERSION:
        raise DatasetStateError(
            f"{DATA_NAME} is not an episodata-plugin-example file of format version "
            f"{FORMAT_VERSION} (format {format_name!r}, version {version!r})"
        )
    expected = _fields_json(schema)
    if fields != expected:
        raise IntegrityError(
            f"{DATA_NAME} stores fields {fields}, but manifest.json declares {expected}; "
            "the two files do not belong together"
        )


def field_dataset(file: h5py.File, spec: FieldSpec) -> h5py.Dataset:
    """The HDF5 dataset of a field, checked against the schema."""
    key = spec.qualified_key
    dataset = file["rows"][key]
    shape, dtype = stored_form(spec)
    if dataset.shape[1:] != shape or dataset.dtype != dtype:
        raise IntegrityError(
            f"{DATA_NAME}: /rows/{key} has rows of {dataset.shape[1:]} {dataset.dtype}, "
            f"where the schema says {shape} {dtype}"
        )
    return dataset


def read_commit(dataset: h5py.Dataset) -> tuple[int, int]:
    """Committed records and rows, checked against the check value."""
    values = np.asarray(dataset[()], dtype=np.uint64)
    if values.shape != (COMMIT_SLOTS,):
        raise IntegrityError(f"{DATA_NAME}: /commit has shape {values.shape}; it is damaged")
    count, total, check = (int(v) for v in values[:3])
    if check != _commit_check(count, total) or values[3:].any():
        raise IntegrityError(
            f"{DATA_NAME}: the commit counter does not match its check value; the file is damaged"
        )
    return count, total


def read_records(
    dataset: h5py.Dataset,
    layout: Layout,
    stop: int,
    total: int,
    known: npt.NDArray[Any] | None = None,
) -> npt.NDArray[Any]:
    """Records ``[len(known), stop)``, checked alone and, with ``known``, as a whole."""
    if known is None:
        known = np.zeros(0, dtype=layout.record)
    start = len(known)
    if dataset.shape[0] < stop:
        raise IntegrityError(
            f"{DATA_NAME}: /episodes holds {dataset.shape[0]} records but the commit "
            f"counter says {stop}; the file is damaged"
        )
    records = np.asarray(dataset[start:stop])
    if records.dtype != layout.record:
        raise IntegrityError(f"{DATA_NAME}: /episodes has an unexpected record type")
    for offset, record in enumerate(records):
        if not np.array_equal(record["check"], record_check(record)):
            raise IntegrityError(
                f"{DATA_NAME}: commit record {start + offset} does not match its check "
                "value; the file is damaged"
            )
    problem = structure_problem(np.concatenate([known, records]), total)
    if problem is not None:
        raise IntegrityError(problem)
    return records


def put_records(index: EpisodeIndex, records: npt.NDArray[Any], layout: Layout) -> None:
    """Describe the finalized episodes of ``records`` in ``index``."""
    present = {
        key: records["present"][:, column].astype(bool)
        for column, key in enumerate(layout.optional)
    }
    index.put_finalized(
        records["episode"], records["row_start"], records["num_rows"], records["flags"], present
    )
