"""The ceilings: NumPy gather in memory and a naive TensorStore reader on disk.

Both read exactly the rows a batch needs, from the same arrays episodata reads, and do
nothing else; they are what a hand-written loader of these very arrays would achieve.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from benchmarks.data import RowData

__all__ = ["IndexPool", "TensorStoreReader", "numpy_gather"]


class IndexPool:
    """Pre-drawn ``(episodes, starts)`` batches, uniform over windows, cycled through.

    Ceilings and hand-written peers draw from it, so their timings hold no sampling cost
    beyond a lookup, and all of them read the same windows.
    """

    def __init__(self, data: RowData, length: int, batch: int, seed: int, count: int = 64) -> None:
        rng = np.random.default_rng([seed, 99])
        windows = np.maximum(data.lengths - length + 1, 0)
        cumulative = np.cumsum(windows)
        positions = rng.integers(int(cumulative[-1]), size=(count, batch), dtype=np.int64)
        episodes = np.searchsorted(cumulative, positions, side="right").astype(np.int64)
        self.episodes = episodes
        self.starts = positions - (cumulative[episodes] - windows[episodes])
        self.rows = data.offsets[episodes] + self.starts  # first row of every window
        self._next = 0

    def take(self) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """The next batch: ``(episodes, starts, first rows)``, ``[B]`` each."""
        i = self._next % len(self.episodes)
        self._next += 1
        return self.episodes[i], self.starts[i], self.rows[i]


def numpy_gather(
    rows: dict[str, npt.NDArray[Any]], first: npt.NDArray[np.int64], length: int
) -> dict[str, npt.NDArray[Any]]:
    """``X[idx]`` with ``idx = first[:, None] + arange(length + 1)`` for every field."""
    index = first[:, None] + np.arange(length + 1, dtype=np.int64)
    return {key: array[index] for key, array in rows.items()}


class TensorStoreReader:
    """A straightforward reader of episodata's Zarr arrays: one read per segment and field.

    It issues every read of a batch, then waits on all futures together and stacks the
    results. ``cache_bytes`` sizes TensorStore's decoded-chunk cache (0: none).
    """

    def __init__(self, folder: str | Path, keys: list[str], cache_bytes: int) -> None:
        import tensorstore as ts

        root = Path(folder)
        context = ts.Context({"cache_pool": {"total_bytes_limit": int(cache_bytes)}})

        def open_(path: Path) -> Any:
            spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(path)}}
            return ts.open(spec, read=True, context=context).result()

        self.arrays = {key: open_(root / "data" / key) for key in keys}
        # column 0 of the episode index is row_start (episodata_zarr._layout.IndexLayout)
        index = open_(root / "index" / "episodes").read().result()
        self.row_start = np.asarray(index[:, 0], dtype=np.int64)

    def read(
        self, episodes: npt.NDArray[np.int64], starts: npt.NDArray[np.int64], length: int
    ) -> dict[str, npt.NDArray[Any]]:
        """``[B, length + 1, ...]`` rows of every field for windows ``(episode, start)``."""
        first = (self.row_start[episodes] + starts).tolist()
        futures = {
            key: [array[lo : lo + length + 1].read() for lo in first]
            for key, array in self.arrays.items()
        }
        return {key: np.stack([f.result() for f in parts]) for key, parts in futures.items()}
