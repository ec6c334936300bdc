"""Reads of the zarr backend: one window (``read_rows``) or a whole batch (``gather_rows``).

A batch issues every read of every field before it waits on any, so TensorStore decodes
chunks on all its threads while NumPy assembles the fields that are already done.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from episodata_core.errors import DatasetStateError, EpisodataError
from episodata_core.protocols import GatherRequest
from episodata_zarr._gather import ReadPlan, plan_reads

if TYPE_CHECKING:
    from collections.abc import Sequence

    import numpy.typing as npt

    from episodata_core.protocols import Rows
    from episodata_zarr._forked import ForkedReader
    from episodata_zarr._impl import ZarrStore

__all__ = ["SpillGoneError", "gather_rows", "read_rows", "result"]


class SpillGoneError(DatasetStateError):
    """An ongoing episode's flushed rows were removed: the writer finalized it since."""


def result(future: Any, what: str) -> Any:
    """Wait for a TensorStore future; its errors become :class:`EpisodataError`s."""
    try:
        return future.result()
    except (ValueError, OSError) as err:
        raise EpisodataError(f"{what}: {err}") from err


def _spill_rows(store: ZarrStore, episode: int, key: str, start: int, stop: int) -> Any:
    """A future of rows of a flushed ongoing episode (a reader's view of it)."""
    try:
        handle = store.spill_store(episode, key)
    except EpisodataError as err:
        if "NOT_FOUND" in str(err):
            raise SpillGoneError(str(err)) from err
        raise
    return handle[start:stop].read()


def _wait_spill(future: Any, what: str) -> Any:
    try:
        return result(future, what)
    except EpisodataError as err:
        if "NOT_FOUND" in str(err):
            raise SpillGoneError(str(err)) from err
        raise


def read_rows(store: ZarrStore, episode: int, start: int, stop: int, fields: Sequence[str]) -> Rows:
    """Rows ``[start, stop)`` of one episode, one read per field."""
    base = int(store.index.row_start.data[episode])
    helper = store.forked()
    if helper is not None and not (base < 0 and store.writable):
        return helper.read_rows(episode, start, stop, fields)
    if base < 0 and store.writable:
        buffers = store.ongoing[episode].buffers
        out = {}
        for key in fields:
            view = buffers[key].view()[start:stop]
            view.flags.writeable = False
            out[key] = view
        return out
    if base < 0:
        futures = {key: _spill_rows(store, episode, key, start, stop) for key in fields}
        return {
            key: store.layouts[key].decode(
                _wait_spill(f, f"ongoing episode {episode}, field {key!r}")
            )
            for key, f in futures.items()
        }
    for key in fields:
        store.checked.check_ranges(
            store.layouts[key].path,
            store.data[key],
            np.array([base + start]),
            np.array([base + stop]),
        )
    futures = {key: store.data[key][base + start : base + stop].read() for key in fields}
    return {
        key: store.layouts[key].decode(result(f, f"episode {episode}, field {key!r}"))
        for key, f in futures.items()
    }


def gather_rows(store: ZarrStore, request: GatherRequest) -> Rows:
    """Read a batch of windows: per field, each chunk is read and decoded once."""
    size, num_rows = len(request), request.num_rows
    dense = request.is_dense
    out: dict[str, npt.NDArray[Any]] = {}
    for key in request.fields:
        layout = store.layouts[key]
        # padding must be zeros; a dense batch overwrites every row anyway
        make = np.empty if dense else np.zeros
        out[key] = make((size, num_rows, *layout.shape), dtype=layout.dtype)
    if not size:
        return out
    base = store.index.row_start.view()[request.episodes]
    real = request.counts > 0
    helper = store.forked()
    if helper is not None:
        return _gather_forked(store, helper, request, base, out)
    finalized = np.flatnonzero(real & (base >= 0))
    starts = base[finalized] + request.starts[finalized]
    counts = request.counts[finalized]
    offsets = request.offsets[finalized]
    # issue every field's reads before waiting on any: TensorStore decodes meanwhile
    pending = [_issue(store, key, starts, counts) for key in request.fields]
    _gather_ongoing(store, request, np.flatnonzero(real & (base < 0)), out)
    for key, plan, futures in pending:
        decode = store.layouts[key].decode
        parts = [decode(result(f, f"batch read of field {key!r}")) for f in futures]
        if plan is None:
            _scatter_rows(out[key], parts[0], finalized, starts, counts, offsets)
        else:
            _copy_windows(out[key], parts, plan, finalized, starts, counts, offsets)
    return out


# Measured costs (ns): a read per merged range costs ~35 us of TensorStore overhead; one
# index-array read of the needed rows ~100 us plus ~40 per row and ~6 per element. Many
# short windows of narrow fields (transitions of state vectors) favour the index-array
# read, by 4-8x; segments of images favour ranges, by as much.
_RANGE_NS, _INDEX_NS, _ROW_NS, _ELEMENT_NS = 35_000, 100_000, 40, 6


