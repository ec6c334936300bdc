"""The segment index: every valid window of every episode, addressed by one integer.

Episode ``e`` with T transitions contributes ``T - L + 1`` windows when ``T >= L`` and,
unless ``pad=None``, one padded window when ``0 < T < L`` (data-model.md §5). Window
``p`` of the whole index belongs to the episode whose cumulative count first exceeds
``p``: finding it is a binary search, so sampling cost grows with ``log(episodes)``.

The index follows a growing dataset incrementally: a refresh only revisits new episodes
and those that were ongoing, and re-sums counts from the first one that changed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import numpy.typing as npt

from episodata_core._access import DatasetAccess
from episodata_core.errors import ArgumentError, SchemaError

if TYPE_CHECKING:
    from episodata_core.dataset import Dataset
    from episodata_core.episode import Episode
    from episodata_core.protocols import EpisodeTable

__all__ = ["Pad", "SegmentIndex", "WindowSpec"]

Pad = Literal["suffix", "prefix"] | None
EpisodeFilter = Callable[["Episode"], Any]


@dataclass(frozen=True)
class WindowSpec:
    """How long each segment is, and where context ends and target begins."""

    length: int
    split: int | None = None

    @classmethod
    def from_lengths(
        cls,
        sequence_length: int | None,
        context_length: int | None,
        target_length: int | None,
    ) -> WindowSpec:
        """Validate the length arguments of ``segments()`` and ``segment_stream()``."""
        if sequence_length is not None:
            if context_length is not None or target_length is not None:
                raise ArgumentError(
                    "give either sequence_length or context_length + target_length, not both"
                )
            return cls(positive_int("sequence_length", sequence_length))
        if context_length is None or target_length is None:
            raise ArgumentError(
                "segment length missing: pass sequence_length=L, or context_length=C and "
                "target_length=K for context/target batches"
            )
        context = positive_int("context_length", context_length)
        target = positive_int("target_length", target_length)
        return cls(context + target, split=context)


def positive_int(name: str, value: Any) -> int:
    """``value`` as an int, or a clear error if it is not a positive integer."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise ArgumentError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def check_pad(pad: Any) -> Pad:
    """Validate ``pad=``."""
    if pad not in ("suffix", "prefix", None):
        raise ArgumentError(
            f"pad must be 'suffix' (zeros after), 'prefix' (zeros before) or None (skip "
            f"short episodes), got {pad!r}"
        )
    return pad  # type: ignore[no-any-return]


