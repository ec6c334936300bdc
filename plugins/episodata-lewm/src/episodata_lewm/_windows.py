"""Read windows: how the selected episodes are cut into reads within the budget (§2.9).

Adjacent selected episodes are grouped while ``rows x row bytes <= read_budget_bytes``
(at least one episode per window). An episode larger than the budget is cut into row
blocks whose length is a multiple of the chunk length, and whose edges fall on chunk
boundaries. The validation pre-pass and the write pass walk the same windows.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import numpy.typing as npt

__all__ = ["Window", "plan_windows", "row_runs"]


@dataclass(frozen=True)
class Window:
    """Rows ``[start, stop)`` and the selected episodes (ordinals) they overlap.

    A ``streamed`` window is one block of a single episode larger than the budget;
    ``first``/``last`` say whether it holds that episode's first or last row.
    """

    start: int
    stop: int
    ordinals: npt.NDArray[np.int64]
    streamed: bool = False
    first: bool = True
    last: bool = True


def plan_windows(
    offsets: npt.NDArray[np.int64],
    lengths: npt.NDArray[np.int64],
    *,
    row_bytes: int,
    budget: int,
    chunk_rows: int,
) -> list[Window]:
    """Windows over the selected episodes (``offsets``/``lengths`` are ``[S]``, ascending)."""
    limit = max(1, budget // max(row_bytes, 1))
    windows: list[Window] = []
    batch: list[int] = []
    batch_start = batch_stop = 0

    def flush() -> None:
        if batch:
            windows.append(Window(batch_start, batch_stop, np.asarray(batch, dtype=np.int64)))
            batch.clear()

    for ordinal in range(int(offsets.shape[0])):
        g, n = int(offsets[ordinal]), int(lengths[ordinal])
        if n > limit:
            flush()
            windows.extend(_blocks(ordinal, g, n, limit, chunk_rows))
            continue
        if batch and (g != batch_stop or g + n - batch_start > limit):
            flush()
        if not batch:
            batch_start = g
        batch.append(ordinal)
        batch_stop = g + n
    flush()
    return windows


def _blocks(ordinal: int, g: int, n: int, limit: int, chunk_rows: int) -> list[Window]:
    step = limit // chunk_rows * chunk_rows if limit >= chunk_rows else limit
    edges = [g, *range((g // step + 1) * step, g + n, step), g + n]
    ordinals = np.asarray([ordinal], dtype=np.int64)
    last = len(edges) - 2
    return [
        Window(a, b, ordinals, streamed=True, first=i == 0, last=i == last)
        for i, (a, b) in enumerate(itertools.pairwise(edges))
    ]


def row_runs(windows: list[Window]) -> list[tuple[int, int]]:
    """Contiguous row ranges covered by the windows (for the chunk check)."""
    runs: list[tuple[int, int]] = []
    for window in windows:
        if runs and runs[-1][1] == window.start:
            runs[-1] = (runs[-1][0], window.stop)
        else:
            runs.append((window.start, window.stop))
    return runs
