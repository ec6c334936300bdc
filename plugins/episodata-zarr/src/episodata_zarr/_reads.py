"""Reads of the zarr backend: one window (``read_rows``) or a whole batch (``gather_rows``).

A batch issues every read of every field before it waits on any, so TensorStore decodes
chunks on all its threads while NumPy assembles the fields that are already done.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from episodata_core.errors import DatasetStateError, EpisodataError, StorageError
from episodata_core.protocols import GatherRequest
from episodata_zarr._gather import ReadPlan, plan_reads

if TYPE_CHECKING:
    from collections.abc import Sequence

    import numpy.typing as npt

    from episodata_core.protocols import Rows
    from episodata_zarr._forked import ForkedReader
    from episodata_zarr._impl import ZarrStore

__all__ = ["gather_rows", "read_rows", "result"]


def result(future: Any, what: str) -> Any:
    """Wait for a TensorStore future; its errors become :class:`EpisodataError`s."""
    try:
        return future.result()
    except (ValueError, OSError) as err:
        text = str(err)
        if "CURL error" in text or "retry attempts failed" in text:
            # object storage that cannot be reached (or keeps failing): one clear line
            first = text.splitlines()[0] if text else type(err).__name__
            raise StorageError(
                f"{what}: the object store cannot be reached or keeps failing, after the "
                f"retries of the storage options ({first}); nothing more was committed"
            ) from None
        raise EpisodataError(f"{what}: {err}") from err


def _ongoing(store: ZarrStore, episode: int) -> Any:
    """The rows of an ongoing episode; on object storage, only its writer has them."""
    state = store.tail.ongoing.get(episode)
    if state is None and store.remote is not None:
        raise DatasetStateError(
            f"episode {episode} of {store.location!r} is ongoing: on object storage its "
            "rows stay in the writer's local staging log until it ends and the writer "
            "flushes; refresh() and read it then"
        )
    if state is None:
        raise DatasetStateError(f"episode {episode} is ongoing and not in the episode log")
    return state


def _in_memory(store: ZarrStore, base: int) -> bool:
    """Whether an episode starting at row ``base`` (-1: ongoing) is read from the tail."""
    return base < 0 or store.tail.holds(base)


def read_rows(store: ZarrStore, episode: int, start: int, stop: int, fields: Sequence[str]) -> Rows:
    """Rows ``[start, stop)`` of one episode: from the tail, or one read per field."""
    base = int(store.index.row_start.data[episode])
    if base < 0:
        state = _ongoing(store, episode)
        out = {}
        for key in fields:
            view = state.view(key)[start:stop]
            view.flags.writeable = False
            out[key] = view
        return out
    if store.tail.holds(base):
        return {key: store.tail.window(key, base + start, base + stop) for key in fields}
    helper = store.forked()
    if helper is not None:
        return helper.read_rows(episode, start, stop, fields)
    arrays = store.arrays
    for key in fields:
        arrays.checked.check_ranges(
            store.layouts[key].path,
            arrays.data[key],
            np.array([base + start]),
            np.array([base + stop]),
        )
    futures = {key: arrays.data[key][base + start : base + stop].read() for key in fields}
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
    folded = np.flatnonzero(real & (base >= 0) & (base < store.tail.base))
    starts = base[folded] + request.starts[folded]
    counts = request.counts[folded]
    offsets = request.offsets[folded]
    # issue every field's reads before waiting on any: TensorStore decodes meanwhile
    pending = [_issue(store, key, starts, counts) for key in request.fields]
    _gather_memory(store, request, base, np.flatnonzero(real & _tail_mask(store, base)), out)
    for key, plan, futures in pending:
        decode = store.layouts[key].decode
        parts = [decode(result(f, f"batch read of field {key!r}")) for f in futures]
        if plan is None:
            _scatter_rows(out[key], parts[0], folded, starts, counts, offsets)
        else:
            _copy_windows(out[key], parts, plan, folded, starts, counts, offsets)
    return out


def _tail_mask(store: ZarrStore, base: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
    """Which episodes (by first row, -1 ongoing) the tail holds."""
    return (base < 0) | (base >= store.tail.base)


# Measured costs (ns): a read per merged range costs ~35 us of TensorStore overhead; one
# index-array read of the needed rows ~100 us plus ~40 per row and ~6 per element. Many
# short windows of narrow fields (transitions of state vectors) favour the index-array
# read, by 4-8x; segments of images favour ranges, by as much.
_RANGE_NS, _INDEX_NS, _ROW_NS, _ELEMENT_NS = 35_000, 100_000, 40, 6


def _issue(
    store: ZarrStore, key: str, starts: npt.NDArray[np.int64], counts: npt.NDArray[np.int64]
) -> tuple[str, ReadPlan | None, list[Any]]:
    """Start the reads of one field: merged ranges, or one read of the needed rows."""
    arrays = store.arrays
    handle = arrays.data[key]
    plan = plan_reads(starts, counts, arrays.chunks[key])
    width = int(np.prod(handle.shape[1:], dtype=np.int64))
    by_index = _INDEX_NS + int(counts.sum()) * (_ROW_NS + _ELEMENT_NS * width)
    if len(plan) > 1 and by_index < _RANGE_NS * len(plan):
        rows = np.unique(_window_rows(starts, counts)[0])
        arrays.checked.check_rows(store.layouts[key].path, handle, rows)
        # one read op: TensorStore still reads and decodes each chunk once
        return key, None, [handle.oindex[rows].read()]
    arrays.checked.check_ranges(store.layouts[key].path, handle, plan.lo, plan.hi)
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
    """A forked child's batch: the helper reads the arrays; inherited memory the tail."""
    local = _tail_mask(store, base) & (request.counts > 0)
    if not local.any():
        # the usual case, folded episodes only: the helper's answer is the batch, no copy
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
    # the tail lives in memory, which the fork inherited
    _gather_memory(store, request, base, np.flatnonzero(local), out)
    return out


def _gather_memory(
    store: ZarrStore,
    request: GatherRequest,
    base: npt.NDArray[np.int64],
    selected: npt.NDArray[np.intp],
    out: dict[str, npt.NDArray[Any]],
) -> None:
    """Windows of the tail: logged episodes with one fancy index, ongoing ones one by one."""
    if not len(selected):
        return
    logged = selected[base[selected] >= 0]
    if len(logged):
        starts = base[logged] + request.starts[logged]
        counts = request.counts[logged]
        rows, window, within = _window_rows(starts, counts)
        for key in request.fields:
            out[key][logged[window], request.offsets[logged][window] + within] = store.tail.take(
                key, rows
            )
    for b in selected[base[selected] < 0].tolist():
        episode = int(request.episodes[b])
        start, count = int(request.starts[b]), int(request.counts[b])
        offset = int(request.offsets[b])
        state = _ongoing(store, episode)
        for key in request.fields:
            target = out[key]
            if key not in state.data:
                target[b] = 0
            else:
                target[b, offset : offset + count] = state.view(key)[start : start + count]
