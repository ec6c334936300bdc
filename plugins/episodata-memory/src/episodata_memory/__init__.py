"""In-memory storage backend: the default when a dataset has no path.

Finalized episodes live back to back in one growable array per field, so a batch of
windows is one gather per field: each window is a contiguous run of rows, copied as one
item (see :func:`_gather_windows`). Ongoing episodes grow in buffers of
their own (:class:`~episodata_memory._ongoing.OngoingRows`) and move into the shared
arrays once, when they are finalized: appends are amortized O(1) and reading an ongoing
episode slices its buffer instead of concatenating.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field

from episodata_core import selection
from episodata_core.authoring import Growable, check_fields
from episodata_core.errors import DatasetStateError, SchemaError
from episodata_core.protocols import EpisodeRows, EpisodeTable, GatherRequest, Rows
from episodata_memory._ongoing import OngoingRows

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Self

    from episodata_core.schema import DatasetSchema

__all__ = ["MemoryBackend"]

__version__ = "0.3.0"


class MemoryOptions(BaseModel):
    """Options of the memory backend."""

    model_config = ConfigDict(extra="forbid")

    initial_rows: int = Field(
        default=1024, ge=1, description="Rows reserved per field before the first growth."
    )


class MemoryBackend(selection.ReadsSelections):
    """Episodes kept in this process's memory; nothing survives the process."""

    name: ClassVar[str] = "memory"
    description: ClassVar[str] = "in-process arrays; for tests, small datasets, replay buffers"
    Options: ClassVar[type[BaseModel]] = MemoryOptions
    # a gather here is a NumPy copy holding the GIL: a read-ahead thread cannot overlap
    # it, and handing batches across threads cost W2 a quarter to 40 % of its rate
    default_prefetch: ClassVar[int] = 0

    def __init__(self, schema: DatasetSchema, options: MemoryOptions) -> None:
        self._schema = schema
        self._specs = {spec.qualified_key: spec for spec in schema}
        self._optional = tuple(spec.qualified_key for spec in schema if spec.optional)
        rows = options.initial_rows
        self._rows = {
            key: Growable(spec.shape, spec.np_dtype, rows) for key, spec in self._specs.items()
        }
        # per-episode index; row_start is -1 while the episode is ongoing
        self._row_start = Growable((), np.dtype(np.int64), 64)
        self._length = Growable((), np.dtype(np.int64), 64)
        self._terminated = Growable((), np.dtype(np.bool_), 64)
        self._truncated = Growable((), np.dtype(np.bool_), 64)
        self._ongoing = Growable((), np.dtype(np.bool_), 64)
        self._present = {key: Growable((), np.dtype(np.bool_), 64) for key in self._optional}
        self._ongoing_rows: dict[int, OngoingRows] = {}
        # ongoing episodes whose length column lags behind their buffers
        self._stale_lengths: dict[int, OngoingRows] = {}
        self._table: EpisodeTable | None = None
        self._initial_rows = rows
        self._closed = False

    @classmethod
    def create(cls, schema: DatasetSchema, location: str | None, options: BaseModel) -> Self:
        """Create an empty in-memory dataset; ``location`` must be ``None``."""
        if location is not None:
            raise SchemaError(
                f"the memory backend keeps data in this process and takes no path "
                f"(got {location!r}); use backend='zarr' or 'npz_directory' to store files"
            )
        assert isinstance(options, MemoryOptions)
        return cls(schema, options)

    @property
    def schema(self) -> DatasetSchema:
        """The dataset schema."""
        return self._schema

    # -- index ----------------------------------------------------------------------------

    def episode_table(self) -> EpisodeTable:
        """Read-only views of the per-episode index, valid until the next write."""
        # a sampling loop asks for it on every batch; writes drop it (_index_changed)
        if self._table is None:
            self._table = self._build_table()
        return self._table

    def _index_changed(self) -> None:
        self._table = None

    def _build_table(self) -> EpisodeTable:
        # appends count an ongoing episode's rows in its buffers alone (one NumPy write
        # less per step); the length column catches up here, when someone asks
        length = self._length.data
        for episode, ongoing in self._stale_lengths.items():
            length[episode] = ongoing.size - 1
        self._stale_lengths.clear()
        # the columns are views of the index itself: read-only, like every read
        return EpisodeTable(
            length=_read_only(self._length.view()),
            terminated=_read_only(self._terminated.view()),
            truncated=_read_only(self._truncated.view()),
            ongoing=_read_only(self._ongoing.view()),
            present={key: _read_only(grow.view()) for key, grow in self._present.items()},
        )

    def _new_index_entry(self, rows: Rows, *, row_start: int, ongoing: bool) -> int:
        self._index_changed()
        episode = len(self._length)
        self._row_start.append(row_start)
        self._length.append(_num_rows(rows) - 1)
        self._terminated.append(False)
        self._truncated.append(False)
        self._ongoing.append(ongoing)
        for key, grow in self._present.items():
            grow.append(key in rows)
        return episode

    # -- writes ---------------------------------------------------------------------------

    def start_episode(self, rows: Rows) -> int:
        """Begin an ongoing episode in buffers of its own."""
        self._check_open()
        buffers = OngoingRows(rows)
        episode = self._new_index_entry(rows, row_start=-1, ongoing=True)
        self._ongoing_rows[episode] = buffers
        return episode

    def append_rows(self, episode: int, rows: Rows) -> None:
        """Append rows to an ongoing episode; amortized O(rows)."""
        ongoing = self._ongoing_rows.get(episode)
        if ongoing is None:
            ongoing = self._ongoing_buffers(episode)  # raises: closed, or not ongoing
        check_fields(rows.keys(), ongoing.buffers.keys(), f"episode {episode}")
        ongoing.append(rows)
        self._stale_lengths[episode] = ongoing
        self._table = None  # the episode's length changed (_index_changed, inlined)

    def append_step(self, episode: int, values: Mapping[str, Any]) -> None:
        """Append one step's exact values (``SupportsAppendStep``): one row per field."""
        ongoing = self._ongoing_rows.get(episode)
        if ongoing is None:
            ongoing = self._ongoing_buffers(episode)  # raises: closed, or not ongoing
        check_fields(values.keys(), ongoing.buffers.keys(), f"episode {episode}")
        ongoing.append_values(values)
        self._stale_lengths[episode] = ongoing
        self._table = None  # the episode's length changed (_index_changed, inlined)

    def finalize_episode(self, episode: int, *, terminated: bool, truncated: bool) -> None:
        """Move an ongoing episode's rows into the shared arrays."""
        ongoing = self._ongoing_buffers(episode)
        self._index_changed()
        self._row_start.data[episode] = self._append_shared(ongoing.views())
        self._length.data[episode] = ongoing.size - 1
        self._stale_lengths.pop(episode, None)
        self._terminated.data[episode] = terminated
        self._truncated.data[episode] = truncated
        self._ongoing.data[episode] = False
        del self._ongoing_rows[episode]

    def add_episode(self, rows: Rows, *, terminated: bool, truncated: bool) -> int:
        """Append a complete episode to the shared arrays."""
        self._check_open()
        start = self._append_shared(rows)
        episode = self._new_index_entry(rows, row_start=start, ongoing=False)
        self._terminated.data[episode] = terminated
        self._truncated.data[episode] = truncated
        return episode

    def add_episodes(self, episodes: Sequence[EpisodeRows]) -> list[int]:
        """Append complete episodes in order; nothing to commit, so one by one."""
        self._check_open()
        return [
            self.add_episode(e.rows, terminated=e.terminated, truncated=e.truncated)
            for e in episodes
        ]

    def _append_shared(self, rows: Rows) -> int:
        count = _num_rows(rows)
        start = -1
        for key, grow in self._rows.items():
            block = rows.get(key)
            # absent optional fields take zero rows so every field shares one row numbering
            start = grow.extend(block) if block is not None else grow.extend_zeros(count)
        return start

    # -- reads ----------------------------------------------------------------------------

    def read_rows(self, episode: int, start: int, stop: int, fields: Sequence[str]) -> Rows:
        """Read-only views of rows ``[start, stop)`` of one episode (ongoing ones too)."""
        self._check_open()
        base = int(self._row_start.data[episode])
        if base < 0:
            source = self._ongoing_rows[episode]
            return {key: _read_only(source.view(key)[start:stop]) for key in fields}
        return {
            key: _read_only(self._rows[key].view()[base + start : base + stop]) for key in fields
        }

    def gather_rows(self, request: GatherRequest) -> Rows:
        """One gather per field for a whole batch of windows, into fresh writable arrays."""
        self._check_open()
        bases = self._row_start.view()[request.episodes]
        first = bases + request.starts
        if (
            len(request)
            and (not self._ongoing_rows or bases.min() >= 0)  # nothing ongoing in the batch
            and request.is_dense
        ):
            # the common case (no padding, nothing ongoing): whole windows, one copy each
            return {
                key: _gather_windows(self._rows[key].view(), first, request.num_rows)
                for key in request.fields
            }
        return self._gather_padded(request, bases, first)

    def _gather_padded(
        self, request: GatherRequest, bases: npt.NDArray[np.int64], first: npt.NDArray[np.int64]
    ) -> Rows:
        ongoing = bases < 0
        steps = np.arange(request.num_rows, dtype=np.int64)
        within = steps[None, :] - request.offsets[:, None]
        valid = (within >= 0) & (within < request.counts[:, None])
        # padding positions read some real row of their own window, then get zeroed
        last = np.maximum(request.counts - 1, 0)[:, None]
        index = first[:, None] + np.clip(within, 0, last)
        if ongoing.any():
            index[ongoing] = 0  # filled from the episodes' own buffers below
        out: dict[str, npt.NDArray[Any]] = {}
        for key in request.fields:
            data = self._rows[key].view()
            batch = data[index] if len(data) else self._zeros(key, index.shape)
            batch[~valid] = 0
            out[key] = batch
        for b in np.flatnonzero(ongoing):
            self._fill_ongoing(out, request, int(b))
        return out

    def _fill_ongoing(
        self, out: dict[str, npt.NDArray[Any]], request: GatherRequest, b: int
    ) -> None:
        buffers = self._ongoing_rows[int(request.episodes[b])]
        start, count, offset = (
            int(request.starts[b]),
            int(request.counts[b]),
            int(request.offsets[b]),
        )
        for key, batch in out.items():
            batch[b] = 0
            if key in buffers.buffers:
                batch[b, offset : offset + count] = buffers.view(key)[start : start + count]

    def _zeros(self, key: str, shape: tuple[int, ...]) -> npt.NDArray[Any]:
        spec = self._specs[key]
        return np.zeros((*shape, *spec.shape), dtype=spec.np_dtype)

    # -- lifecycle ------------------------------------------------------------------------

    def close(self) -> None:
        """Drop every buffer."""
        self._closed = True
        self._rows.clear()
        self._ongoing_rows.clear()
        self._stale_lengths.clear()

    def _check_open(self) -> None:
        if self._closed:
            raise DatasetStateError("the dataset is closed")

    def _ongoing_buffers(self, episode: int) -> OngoingRows:
        self._check_open()
        try:
            return self._ongoing_rows[episode]
        except KeyError:
            raise DatasetStateError(f"episode {episode} is not ongoing") from None

    @property
    def nbytes(self) -> int:
        """Bytes held by stored rows (not counting reserved growth capacity)."""
        shared = sum(grow.nbytes for grow in self._rows.values())
        ongoing = sum(buffers.nbytes for buffers in self._ongoing_rows.values())
        return shared + ongoing


