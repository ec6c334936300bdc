"""Symbolic links out of the dataset folder: refused at open, on reads and by ``verify``.

A dataset from a stranger may hold a link (a chunk file, an array's ``c/`` folder, an
array folder, a metadata file) to any file on the reader's machine, which TensorStore
would read as data. Links that stay inside the folder are harmless and allowed, as in
the npz backend; every check goes through :func:`episodata_core.location.inside`.

- at open (cheap): the root and commit files, and each array's folder, ``zarr.json``
  and ``c/`` folder as its handle is opened;
- on reads and writes: each chunk file of a data array, the first time a read or a
  commit touches it (one path resolution per chunk per process);
- ``verify``: a walk of the whole folder that reports every link leaving it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from episodata_core.location import inside

if TYPE_CHECKING:
    from collections.abc import Iterable

    import numpy.typing as npt

__all__ = ["CheckedChunks", "check_array", "check_files", "outside_links"]


def check_files(folder: Path, names: Iterable[str]) -> None:
    """Refuse any of ``names`` (paths inside ``folder``) that resolves outside it."""
    for name in names:
        inside(folder, name)


def check_array(folder: Path, path: str) -> Path:
    """The resolved folder of the array at ``path``; its ``zarr.json`` and ``c/`` are checked."""
    resolved = inside(folder, path)
    check_files(folder, [f"{path}/zarr.json", f"{path}/c"])
    return resolved


class CheckedChunks:
    """Chunk files of data arrays that were found not to leave the dataset folder.

    Kept per array path as a growing ``[chunks]`` bool mask, so that a chunk's path is
    resolved once per process however often it is read.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.seen: dict[str, npt.NDArray[np.bool_]] = {}
        self.grid: dict[str, tuple[int, int]] = {}  # path -> (rank, rows per chunk file)

    def check_ranges(
        self, path: str, handle: Any, lo: npt.NDArray[np.int64], hi: npt.NDArray[np.int64]
    ) -> None:
        """Check the chunk files of rows ``[lo[i], hi[i])`` (``[n]`` each, ``hi > lo``)."""
        if not len(lo):
            return
        _, rows = self._grid(path, handle)
        first, last = lo // rows, (hi - 1) // rows
        counts = last - first + 1
        within = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
        self._check(path, handle, np.repeat(first, counts) + within)

    def check_rows(self, path: str, handle: Any, rows: npt.NDArray[np.int64]) -> None:
        """Check the chunk files that the ``[n]`` rows of the array at ``path`` live in."""
        if len(rows):
            self._check(path, handle, rows // self._grid(path, handle)[1])

    def _grid(self, path: str, handle: Any) -> tuple[int, int]:
        grid = self.grid.get(path)
        if grid is None:
            # a chunk file holds a write chunk: the shard when sharded
            grid = int(handle.rank), int(handle.chunk_layout.write_chunk.shape[0])
            self.grid[path] = grid
        return grid

    def _check(self, path: str, handle: Any, chunks: npt.NDArray[np.int64]) -> None:
        if not len(chunks):
            return
        seen = self.seen.get(path)
        top = int(chunks.max()) + 1
        if seen is None or len(seen) < top:
            grown = np.zeros(max(top, 2 * (0 if seen is None else len(seen))), dtype=bool)
            if seen is not None:
                grown[: len(seen)] = seen
            seen = self.seen[path] = grown
        new = np.unique(chunks[~seen[chunks]])
        # default chunk key encoding: c/<row chunk>/0/...
        tail = "/0" * (self._grid(path, handle)[0] - 1)
        chunk_root = os.path.join(self.folder, path, "c")  # checked when the array was opened
        for chunk in new.tolist():
            if not os.path.lexists(f"{chunk_root}/{chunk}"):
                # not made yet (a commit writing new rows): nothing there to follow, and
                # one lstat instead of resolving every component of the path
                continue
            inside(self.folder, f"{path}/c/{chunk}{tail}")
        seen[new] = True


def outside_links(folder: Path) -> list[str]:
    """A problem line for every symbolic link under ``folder`` that resolves outside it."""
    base = folder.resolve()
    problems = []
    for root, dirs, files in os.walk(base):  # links to folders are listed, not followed
        for name in sorted([*dirs, *files]):
            entry = Path(root) / name
            if not entry.is_symlink():
                continue
            target = entry.resolve()
            if not target.is_relative_to(base):
                problems.append(
                    f"{entry.relative_to(base)}: a symbolic link to {target}, outside the "
                    "dataset folder, which episodata refuses to read; replace it with the "
                    "file itself (the dataset may be malicious or damaged)"
                )
    return problems