class SegmentIndex:
    """Windows of ``length`` transitions over the episodes of a dataset.

    ``len(index)`` is the number of windows. :meth:`locate` maps window positions to
    ``(episode, start)`` pairs; ``start`` counts transitions. Made over a dataset or the
    access object of one (what the core's streams pass).
    """

    def __init__(
        self,
        dataset: Dataset | DatasetAccess,
        length: int,
        *,
        pad: Pad = "suffix",
        filter: EpisodeFilter | None = None,
    ) -> None:
        self._source = dataset
        self.access = dataset if isinstance(dataset, DatasetAccess) else dataset.access
        self.length = length
        self.pad = pad
        self._filter = filter
        self._windows = np.zeros(0, dtype=np.int64)  # per episode id
        self._cumulative = np.zeros(0, dtype=np.int64)  # inclusive running sum
        # exclusive running sum: locate searches it and then reads the same entry back,
        # one cache miss per window instead of two at 10^6 episodes
        self._first = np.zeros(0, dtype=np.int64)
        self._watch = np.zeros(0, dtype=np.int64)  # ongoing at the last refresh
        self.version = 0
        self.refresh()

    def use(self, dataset: Dataset) -> None:
        """Read through ``dataset`` from now on (a DataLoader worker's own handle)."""
        self._source = dataset
        self.access = dataset.access

    def __getstate__(self) -> dict[str, Any]:
        # the access object holds a lock and a live backend: an index made over a
        # dataset travels with the dataset (by location) and reads through its access
        return {key: value for key, value in self.__dict__.items() if key != "access"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        source = self._source
        self.access = source if isinstance(source, DatasetAccess) else source.access

    def __len__(self) -> int:
        return int(self._cumulative[-1]) if len(self._cumulative) else 0

    @property
    def num_episodes(self) -> int:
        """Episodes the index has seen (eligible or not)."""
        return len(self._windows)

    @property
    def windows_per_episode(self) -> npt.NDArray[np.int64]:
        """``[num_episodes]`` number of windows of each episode id (read-only view)."""
        view = self._windows.view()
        view.flags.writeable = False
        return view

    @property
    def first_position(self) -> npt.NDArray[np.int64]:
        """``[num_episodes]`` position of each episode's first window (read-only view)."""
        view = self._first.view()
        view.flags.writeable = False
        return view

    def _count(self, lengths: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        full = np.maximum(lengths - self.length + 1, 0)
        if self.pad is None:
            return full
        return np.where((lengths > 0) & (lengths < self.length), 1, full)

    def refresh(self) -> bool:
        """Catch up with episodes added or grown since the last refresh.

        Returns whether anything changed. Costs O(new + ongoing episodes), plus a
        re-summation from the first changed episode onwards.
        """
        access = self.access
        # held through refresh_from: the filter reads episodes of this very snapshot
        with access.lock:
            return self.refresh_from(access.backend.episode_table())

    def refresh_from(self, table: EpisodeTable) -> bool:
        """:meth:`refresh` from a snapshot the caller took under the access lock.

        For a caller that reads rows with the same snapshot (one table per batch).
        """
        total = len(table)
        known = len(self._windows)
        if total == known and not len(self._watch):
            return False  # the common case of a sampling loop: nothing new, nothing growing
        changed = np.concatenate([self._watch, np.arange(known, total, dtype=np.int64)])
        if not len(changed):
            return False
        windows = np.zeros(total, dtype=np.int64)
        windows[:known] = self._windows
        counts = self._count(table.length[changed].astype(np.int64))
        if self._filter is not None:
            from episodata_core.episode import Episode

            keep = np.array(
                [bool(self._filter(Episode(self.access, int(e)))) for e in changed], dtype=bool
            )
            counts = np.where(keep, counts, 0)
        windows[changed] = counts
        first = int(changed.min())
        if known == total and np.array_equal(windows[changed], self._windows[changed]):
            self._watch = changed[np.asarray(table.ongoing[changed], dtype=bool)]
            return False
        cumulative = np.empty(total, dtype=np.int64)
        cumulative[:first] = self._cumulative[:first]
        base = cumulative[first - 1] if first else 0
        cumulative[first:] = base + np.cumsum(windows[first:])
        self._windows, self._cumulative = windows, cumulative
        self._first = cumulative - windows
        self._watch = changed[np.asarray(table.ongoing[changed], dtype=bool)]
        self.version += 1
        return True

    def locate(
        self, positions: npt.NDArray[np.integer[Any]]
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """``(episodes, starts)`` of the windows at ``positions`` (``[B]`` each)."""
        # the last episode whose first window is at or before the position: episodes
        # without windows share their successor's first position and are never chosen
        episodes = np.searchsorted(self._first, positions, side="right") - 1
        starts = positions - self._first[episodes]
        return episodes.astype(np.int64, copy=False), starts.astype(np.int64, copy=False)

    def check_positions(self, positions: Any, source: str) -> npt.NDArray[np.int64]:
        """Validate what a sampler returned: integers in ``[0, len(index))``."""
        array = np.asarray(positions)
        if array.ndim != 1 or array.dtype.kind not in "iu":
            raise SchemaError(
                f"{source} must return a 1-D array of integer window positions, got "
                f"{array.dtype} of shape {array.shape}"
            )
        size = len(self)
        if array.size and (array.min() < 0 or array.max() >= size):
            bad = array[(array < 0) | (array >= size)][0]
            raise SchemaError(
                f"{source} returned position {int(bad)}, outside [0, {size}) (the index has "
                f"{size} windows)"
            )
        return array.astype(np.int64, copy=False)

    def describe_empty(self) -> str:
        """Why the index has no windows, with the fix."""
        table = self.access.snapshot()
        if not len(table):
            return "the dataset has no episodes yet"
        longest = int(table.length.max())
        unfiltered = self._count(table.length.astype(np.int64))
        if self._filter is not None and not self._windows.any() and unfiltered.any():
            return "the filter excludes every episode"
        if longest == 0:
            # before the pad=None advice: padding cannot help, and sample_transitions
            # (length 1, pad=None) has no pad= to pass
            return "no episode has any transitions yet (every episode is empty)"
        if self.pad is None and longest < self.length:
            return (
                f"no episode has {self.length} transitions (the longest has {longest}) and "
                "pad=None skips shorter ones; pass pad='suffix' or a shorter length"
            )
        return f"no window of {self.length} transitions (the longest episode has {longest})"
