"""Coalescing a batch of row windows into reads that decode every chunk once.

Pure NumPy planning; the TensorStore reads happen in ``_impl``. Windows are merged when
they touch a common chunk, so no chunk is read by two reads of one batch, and every
chunk a merged read covers holds rows that some window needs: a read never decodes a
chunk for nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = ["ReadPlan", "plan_reads"]


@dataclass(frozen=True)
class ReadPlan:
    """Merged reads for ``[n]`` windows ``[starts, starts + counts)`` of one array.

    Read ``g`` covers rows ``[lo[g], hi[g])``; window ``i`` is rows
    ``[starts[i] - lo[read[i]], ... + counts[i])`` of read ``read[i]``.
    """

    lo: npt.NDArray[np.int64]
    hi: npt.NDArray[np.int64]
    read: npt.NDArray[np.int64]

    def __len__(self) -> int:
        return int(self.lo.shape[0])


def plan_reads(
    starts: npt.NDArray[np.int64], counts: npt.NDArray[np.int64], chunk_rows: int
) -> ReadPlan:
    """Merge windows (all ``counts >= 1``) that share a chunk of ``chunk_rows`` rows."""
    if not len(starts):
        empty = np.zeros(0, dtype=np.int64)
        return ReadPlan(empty, empty, empty)
    order = np.argsort(starts, kind="stable")
    lo_sorted = starts[order]
    hi_sorted = lo_sorted + counts[order]
    first_chunk = lo_sorted // chunk_rows
    last_chunk = (hi_sorted - 1) // chunk_rows
    # a window joins the running read when it starts in a chunk the read already covers
    reach = np.maximum.accumulate(last_chunk)
    new = np.ones(len(order), dtype=bool)
    new[1:] = first_chunk[1:] > reach[:-1]
    heads = np.flatnonzero(new)
    lo = lo_sorted[heads]
    hi = np.maximum.reduceat(hi_sorted, heads)
    read = np.empty(len(order), dtype=np.int64)
    read[order] = np.cumsum(new) - 1
    return ReadPlan(lo.astype(np.int64), hi.astype(np.int64), read)
