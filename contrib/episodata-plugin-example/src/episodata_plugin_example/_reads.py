"""Batched reads of many scattered rows from one field's HDF5 dataset."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import h5py
import numpy as np

if TYPE_CHECKING:
    import numpy.typing as npt

__all__ = ["join_rows", "read_sorted"]

# rows of a batch closer than this to the previous one are read with it, gap included
_JOIN_BYTES = 64 * 1024


def join_rows(dataset: h5py.Dataset) -> int:
    """Rows of a gap that a batched read of ``dataset`` reads through: 64 KiB, one chunk."""
    row_bytes = int(np.prod(dataset.shape[1:], dtype=np.int64)) * int(dataset.dtype.itemsize)
    chunk_rows = int(dataset.chunks[0])
    return max(1, min(chunk_rows, _JOIN_BYTES // max(1, row_bytes)))


def read_sorted(dataset: h5py.Dataset, rows: npt.NDArray[np.int64], join: int) -> npt.NDArray[Any]:
    """``dataset[rows]`` for sorted, distinct ``rows``, in few contiguous reads.

    A row at most ``join`` rows after the previous one joins its read, so a dense
    batch is one read and a sparse one is one read per cluster of rows. (A single read
    of the union of the clusters would be one HDF5 call, but HDF5 walks such an
    irregular selection piece by piece of its innermost axis: 20 to 30 times slower
    for image fields.)
    """
    tail = tuple(dataset.shape[1:])
    breaks = np.flatnonzero(np.diff(rows) > join) + 1
    starts = rows[np.concatenate([[0], breaks])]
    stops = rows[np.concatenate([breaks - 1, [len(rows) - 1]])] + 1
    lengths = stops - starts
    out = np.empty((int(lengths.sum()), *tail), dtype=dataset.dtype)
    space = dataset.id.get_space()
    origin = (0,) * len(tail)
    offset = 0
    for start, count in zip(starts.tolist(), lengths.tolist(), strict=True):
        space.select_hyperslab((start, *origin), (count, *tail))
        target = out[offset : offset + count]
        dataset.id.read(h5py.h5s.create_simple(target.shape), space, target)
        offset += count
    if len(out) == len(rows):
        return out
    group = np.searchsorted(starts, rows, side="right") - 1
    offsets = np.cumsum(lengths) - lengths
    picked: npt.NDArray[Any] = out[rows - starts[group] + offsets[group]]
    return picked
