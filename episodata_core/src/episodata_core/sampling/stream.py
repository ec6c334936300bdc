"""``segment_stream()``: batches of segments, sampled or in order, read ahead in a thread.

With ``shuffle=True`` (the default) the stream is infinite: each batch holds
``batch_size`` windows drawn by the sampler (uniform over windows, with replacement,
unless told otherwise). With ``shuffle=False`` it is one ordered pass over every window
exactly once; the last batch may be smaller.

Read-ahead: a background thread prepares up to ``prefetch`` batches while the caller
uses the previous ones, so backend reads overlap with training. By default the backend
decides (see :func:`~episodata_core.protocols.default_prefetch`): in-memory gathers are
plain copies that a thread cannot overlap, file reads wait on I/O that it can. The thread refreshes
the segment index before each batch it draws, so episodes written meanwhile join the
stream within ``prefetch + 1`` batches. ``state_dict()`` records the position of the
next batch the *caller* gets, so prefetching never changes what a resumed stream
returns.
"""

from __future__ import annotations

import queue
import threading
import weakref
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from episodata_core import registry
from episodata_core.errors import ArgumentError, DatasetStateError, SchemaError
from episodata_core.protocols import default_prefetch
from episodata_core.sampling.index import (
    EpisodeFilter,
    Pad,
    SegmentIndex,
    WindowSpec,
    positive_int,
)
from episodata_core.sampling.read import read_windows

if TYPE_CHECKING:
    from collections.abc import Iterator

    from episodata_core._access import DatasetAccess
    from episodata_core.views import Batch

__all__ = ["SegmentStream"]

_END = object()


