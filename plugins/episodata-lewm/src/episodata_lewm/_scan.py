"""The validation pre-pass over the small, non-image columns (rules 6-11 of §2.8).

It walks the same windows as the write pass; every computation is over a whole window
of rows, with a ``[rows]`` map from row to selected episode. It also gathers what the
write pass needs per episode: the last-row flags, the index value and the ``id``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import numpy.typing as npt

    from episodata_lewm._layout import Layout
    from episodata_lewm._windows import Window

__all__ = ["Scan", "scan_rows", "string_widths"]


@dataclass
class Scan:
    """Per selected episode (``[S]`` arrays) and per rule findings of the pre-pass."""

    size: int
    first_nan_all: npt.NDArray[np.bool_] = field(init=False)
    first_nan_any: npt.NDArray[np.bool_] = field(init=False)
    last_nan_all: npt.NDArray[np.bool_] = field(init=False)
    last_nan_any: npt.NDArray[np.bool_] = field(init=False)
    last_finite: npt.NDArray[np.bool_] = field(init=False)
    reward_row0_nan: npt.NDArray[np.bool_] = field(init=False)
    flags_last: dict[str, npt.NDArray[np.bool_]] = field(default_factory=dict)
    firsts: dict[str, npt.NDArray[Any]] = field(default_factory=dict)
    """First-row value per episode of the index, ``id`` and episode-metadata columns."""
    inner_nan_rows: list[int] = field(default_factory=list)
    inner_nan_count: int = 0
    bad_rows: dict[str, list[int]] = field(default_factory=dict)
    """Rule violations by kind: ``"flag values <col>"``, ``"inner <col>"``, ``"step_idx"``,
    ``"varies <col>"``, and ``"step_idx+1"`` (not numbered from 1, as 0.1.1 does); up to 5
    global rows each, counted in ``bad_counts``."""
    bad_counts: dict[str, int] = field(default_factory=dict)
    non_finite: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("first_nan_all", "first_nan_any", "last_nan_all", "last_nan_any"):
            setattr(self, name, np.zeros(self.size, dtype=bool))
        self.last_finite = np.ones(self.size, dtype=bool)
        self.reward_row0_nan = np.ones(self.size, dtype=bool)

    def bad(self, kind: str, rows: npt.NDArray[np.int64]) -> None:
        """Record violating global rows of one kind."""
        if rows.size:
            kept = self.bad_rows.setdefault(kind, [])
            kept.extend(int(r) for r in rows[: 5 - len(kept)])
            self.bad_counts[kind] = self.bad_counts.get(kind, 0) + int(rows.size)


def _read(handle: Any, name: str, a: int, b: int, width: int | None = None) -> Any:
    dataset = handle[name]
    if width is not None or dataset.dtype.kind == "O":
        return np.asarray(dataset.asstr()[a:b], dtype=f"<U{width}" if width else str)
    return np.asarray(dataset[a:b])


def _row_map(
    window: Window, offsets: npt.NDArray[np.int64], lengths: npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """``(episode ordinal, local row, episode length)`` of every row of the window."""
    ordinals = window.ordinals
    starts = np.maximum(offsets[ordinals], window.start)
    stops = np.minimum(offsets[ordinals] + lengths[ordinals], window.stop)
    episode = np.repeat(ordinals, stops - starts)
    local = np.arange(window.start, window.stop, dtype=np.int64) - offsets[episode]
    return episode, local, lengths[episode]


def string_widths(
    handle: Any, layout: Layout, windows: list[Window], names: list[str]
) -> dict[str, int]:
    """The longest string of each vlen column over the windows (at least 1)."""
    widths = dict.fromkeys(names, 1)
    for window in windows:
        for name in names:
            values = _read(handle, name, window.start, window.stop)
            widths[name] = max(widths[name], values.dtype.itemsize // 4)
    return widths


def scan_rows(
    handle: Any,
    layout: Layout,
    windows: list[Window],
    offsets: npt.NDArray[np.int64],
    lengths: npt.NDArray[np.int64],
    *,
    full: bool,
) -> Scan:
    """Run the pre-pass; ``full=False`` only gathers what the write pass needs."""
    scan = Scan(int(offsets.shape[0]))
    reward = "reward" if layout.roles.get("reward") == "reward" else None
    firsts = [n for n in (layout.index_column, layout.id_column) if n]
    firsts += layout.metadata_columns
    checked = [n for n in (layout.index_column, *layout.metadata_columns) if n]
    finite = [
        name
        for name, role in layout.roles.items()
        if full and role == "observation" and not layout.columns[name].image
    ]
    finite = [n for n in finite if layout.columns[n].dtype.kind in "fc"]
    for name in layout.flags:
        scan.flags_last[name] = np.zeros(scan.size, dtype=bool)
    for name in firsts:
        dataset = handle[name]
        shape = (scan.size, *dataset.shape[1:])
        scan.firsts[name] = np.zeros(shape, dtype=_first_dtype(dataset.dtype))
    for window in windows:
        episode, local, length = _row_map(window, offsets, lengths)
        is_first, is_last = local == 0, local == length - 1
        a, b = window.start, window.stop
        _scan_action(scan, _read(handle, "action", a, b), episode, is_first, is_last, a)
        if reward is not None:
            values = _read(handle, reward, a, b).reshape(b - a)
            if values.dtype.kind in "fc":  # integer rewards cannot mark the reset row
                scan.reward_row0_nan[episode[is_first]] = np.isnan(values[is_first])
        for name in layout.flags:
            values = _read(handle, name, a, b).reshape(b - a)
            if values.dtype.kind != "b":
                scan.bad(f"flag values {name}", a + np.flatnonzero((values != 0) & (values != 1)))
            raised = values != 0
            scan.flags_last[name][episode[is_last]] = raised[is_last]
            scan.bad(f"inner {name}", a + np.flatnonzero(raised & ~is_last))
        for name in firsts:
            values = _read(handle, name, a, b)
            scan.firsts[name][episode[is_first]] = values[is_first]
            if name in checked and full:
                varies = values != scan.firsts[name][episode]
                varies = varies.reshape(b - a, -1).any(axis=1)
                scan.bad(f"varies {name}", a + np.flatnonzero(varies))
        if full and "step_idx" in layout.roles:
            values = _read(handle, "step_idx", a, b).reshape(b - a, -1)
            scan.bad("step_idx", a + np.flatnonzero((values != local[:, None]).any(axis=1)))
            # stable-worldmodel 0.1.1 numbers its rows from the first step (no reset row)
            from_one = (values != local[:, None] + 1).any(axis=1)
            scan.bad("step_idx+1", a + np.flatnonzero(from_one))
        for name in finite:
            values = _read(handle, name, a, b)
            count = int(values.size - np.count_nonzero(np.isfinite(values)))
            scan.non_finite[name] = scan.non_finite.get(name, 0) + count
    return scan


def _first_dtype(dtype: np.dtype[Any]) -> Any:
    return object if dtype.kind in "OSU" else dtype


def _scan_action(
    scan: Scan,
    values: npt.NDArray[Any],
    episode: npt.NDArray[np.int64],
    is_first: npt.NDArray[np.bool_],
    is_last: npt.NDArray[np.bool_],
    a: int,
) -> None:
    rows = values.reshape(values.shape[0], -1)
    if values.dtype.kind in "fc":
        nan = np.isnan(rows)
        nan_any, nan_all = nan.any(axis=1), nan.all(axis=1)
        finite = np.isfinite(rows).all(axis=1)
    else:  # integer actions cannot be NaN
        nan_any = nan_all = np.zeros(rows.shape[0], dtype=bool)
        finite = np.ones(rows.shape[0], dtype=bool)
    scan.first_nan_any[episode[is_first]] = nan_any[is_first]
    scan.first_nan_all[episode[is_first]] = nan_all[is_first]
    scan.last_nan_any[episode[is_last]] = nan_any[is_last]
    scan.last_nan_all[episode[is_last]] = nan_all[is_last]
    scan.last_finite[episode[is_last]] = finite[is_last]
    inner = np.flatnonzero(nan_any & ~is_first & ~is_last)
    if inner.size:
        room = 5 - len(scan.inner_nan_rows)
        scan.inner_nan_rows.extend(int(a + r) for r in inner[:room])
        scan.inner_nan_count += int(inner.size)
