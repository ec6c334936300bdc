"""Turn window positions into a :class:`~episodata_core.views.Batch` with one backend read.

All bookkeeping is vectorized over the batch: a window's rows, padding and flags come
from array arithmetic on the episode table, never from a loop per segment.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from episodata_core.protocols import GatherRequest
from episodata_core.views import Batch, Flags, Transition

if TYPE_CHECKING:
    from episodata_core._access import DatasetAccess
    from episodata_core.protocols import EpisodeTable
    from episodata_core.sampling.index import Pad

__all__ = ["read_transitions", "read_windows"]


def read_windows(
    access: DatasetAccess,
    episodes: npt.NDArray[np.int64],
    starts: npt.NDArray[np.int64],
    *,
    length: int,
    pad: Pad,
    fields: tuple[str, ...],
    split: int | None = None,
) -> Batch:
    """Read ``[B]`` windows of ``length`` transitions starting at ``starts`` (transitions).

    Windows of episodes shorter than ``length`` are padded with zeros at the end
    (``pad="suffix"``) or the beginning (``"prefix"``); ``mask`` marks real transitions.
    """
    with access.lock:
        backend = access.backend
        # one snapshot for the window bounds, the flags and the rows: a writer cannot
        # grow or finalize an episode in between
        table = backend.episode_table()
        lengths = table.length[episodes].astype(np.int64)
        short = lengths < length
        counts = np.where(short, lengths + 1, length + 1)
        offsets = np.where(short, length - lengths, 0) if pad == "prefix" else np.zeros_like(counts)
        real = counts - 1  # real transitions in each window
        # flags live on episodes' last transitions: look up only the windows reaching one
        (ends,) = np.nonzero((starts + real == lengths) & (real > 0))
        end_flags = table_flags(table, episodes[ends])
        request = GatherRequest(
            episodes=episodes,
            starts=starts,
            counts=counts,
            offsets=offsets,
            num_rows=length + 1,
            fields=fields,
        )
        buffers = backend.gather_rows(request)
    flags = _flags(ends, end_flags, offsets, real, length)
    return Batch(backend.schema, buffers, flags, split=split)


def table_flags(
    table: EpisodeTable, episodes: npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
    """Episode-level ``terminated`` and ``truncated`` of finalized episodes, else False."""
    finalized = ~np.asarray(table.ongoing[episodes], dtype=bool)
    terminated = np.asarray(table.terminated[episodes], dtype=bool) & finalized
    truncated = np.asarray(table.truncated[episodes], dtype=bool) & finalized
    return terminated, truncated


def _flags(
    ends: npt.NDArray[np.intp],
    end_flags: tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]],
    offsets: npt.NDArray[np.int64],
    real: npt.NDArray[np.int64],
    length: int,
) -> Flags:
    """Per-transition flags: set only on the last transition of windows in ``ends``."""
    steps = np.arange(length)
    mask = (steps >= offsets[:, None]) & (steps < (offsets + real)[:, None])
    last = (offsets + real - 1)[ends]  # those windows' last real transition
    terminated = np.zeros((len(real), length), dtype=bool)
    truncated = np.zeros((len(real), length), dtype=bool)
    terminated[ends, last] = end_flags[0]
    truncated[ends, last] = end_flags[1]
    return Flags(terminated, truncated, mask)


def read_transitions(
    access: DatasetAccess,
    episodes: npt.NDArray[np.int64],
    starts: npt.NDArray[np.int64],
    fields: tuple[str, ...],
    *,
    table: EpisodeTable | None = None,
) -> Transition:
    """Read ``[B]`` single transitions (time axis removed); never padded.

    The same result as a window of length 1 through :func:`read_windows`, without its
    padding and per-step flag arithmetic: this is the per-call cost of a replay buffer.
    ``table`` is a snapshot the caller took under ``access.lock``, still held.
    """
    size = len(episodes)
    request = GatherRequest(
        episodes=episodes,
        starts=starts,
        counts=np.full(size, 2, dtype=np.int64),
        offsets=np.zeros(size, dtype=np.int64),
        num_rows=2,
        fields=fields,
    )
    terminated = np.zeros(size, dtype=bool)
    truncated = np.zeros(size, dtype=bool)
    with access.lock:
        backend = access.backend
        if table is None:
            table = backend.episode_table()
        # one snapshot for flags and rows: a writer cannot move an episode in between
        (last,) = np.nonzero(starts + 1 == table.length[episodes])
        # flags live on episodes' last transitions only: look up those few, not all B
        terminated[last], truncated[last] = table_flags(table, episodes[last])
        buffers = backend.gather_rows(request)
    flags = Flags(terminated, truncated, np.ones(size, dtype=bool))
    return Transition(backend.schema, buffers, flags, batched=True)


def stack_segments(segments: list[Any]) -> tuple[dict[str, npt.NDArray[Any]], Flags]:
    """Stack single segments' buffers and flags along a new batch axis (copies)."""
    keys = segments[0].buffers.keys()
    buffers = {key: np.stack([s.buffers[key] for s in segments]) for key in keys}
    flags = Flags(
        np.stack([s.terminated for s in segments]),
        np.stack([s.truncated for s in segments]),
        np.stack([s.mask for s in segments]),
    )
    return buffers, flags