class SegmentStream:
    """An iterator of :class:`~episodata_core.views.Batch` objects over a dataset.

    Reads through the dataset's :class:`~episodata_core._access.DatasetAccess`.
    """

    def __init__(
        self,
        access: DatasetAccess,
        spec: WindowSpec,
        *,
        batch_size: int,
        seed: int | None,
        shuffle: bool,
        filter: EpisodeFilter | None,
        pad: Pad,
        sampler: Any,
        fields: tuple[str, ...],
        prefetch: int | None,
        rank: int,
        world_size: int,
    ) -> None:
        batch_size = positive_int("batch_size", batch_size)
        if not 0 <= rank < world_size:
            raise ArgumentError(f"rank must be in [0, world_size={world_size}), got {rank}")
        if not shuffle and sampler is not None:
            raise ArgumentError("sampler= only applies to shuffle=True streams")
        self._access = access
        self._spec = spec
        self._batch_size = batch_size
        self._shuffle = shuffle
        self._pad = pad
        self._fields = fields
        if prefetch is None:
            prefetch = default_prefetch(access.backend)
        self._prefetch = max(int(prefetch), 0)
        self._rank, self._world_size = rank, world_size
        self.index = SegmentIndex(access, spec.length, pad=pad, filter=filter)
        # each rank draws from its own child of the seed, so shards never coincide
        self._seed = np.random.SeedSequence(seed).spawn(world_size)[rank]
        self.sampler = self._make_sampler(sampler)
        self._cursor = 0  # ordered passes: next position of this rank's shard
        self._state: dict[str, Any] = self._capture()
        self._queue: queue.Queue[Any] | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        if not len(self.index):
            raise SchemaError(f"segment_stream: nothing to sample: {self.index.describe_empty()}")

    def _make_sampler(self, sampler: Any) -> Any:
        if sampler is None:
            sampler = "uniform"
        if isinstance(sampler, str):
            sampler_cls: Any = registry.get_sampler(sampler)
            return sampler_cls(seed=self._seed)
        if not callable(getattr(sampler, "sample", None)):
            raise ArgumentError(
                f"sampler must be a registered name or an object with sample(index, "
                f"batch_size), got {type(sampler).__name__}"
            )
        return sampler

    # -- the batches ----------------------------------------------------------------------

    def _positions(self) -> npt.NDArray[np.int64] | None:
        if self._shuffle:
            self.index.refresh()
            raw = self.sampler.sample(self.index, self._batch_size)
            source = f"sampler {type(self.sampler).__name__}.sample()"
            return self.index.check_positions(raw, source)
        shard = np.arange(self._rank, len(self.index), self._world_size, dtype=np.int64)
        if self._cursor >= len(shard):
            return None
        positions = shard[self._cursor : self._cursor + self._batch_size]
        self._cursor += len(positions)
        return positions

    def _produce(self) -> tuple[Batch, dict[str, Any]] | None:
        positions = self._positions()
        if positions is None:
            return None
        episodes, starts = self.index.locate(positions)
        batch = read_windows(
            self._access,
            episodes,
            starts,
            length=self._spec.length,
            pad=self._pad,
            fields=self._fields,
            split=self._spec.split,
        )
        return batch, self._capture()

    def _capture(self) -> dict[str, Any]:
        state: dict[str, Any] = {"cursor": self._cursor}
        state_dict = getattr(self.sampler, "state_dict", None) if self._shuffle else None
        if state_dict is not None:
            state["sampler"] = state_dict()
        return state

    def sample(self) -> Batch:
        """The next batch; raises :class:`StopIteration` at the end of an ordered pass."""
        produced = self._produce() if self._prefetch == 0 else self._next_prefetched()
        if produced is None:
            raise StopIteration
        batch, self._state = produced
        return batch

    def _next_prefetched(self) -> tuple[Batch, dict[str, Any]] | None:
        if self._thread is None:
            self._start()
        assert self._queue is not None
        item = self._queue.get()
        if item is _END:
            self._queue.put(_END)  # stay at the end for repeated calls
            return None
        if isinstance(item, BaseException):
            self._thread = None
            raise item
        return item  # type: ignore[no-any-return]

    def _start(self) -> None:
        self._stop.clear()
        self._queue = queue.Queue(maxsize=self._prefetch)
        self._thread = threading.Thread(
            target=_read_ahead,
            args=(weakref.ref(self), self._queue, self._stop),
            name="episodata-read-ahead",
            daemon=True,
        )
        self._thread.start()

    def __iter__(self) -> Iterator[Batch]:
        while True:
            try:
                yield self.sample()
            except StopIteration:
                return

    def __len__(self) -> int:
        """Batches in an ordered pass (``shuffle=False`` only)."""
        if self._shuffle:
            raise TypeError("a shuffled segment_stream is infinite and has no len()")
        shard = len(range(self._rank, len(self.index), self._world_size))
        return (shard + self._batch_size - 1) // self._batch_size

    # -- resumption -----------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Where the stream is: restoring it yields the same batches from here on."""
        if self._shuffle and "sampler" not in self._state:
            raise DatasetStateError(
                f"sampler {type(self.sampler).__name__} has no state_dict(); a stream "
                "with it cannot be saved and resumed"
            )
        return {"state": self._state, "index_windows": len(self.index)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from a :meth:`state_dict` of a stream with the same arguments."""
        self.close()
        inner = state["state"]
        self._cursor = int(inner["cursor"])
        if "sampler" in inner:
            self.sampler.load_state_dict(inner["sampler"])
        self._state = self._capture()

    def refresh(self) -> None:
        """Pick up new episodes now (the read-ahead thread also does before each batch)."""
        self.index.refresh()

    def close(self) -> None:
        """Stop the read-ahead thread; the stream can still be used (it restarts)."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
        # the thread drew batches the caller never got: rewind the sampler to the last
        # one handed out so the next sample() continues exactly from there
        self._cursor = int(self._state["cursor"])
        if "sampler" in self._state:
            self.sampler.load_state_dict(self._state["sampler"])

    def __del__(self) -> None:
        stop = getattr(self, "_stop", None)  # absent when __init__ raised early
        if stop is not None:
            stop.set()


def _read_ahead(
    ref: weakref.ref[SegmentStream], out: queue.Queue[Any], stop: threading.Event
) -> None:
    """The read-ahead loop: prepare batches until stopped or the stream is gone.

    It holds the stream only while preparing a batch, so a stream dropped without
    :meth:`SegmentStream.close` is still collected, and its ``__del__`` stops the thread.
    """
    try:
        while not stop.is_set():
            stream = ref()
            if stream is None:
                return
            produced = stream._produce()
            del stream
            item: Any = _END if produced is None else produced
            while not stop.is_set():
                try:
                    out.put(item, timeout=0.1)
                    break
                except queue.Full:
                    continue
            if produced is None:
                return
    except BaseException as err:  # noqa: BLE001 (handed to the consumer, re-raised there)
        out.put(err)