def _gather_windows(
    data: npt.NDArray[Any], first: npt.NDArray[np.int64], num_rows: int
) -> npt.NDArray[Any]:
    """Rows ``first[b] : first[b] + num_rows`` of ``data`` for every ``b``: ``[B, num_rows, ...]``.

    ``data[first[:, None] + arange(num_rows)]`` gives the same result, but fancy indexing
    copies row by row through NumPy's generic iterator. Here the (overlapping) windows
    are seen as one opaque item each, so the gather copies one contiguous block per
    window: 1.1-11x faster for rows of 4 bytes to 12 KiB, never slower (measured).
    The caller guarantees every window lies inside ``data``.
    """
    row_bytes = data.strides[0]
    if row_bytes == 0 or not data.flags.c_contiguous:  # empty rows: no item to copy
        rows: npt.NDArray[Any] = data[first[:, None] + np.arange(num_rows)]
        return rows
    windows = np.ndarray(
        shape=(data.shape[0] - num_rows + 1,),
        dtype=_window_dtype(row_bytes * num_rows),
        buffer=data,
        strides=(row_bytes,),
    )
    return windows[first].view(data.dtype).reshape(len(first), num_rows, *data.shape[1:])


@functools.lru_cache(maxsize=64)
def _window_dtype(size: int) -> np.dtype[np.void]:
    # building a void dtype costs about as much as the window view itself; streams ask
    # for the same few sizes on every batch
    return np.dtype((np.void, size))


def _num_rows(rows: Rows) -> int:
    return int(next(iter(rows.values())).shape[0])


def _read_only(array: npt.NDArray[Any]) -> npt.NDArray[Any]:
    array.flags.writeable = False
    return array
