"""Checking stored bytes against their digests: ``verify()`` and crash recovery.

Recovery exists because a killed writer leaves HDF5's "open for writing" superblock
flag set, and HDF5 refuses to reopen such a file for writing. The committed records and
rows are copied, each episode checked against its digests, into a fresh file that
replaces ``data.h5`` by rename: one pass over the data, and only after a crash. What an
interrupted commit had appended past the committed counts is left behind.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import h5py
import numpy as np
from episodata_core.errors import IntegrityError
from episodata_core.location import fsync_directory

from episodata_plugin_example._format import (
    DATA_NAME,
    check_layout,
    commit_array,
    create_file,
    damaged,
    digest,
    fsync_file,
    read_commit,
    read_records,
    reading_hdf5,
    record_check,
    structure_problem,
)

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    import numpy.typing as npt
    from episodata_core.schema import DatasetSchema

    from episodata_plugin_example._format import Layout

__all__ = ["check_chunks", "rebuild", "verify_file"]

# committed rows are checked and copied in reads of about this size
_BLOCK_BYTES = 64 * 2**20


def verify_file(file: h5py.File, layout: Layout, *, swmr: bool) -> list[str]:
    """Every commit record, every committed row and every chunk's unused tail."""
    if swmr:
        for name in ("commit", "episodes"):
            file[name].refresh()
    count, total = read_commit(file["commit"])
    records_ds = file["episodes"]
    records = np.asarray(records_ds[:count])
    problems = [
        f"{DATA_NAME}: commit record {number} does not match its check"
        for number, record in enumerate(records)
        if not np.array_equal(record["check"], record_check(record))
    ]
    structure = structure_problem(records, total)
    if structure is not None or problems:
        # row ranges of damaged records cannot be trusted to check the rows with
        return [*problems, *([structure] if structure else [])]
    for column, key in enumerate(layout.keys):
        dataset = file["rows"][key]
        if swmr:
            dataset.refresh()
        if dataset.shape[0] < total:
            problems.append(
                f"{DATA_NAME}: /rows/{key} holds {dataset.shape[0]} rows, {total} committed"
            )
            continue
        for _, _, bad in _checked_blocks(dataset, records, column):
            problems += [
                f"{DATA_NAME}: episode {int(record['episode'])}, field {key!r}: rows "
                f"{int(record['row_start'])}..{int(record['row_start'] + record['num_rows']) - 1}"
                " do not match their checksum"
                for record in bad
            ]
        problems += check_chunks(dataset, f"/rows/{key}")
    problems += check_chunks(records_ds, "/episodes")
    return problems


def check_chunks(dataset: h5py.Dataset, name: str) -> list[str]:
    """Chunks are whole, and the bytes of the last chunk past the extent are zero."""
    extent = dataset.shape[0]
    chunk_rows = dataset.chunks[0]
    row_bytes = int(np.prod(dataset.chunks[1:], dtype=np.int64)) * dataset.dtype.itemsize
    expected_size = chunk_rows * row_bytes
    problems: list[str] = []
    offsets: list[tuple[int, ...]] = []

    def visit(info: Any) -> None:
        if info.size != expected_size:
            problems.append(
                f"{DATA_NAME}: {name}: chunk at row {info.chunk_offset[0]} has "
                f"{info.size} bytes, not {expected_size}"
            )
        offsets.append(tuple(info.chunk_offset))

    dataset.id.chunk_iter(visit)
    for offset in offsets:
        used = extent - offset[0]
        if used >= chunk_rows:
            continue
        if used <= 0:
            problems.append(f"{DATA_NAME}: {name}: a chunk lies past the last row")
            continue
        _, raw = dataset.id.read_direct_chunk(offset)
        if any(np.frombuffer(raw, np.uint8)[used * row_bytes :]):
            problems.append(
                f"{DATA_NAME}: {name}: bytes after row {extent - 1} in its last chunk are not "
                "zero; the file is damaged"
            )
    return problems


def rebuild(root: Path, schema: DatasetSchema, layout: Layout) -> None:
    """Replace the ``data.h5`` that a killed writer left by a copy of its committed part."""
    path = root / DATA_NAME
    temporary = root / f".{DATA_NAME}.rebuild.tmp"
    try:
        # SWMR mode: HDF5 refuses plain opens of a file whose writer flag is set
        source = h5py.File(path, "r", swmr=True, locking=False)
    except OSError as err:
        raise damaged(err) from err
    try:
        with reading_hdf5():
            check_layout(source, schema)
            count, total = read_commit(source["commit"])
            records = read_records(source["episodes"], layout, count, total)
            chunk_rows = {key: source["rows"][key].chunks[0] for key in layout.keys}
            chunk_rows["<episodes>"] = source["episodes"].chunks[0]
        create_file(temporary, schema, layout, chunk_rows)
        with h5py.File(temporary, "r+", libver="latest", meta_block_size=0, locking=False) as out:
            for column, key in enumerate(layout.keys):
                with reading_hdf5():
                    _copy_checked(source["rows"][key], out["rows"][key], records, column, total)
            out["episodes"].resize((count,))
            out["episodes"][:] = records
            out["commit"][:] = commit_array(count, total)
        fsync_file(temporary)
    except BaseException:
        source.close()
        temporary.unlink(missing_ok=True)
        raise
    source.close()
    os.replace(temporary, path)
    fsync_directory(root)


def _copy_checked(
    source: h5py.Dataset, target: h5py.Dataset, records: npt.NDArray[Any], column: int, total: int
) -> None:
    """Copy a field's committed rows, refusing any episode that does not match its digest."""
    target.resize(total, axis=0)
    for first, block, bad in _checked_blocks(source, records, column):
        if bad:
            raise IntegrityError(
                f"{DATA_NAME}: a killed writer left episode {int(bad[0]['episode'])}, field "
                f"{source.name.removeprefix('/rows/')!r} not matching its checksum; the file "
                "was left as it is. Run `episodata verify` on the dataset"
            )
        target[first : first + len(block)] = block


def _checked_blocks(
    dataset: h5py.Dataset, records: npt.NDArray[Any], column: int
) -> Iterator[tuple[int, npt.NDArray[Any], list[npt.NDArray[Any]]]]:
    """Committed rows in reads of about 64 MiB: ``(first row, rows, records not matching)``."""
    row_bytes = int(np.prod(dataset.shape[1:], dtype=np.int64)) * int(dataset.dtype.itemsize)
    budget = max(1, _BLOCK_BYTES // max(1, row_bytes))
    first = 0
    while first < len(records):
        last, count = first, 0
        while last < len(records) and (
            last == first or count + records[last]["num_rows"] <= budget
        ):
            count += int(records[last]["num_rows"])
            last += 1
        start = int(records[first]["row_start"])
        block = np.asarray(dataset[start : start + count])
        bad = []
        for record in records[first:last]:
            offset = int(record["row_start"]) - start
            rows = block[offset : offset + int(record["num_rows"])]
            if not np.array_equal(digest(rows), record["digest"][column]):
                bad.append(record)
        yield start, block, bad
        first = last