def _issue(
    store: ZarrStore, key: str, starts: npt.NDArray[np.int64], counts: npt.NDArray[np.int64]
) -> tuple[str, ReadPlan | None, list[Any]]:
    """Start the reads of one field: merged ranges, or one read of the needed rows."""
    handle = store.data[key]
    plan = plan_reads(starts, counts, store.chunks[key])
    width = int(np.prod(handle.shape[1:], dtype=np.int64))
    by_index = _INDEX_NS + int(counts.sum()) * (_ROW_NS + _ELEMENT_NS * width)
    if len(plan) > 1 and by_index < _RANGE_NS * len(plan):
        rows = np.unique(_window_rows(starts, counts)[0])
        store.checked.check_rows(store.layouts[key].path, handle, rows)
        # one read op: TensorStore still reads and decodes each chunk once
        return key, None, [handle.oindex[rows].read()]
    store.checked.check_ranges(store.layouts[key].path, handle, plan.lo, plan.hi)
    bounds = zip(plan.lo.tolist(), plan.hi.tolist(), strict=True)
    return key, plan, [handle[lo:hi].read() for lo, hi in bounds]


def _window_rows(
    starts: npt.NDArray[np.int64], counts: npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.intp], npt.NDArray[np.int64]]:
    """Every row of every window: ``(rows, window of each, position within it)``."""
    window = np.repeat(np.arange(len(starts)), counts)
    within = np.arange(len(window)) - np.repeat(np.cumsum(counts) - counts, counts)
    return starts[window] + within, window, within


def _scatter_rows(
    target: npt.NDArray[Any],
    rows_read: npt.NDArray[Any],
    batch_rows: npt.NDArray[np.intp],
    starts: npt.NDArray[np.int64],
    counts: npt.NDArray[np.int64],
    offsets: npt.NDArray[np.int64],
) -> None:
    """Place sorted unique rows into ``[B, num_rows, ...]``, vectorized."""
    rows, window, within = _window_rows(starts, counts)
    position = np.searchsorted(np.unique(rows), rows)
    target[batch_rows[window], offsets[window] + within] = rows_read[position]


def _copy_windows(
    target: npt.NDArray[Any],
    parts: list[npt.NDArray[Any]],
    plan: ReadPlan,
    batch_rows: npt.NDArray[np.intp],
    starts: npt.NDArray[np.int64],
    counts: npt.NDArray[np.int64],
    offsets: npt.NDArray[np.int64],
) -> None:
    """Copy each window out of its merged read: one slice copy per window."""
    within = (starts - plan.lo[plan.read]).tolist()
    for read, b, offset, first, count in zip(
        plan.read.tolist(),
        batch_rows.tolist(),
        offsets.tolist(),
        within,
        counts.tolist(),
        strict=True,
    ):
        target[b, offset : offset + count] = parts[read][first : first + count]


def _gather_forked(
    store: ZarrStore,
    helper: ForkedReader,
    request: GatherRequest,
    base: npt.NDArray[np.int64],
    out: dict[str, npt.NDArray[Any]],
) -> Rows:
    """A forked child's batch: the helper reads stored rows; inherited memory the rest."""
    local = (base < 0) & (request.counts > 0) & store.writable
    if not local.any():
        # the usual case, a reader: the helper's answer is the whole batch, no copy
        return helper.gather_rows(request)
    remote = np.flatnonzero(~local)
    if len(remote):
        part = GatherRequest(
            episodes=request.episodes[remote],
            starts=request.starts[remote],
            counts=request.counts[remote],
            offsets=request.offsets[remote],
            num_rows=request.num_rows,
            fields=request.fields,
        )
        rows = helper.gather_rows(part)
        for key, target in out.items():
            target[remote] = rows[key]
    # a writer's unflushed ongoing rows exist only in memory, which the fork inherited
    _gather_ongoing(store, request, np.flatnonzero(local), out)
    return out


def _gather_ongoing(
    store: ZarrStore,
    request: GatherRequest,
    selected: npt.NDArray[np.intp],
    out: dict[str, npt.NDArray[Any]],
) -> None:
    """Windows of ongoing episodes: from the writer's memory or a reader's spill arrays."""
    if not len(selected):
        return
    reads = []
    for b in selected.tolist():
        episode = int(request.episodes[b])
        start, count = int(request.starts[b]), int(request.counts[b])
        offset = int(request.offsets[b])
        present = store.present_keys(episode)
        for key in request.fields:
            target = out[key]
            if key not in present:
                target[b] = 0
            elif store.writable:
                view = store.ongoing[episode].buffers[key].view()
                target[b, offset : offset + count] = view[start : start + count]
            else:
                future = _spill_rows(store, episode, key, start, start + count)
                reads.append((target, b, offset, count, key, episode, future))
    for target, b, offset, count, key, episode, future in reads:
        rows = _wait_spill(future, f"ongoing episode {episode}, field {key!r}")
        target[b, offset : offset + count] = store.layouts[key].decode(rows)
