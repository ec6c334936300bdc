"""``segments()``: every window as an indexable, map-style dataset for a DataLoader.

``__getitems__`` turns a whole DataLoader batch of indices into one backend read, and
:meth:`SegmentDataset.collate` passes that batch through; in a worker process it marks
the batch to travel through shared memory (:mod:`episodata_core.sampling.transport`).
The object pickles by location for persistent datasets, and notices when it runs in
another process, so each worker opens its own backend handle; memory datasets are
inherited through ``fork`` without copies. The index is fixed between
:meth:`SegmentDataset.refresh` calls, so a DataLoader sees a constant ``len``.

Persistent DataLoader workers keep the copy of this object they started with, so a
refresh in the main process is published on a small shared board (a generation, the
episodes and the windows of the new index); a worker that sees a new generation
refreshes its own handle and index over exactly those episodes before it reads.
"""

from __future__ import annotations

import multiprocessing
import os
from typing import TYPE_CHECKING, Any

import numpy as np

from episodata_core.errors import ArgumentError, DatasetStateError, SchemaError
from episodata_core.protocols import EpisodeTable
from episodata_core.sampling.index import EpisodeFilter, Pad, SegmentIndex, WindowSpec
from episodata_core.sampling.read import read_windows, stack_segments
from episodata_core.sampling.transport import for_transport
from episodata_core.views import Batch, Segment

if TYPE_CHECKING:
    from collections.abc import Sequence

    from episodata_core.dataset import Dataset

__all__ = ["SegmentDataset"]


class SegmentDataset:
    """Map-style view of every window: ``len``, ``[i]`` (a Segment) and batched reads."""

    def __init__(
        self,
        dataset: Dataset,
        spec: WindowSpec,
        *,
        fields: tuple[str, ...],
        filter: EpisodeFilter | None,
        pad: Pad,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        if not 0 <= rank < world_size:
            raise ArgumentError(f"rank must be in [0, world_size={world_size}), got {rank}")
        self._dataset = dataset
        self._spec = spec
        self._fields = fields
        self._pad = pad
        self._rank, self._world_size = rank, world_size
        # the process this object was made in; it pickles, so a spawned worker that
        # unpickles (and opens) it still reopens the dataset on first use, see dataset
        self._pid = os.getpid()
        self.index = SegmentIndex(dataset, spec.length, pad=pad, filter=filter)
        # generation, episodes, windows of the main process's index; created before any
        # worker starts, so that forked and spawned workers share it
        self._board: Any = multiprocessing.RawArray("q", 3)
        self._seen = 0  # the generation of the board this object's index matches

    @property
    def dataset(self) -> Dataset:
        """The dataset, reopened once per process for persistent backends."""
        if self._pid != os.getpid():
            # a DataLoader worker opens its own handle: the parent's handles (files,
            # thread pools) are not safe to share after fork, and a backend sizes its
            # caches by the number of workers, which a spawned worker learns only once
            # its loop runs, after it unpickled this object
            self._dataset = self._dataset.reopen_for_reading()
            self.index.use(self._dataset)
            self._pid = os.getpid()
        return self._dataset

    def __len__(self) -> int:
        return len(range(self._rank, len(self.index), self._world_size))

    def _positions(self, indices: Sequence[int] | np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        array = np.asarray(indices, dtype=np.int64)
        size = len(self)
        if array.size and (array.min() < -size or array.max() >= size):
            raise IndexError(f"segment index out of range for {size} segments")
        array = np.where(array < 0, array + size, array)
        return self._rank + array * self._world_size

    def __getitems__(self, indices: Sequence[int]) -> Batch:
        """One backend read for a whole batch of segment indices."""
        if self._board is not None and self._board[0] != self._seen:
            self._follow()
        episodes, starts = self.index.locate(self._positions(indices))
        return read_windows(
            self.dataset.access,
            episodes,
            starts,
            length=self._spec.length,
            pad=self._pad,
            fields=self._fields,
            split=self._spec.split,
        )

    def fetch(self, indices: Sequence[int]) -> Batch:
        """Segments ``indices`` as one :class:`Batch`, read with one backend call."""
        return self.__getitems__(indices)

    def __getitem__(self, i: int) -> Segment:
        """Segment ``i``: ``[L + 1, ...]`` buffers without a batch axis."""
        batch = self.__getitems__([i])
        buffers = {key: value[0] for key, value in batch.buffers.items()}
        flags = batch._flags.index(0)
        return Segment(batch.schema, buffers, flags, split=self._spec.split)

    def collate(self, items: Batch | Sequence[Segment]) -> Batch:
        """``collate_fn`` for a DataLoader: a batch read passes through; segments stack.

        With or without worker processes the loader yields Batches of NumPy arrays, and
        ``obs``/``next_obs`` are views of one buffer. A worker sends its batches to the
        main process through shared memory, so it needs torch, as any worker does.
        """
        if isinstance(items, Batch):
            return for_transport(items)
        if not items:
            raise SchemaError("collate: got no segments")
        buffers, flags = stack_segments(list(items))
        return for_transport(Batch(self._dataset.schema, buffers, flags, split=self._spec.split))

    def refresh(self) -> None:
        """Include episodes written since this object was made (changes ``len``).

        DataLoader workers follow, persistent ones included: each refreshes its own
        handle and index over the same episodes before its next read.
        """
        self.index.refresh()
        board = self._board
        if board is not None:
            # the values before the generation: a worker reads them after seeing it
            board[1], board[2] = self.index.num_episodes, len(self.index)
            board[0] += 1
            self._seen = board[0]

    def _follow(self) -> None:
        """In a worker: rebuild the index as the main process's last refresh left it."""
        board = self._board
        assert board is not None
        generation, episodes, windows = board[0], board[1], board[2]
        dataset = self.dataset  # this process's own handle
        dataset.refresh()
        with dataset.access.lock:
            table = dataset.backend.episode_table()
        if len(table) < episodes:
            raise DatasetStateError(
                f"this DataLoader worker sees {len(table)} episodes, but the main process "
                f"refreshed segments() to {episodes}: a worker of an in-memory dataset "
                "keeps the episodes it started with; pass persistent_workers=False so "
                "that workers start again each epoch"
            )
        self.index.refresh_from(_first_episodes(table, episodes))
        if len(self.index) != windows:
            raise DatasetStateError(
                f"this DataLoader worker indexes {len(self.index)} windows where the main "
                f"process has {windows}: an episode that was ongoing at the main "
                "process's refresh() changed since; refresh when no episode is being "
                "recorded, or pass persistent_workers=False"
            )
        self._seen = generation

    def __getstate__(self) -> dict[str, Any]:
        state = dict(vars(self))
        if multiprocessing.context.get_spawning_popen() is None:
            # the board travels only to a process being started (a spawned worker);
            # a copy pickled anywhere else is on its own
            state["_board"] = None
        return state


def _first_episodes(table: EpisodeTable, count: int) -> EpisodeTable:
    """The first ``count`` episodes of ``table``."""
    return EpisodeTable(
        length=table.length[:count],
        terminated=table.terminated[:count],
        truncated=table.truncated[:count],
        ongoing=table.ongoing[:count],
        present={key: value[:count] for key, value in table.present.items()},
    )
