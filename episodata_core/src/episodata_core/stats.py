"""Per-field statistics for normalization, computed by streaming episodes.

Statistics are per element: a field of per-step shape ``[3, 64, 64]`` gets ``mean``,
``std``, ``min``, ``max``, ``count`` and ``nan_count`` arrays of shape ``[3, 64, 64]``;
:meth:`FieldStats.reduce` merges elements into per-channel or scalar summaries exactly.
Observation and info fields count every stored observation (T + 1 per episode); action
and reward fields count every step (T per episode), never the hidden reset row.

Episodes are read one at a time (long ones in chunks of rows) and merged with the
parallel algorithm of Chan, Golub and LeVeque, so memory stays bounded and the result
matches a two-pass computation to rounding. The result is kept in the dataset metadata
under ``"stats"`` (see :func:`dataset_stats`) and only the rows written since are read
the next time.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from episodata_core.errors import ArgumentError, DatasetStateError, SchemaError

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from episodata_core.dataset import Dataset
    from episodata_core.protocols import EpisodeTable
    from episodata_core.schema import DatasetSchema, FieldSpec

__all__ = ["METADATA_KEY", "FieldStats", "dataset_stats"]

logger = logging.getLogger(__name__)

METADATA_KEY = "stats"
"""The key of the dataset metadata that holds stored statistics."""

_RECORD_VERSION = 1
# float64 copies of one chunk of rows stay below this many bytes
_CHUNK_BYTES = 64 * 2**20

Float64Array = npt.NDArray[np.float64]
Int64Array = npt.NDArray[np.int64]


@dataclass(frozen=True, eq=False)
class FieldStats:
    """Running statistics of one field, per element of its per-step shape.

    Every array has the field's per-step shape. NaN values are counted in ``nan_count``
    and left out of everything else, as ``np.nanmean`` does; infinities propagate into
    ``mean`` and ``std`` as they do in NumPy. Elements without any value have NaN
    ``mean``, ``std``, ``min`` and ``max``. Values are float64 whatever the field dtype.
    """

    key: str
    """The field's qualified key, e.g. ``"observation/camera"``."""
    count: Int64Array
    """Non-NaN values seen per element."""
    nan_count: Int64Array
    """NaN values seen per element."""
    mean: Float64Array
    """Mean of the non-NaN values."""
    m2: Float64Array
    """Sum of squared deviations from the mean (Welford's M2)."""
    min: Float64Array
    """Smallest non-NaN value."""
    max: Float64Array
    """Largest non-NaN value."""

    @property
    def shape(self) -> tuple[int, ...]:
        """The field's per-step shape."""
        return tuple(self.count.shape)

    @property
    def total(self) -> Int64Array:
        """Values seen per element, NaN included: observations or steps covered."""
        return self.count + self.nan_count

    @property
    def var(self) -> Float64Array:
        """Population variance (``ddof=0``) of the non-NaN values."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.count > 0, self.m2 / np.maximum(self.count, 1), np.nan)

    @property
    def std(self) -> Float64Array:
        """Population standard deviation (``ddof=0``), as ``np.nanstd``."""
        return np.sqrt(self.var)

    @classmethod
    def empty(cls, key: str, shape: tuple[int, ...]) -> FieldStats:
        """Statistics of no values at all."""
        nan = np.full(shape, np.nan)
        zeros = np.zeros(shape, dtype=np.int64)
        return cls(key, zeros, zeros.copy(), nan, np.zeros(shape), nan.copy(), nan.copy())

    @classmethod
    def from_values(cls, key: str, values: npt.NDArray[Any]) -> FieldStats:
        """Statistics of ``values`` ``[n, *shape]`` (any numeric or bool dtype), two-pass."""
        shape = tuple(values.shape[1:])
        if values.shape[0] == 0:
            return cls.empty(key, shape)
        data = values.astype(np.float64, copy=False)
        if values.dtype.kind == "f":
            missing = np.isnan(data)
            nan_count = missing.sum(axis=0, dtype=np.int64)
            count = values.shape[0] - nan_count
            data = np.where(missing, 0.0, data)
        else:
            missing = None
            nan_count = np.zeros(shape, dtype=np.int64)
            count = np.full(shape, values.shape[0], dtype=np.int64)
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = np.where(count > 0, data.sum(axis=0) / np.maximum(count, 1), np.nan)
            deviation = data - mean
        if missing is not None:
            deviation[missing] = 0.0
        m2 = np.einsum("i...,i...->...", deviation, deviation)
        if values.dtype.kind == "f":
            # fmin/fmax skip NaN, and give NaN only where every value is NaN
            low = np.fmin.reduce(values, axis=0).astype(np.float64)
            high = np.fmax.reduce(values, axis=0).astype(np.float64)
        else:
            low = values.min(axis=0).astype(np.float64)
            high = values.max(axis=0).astype(np.float64)
        return cls(key, count, nan_count, np.asarray(mean), np.asarray(m2), low, high)

    def merge(self, other: FieldStats) -> FieldStats:
        """The statistics of both sets of values (Chan et al.'s parallel update)."""
        if other.shape != self.shape:
            raise SchemaError(
                f"cannot merge statistics of {self.key!r} shaped {self.shape} with "
                f"{other.key!r} shaped {other.shape}"
            )
        count = self.count + other.count
        with np.errstate(invalid="ignore", divide="ignore"):
            weight = np.where(count > 0, other.count / np.maximum(count, 1), 0.0)
            delta = other.mean - self.mean
            both = (self.count > 0) & (other.count > 0)
            # an element seen on one side only takes that side's moments unchanged
            mean = np.where(
                both, self.mean + delta * weight, np.where(other.count > 0, other.mean, self.mean)
            )
            m2 = self.m2 + other.m2 + np.where(both, delta * delta * self.count * weight, 0.0)
        return FieldStats(
            self.key,
            count,
            self.nan_count + other.nan_count,
            np.asarray(mean),
            np.asarray(m2),
            np.fmin(self.min, other.min),
            np.fmax(self.max, other.max),
        )

    def reduce(self, axis: int | tuple[int, ...] | None = None) -> FieldStats:
        """Merge elements along element ``axis`` (``None``: every element, a scalar summary).

        ``reduce((1, 2))`` of a ``CHW`` image gives per-channel statistics ``[C]``. The
        merge is exact: the result equals statistics of the pooled values.
        """
        axes = tuple(range(len(self.shape))) if axis is None else axis
        count = self.count.sum(axis=axes)
        with np.errstate(invalid="ignore", divide="ignore"):
            weighted = np.where(self.count > 0, self.mean * self.count, 0.0)
            mean = np.where(count > 0, weighted.sum(axis=axes) / np.maximum(count, 1), np.nan)
            spread = np.where(
                self.count > 0,
                self.m2 + self.count * (self.mean - np.expand_dims(mean, axes)) ** 2,
                0.0,
            )
        return FieldStats(
            self.key,
            np.asarray(count, dtype=np.int64),
            np.asarray(self.nan_count.sum(axis=axes), dtype=np.int64),
            np.asarray(mean),
            np.asarray(spread.sum(axis=axes)),
            np.asarray(np.fmin.reduce(self.min, axis=axes, initial=np.nan)),
            np.asarray(np.fmax.reduce(self.max, axis=axes, initial=np.nan)),
        )

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict: nested lists (a single number when every element agrees).

        NaN is written as ``null`` and infinities as ``"inf"``/``"-inf"``.
        """
        return {
            "count": _encode(self.count),
            "nan_count": _encode(self.nan_count),
            "mean": _encode(self.mean),
            "std": _encode(self.std),
            "min": _encode(self.min),
            "max": _encode(self.max),
        }

    @classmethod
    def from_json(cls, key: str, shape: tuple[int, ...], document: Mapping[str, Any]) -> FieldStats:
        """Parse :meth:`to_json` output for a field of per-step ``shape``."""
        count = _decode(document["count"], shape).astype(np.int64)
        std = _decode(document["std"], shape)
        with np.errstate(invalid="ignore"):
            m2 = np.where(count > 0, std * std * count, 0.0)
        return cls(
            key,
            count,
            _decode(document["nan_count"], shape).astype(np.int64),
            _decode(document["mean"], shape),
            m2,
            _decode(document["min"], shape),
            _decode(document["max"], shape),
        )

    def __repr__(self) -> str:
        summary = self.reduce()
        return (
            f"FieldStats({self.key!r}, shape={self.shape}, count={int(summary.count)}, "
            f"nan_count={int(summary.nan_count)}, mean={float(summary.mean):.6g}, "
            f"std={float(summary.std):.6g}, min={float(summary.min):.6g}, "
            f"max={float(summary.max):.6g})"
        )


def _encode_number(value: float) -> float | str | None:
    if isinstance(value, int):
        return value
    if math.isnan(value):
        return None
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return float(value)  # a plain float: NumPy scalars are not JSON types


def _encode(array: npt.NDArray[Any]) -> Any:
    flat = array.reshape(-1)
    if flat.size and np.array_equal(flat, np.broadcast_to(flat[0], flat.shape), equal_nan=True):
        return _encode_number(flat[0].item())  # one number stands for every element
    if array.dtype.kind == "f":
        return np.vectorize(_encode_number, otypes=[object])(array).tolist()
    return array.tolist()


def _decode(value: Any, shape: tuple[int, ...]) -> Float64Array:
    def number(item: Any) -> float:
        if item is None:
            return math.nan
        return float(item)  # float("inf") and float("-inf") read the markers back

    if not isinstance(value, list):
        return np.full(shape, number(value))
    array: Float64Array = np.vectorize(number, otypes=[np.float64])(np.array(value, dtype=object))
    if array.shape != shape:
        raise ValueError(f"expected shape {shape}, got {array.shape}")
    return array


# -- coverage: which rows the stored statistics include ------------------------------------


@dataclass(frozen=True)
class _Coverage:
    """Episodes ``[0, episodes)`` are included; ``ongoing`` ones only to that many steps."""

    episodes: int
    steps: int
    ongoing: dict[int, int]

    @classmethod
    def of(cls, table: EpisodeTable) -> _Coverage:
        return cls(
            episodes=len(table),
            steps=int(table.length.sum()),
            ongoing={int(i): int(table.length[i]) for i in np.flatnonzero(table.ongoing)},
        )

    def rows_done(self, episode: int, table: EpisodeTable) -> int:
        """Rows of ``episode`` already included: 0 for a new episode."""
        if episode >= self.episodes:
            return 0
        return self.ongoing.get(episode, int(table.length[episode])) + 1

    def still_holds(self, table: EpisodeTable) -> bool:
        """Whether ``table`` only adds rows to what was covered (rows are append-only)."""
        if self.episodes > len(table):
            return False
        lengths = table.length[: self.episodes]
        if any(int(lengths[i]) < steps for i, steps in self.ongoing.items()):
            return False  # an unflushed ongoing episode lost rows in a crash
        finished = np.ones(self.episodes, dtype=bool)
        finished[list(self.ongoing)] = False
        # the sum tells a record copied from another dataset apart from this one's
        return int(lengths[finished].sum()) + sum(self.ongoing.values()) == self.steps

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> _Coverage:
        coverage = cls(
            episodes=int(document["episodes"]),
            steps=int(document["steps"]),
            ongoing={int(i): int(steps) for i, steps in document["ongoing"].items()},
        )
        if any(not 0 <= i < coverage.episodes for i in coverage.ongoing):
            raise ValueError("an ongoing episode id lies outside the covered episodes")
        return coverage

    def to_json(self) -> dict[str, Any]:
        return {
            "episodes": self.episodes,
            "steps": self.steps,
            "ongoing": {str(i): steps for i, steps in self.ongoing.items()},
        }


def _load_record(
    document: Any, schema: DatasetSchema
) -> tuple[_Coverage, dict[str, FieldStats]] | None:
    """The stored coverage and statistics, or ``None`` when absent or unreadable."""
    if not isinstance(document, dict) or document.get("version") != _RECORD_VERSION:
        return None
    try:
        coverage = _Coverage.from_json(document)
        fields = {
            key: FieldStats.from_json(key, schema[key].shape, entry)
            for key, entry in document["fields"].items()
            if key in schema
        }
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        logger.debug("stored statistics are unreadable (%s); recomputing", err)
        return None
    return coverage, fields


# -- computing ------------------------------------------------------------------------------


def _numeric_fields(schema: DatasetSchema, fields: str | Iterable[str] | None) -> list[FieldSpec]:
    chosen = schema.resolve(fields)
    numeric = [spec for spec in chosen if spec.np_dtype.kind in "biuf"]
    if fields is not None and len(numeric) < len(chosen):
        others = [f"{s.qualified_key} ({s.dtype})" for s in chosen if s.np_dtype.kind not in "biuf"]
        raise ArgumentError(
            f"stats: only numeric and bool fields have statistics, not {', '.join(others)}; "
            "leave them out of fields="
        )
    return numeric


def _first_row(spec: FieldSpec, rows_done: int) -> int:
    # row 0 of an action or reward field is the hidden zero of the reset row
    return max(rows_done, 1) if spec.role in ("action", "reward") else rows_done


def _stream(
    dataset: Dataset,
    table: EpisodeTable,
    plan: Mapping[str, tuple[FieldSpec, _Coverage | None]],
) -> dict[str, FieldStats]:
    """Statistics of every row not covered yet, per field; ``None`` coverage: every row."""
    result = {key: FieldStats.empty(key, spec.shape) for key, (spec, _) in plan.items()}
    backend = dataset.backend
    for episode in range(len(table)):
        stop = int(table.length[episode]) + 1
        starts: dict[int, list[str]] = {}
        for key, (spec, coverage) in plan.items():
            if key in table.present and not table.present[key][episode]:
                continue  # an optional field this episode does not have
            done = 0 if coverage is None else coverage.rows_done(episode, table)
            first = _first_row(spec, done)
            if first < stop:
                starts.setdefault(first, []).append(key)
        for first, keys in starts.items():
            row_bytes = sum(8 * max(1, math.prod(plan[key][0].shape)) for key in keys)
            step = max(1, _CHUNK_BYTES // row_bytes)
            for begin in range(first, stop, step):
                rows = backend.read_rows(episode, begin, min(begin + step, stop), keys)
                for key in keys:
                    result[key] = result[key].merge(FieldStats.from_values(key, rows[key]))
    return result


def dataset_stats(
    dataset: Dataset, fields: str | Iterable[str] | None = None, *, refresh: bool = False
) -> dict[str, FieldStats]:
    """Statistics of the selected numeric fields, keyed by qualified key (schema order).

    Stored statistics in ``dataset.manifest.metadata["stats"]`` are reused while they
    are current; rows written since (new episodes, steps added to ongoing ones) are
    merged in without reading the rest again. ``refresh=True`` recomputes the selected
    fields from every row. The updated record is stored unless the dataset is read-only
    or another process holds its writer lock.

    The record is ``{"version": 1, "episodes": N, "steps": S, "ongoing": {id: steps},
    "fields": {qualified_key: FieldStats.to_json()}}``: it covers episodes ``[0, N)``,
    ``S`` transitions in all, and of each episode that was still ongoing only its first
    ``steps`` transitions.
    """
    specs = _numeric_fields(dataset.schema, fields)
    table = dataset.backend.episode_table()
    coverage_now = _Coverage.of(table)
    loaded = _load_record(dataset.manifest.metadata.get(METADATA_KEY), dataset.schema)
    if loaded is not None and not loaded[0].still_holds(table):
        logger.debug("stored statistics no longer match the episodes; recomputing")
        loaded = None
    covered, stored = loaded if loaded is not None else (None, {})
    wanted = {spec.qualified_key for spec in specs}
    fresh = wanted if refresh else wanted - stored.keys()
    current = covered == coverage_now
    if current and not fresh:
        return {spec.qualified_key: stored[spec.qualified_key] for spec in specs}

    plan: dict[str, tuple[FieldSpec, _Coverage | None]] = {}
    for spec in dataset.schema:
        key = spec.qualified_key
        if key in fresh:
            plan[key] = (spec, None)
        elif key in stored and not current:
            plan[key] = (spec, covered)  # kept fields stay in step with the coverage
    added = _stream(dataset, table, plan)
    merged = {
        key: added[key] if plan[key][1] is None else stored[key].merge(added[key]) for key in plan
    }
    record = {**stored, **merged}
    _store(dataset, coverage_now, record)
    return {spec.qualified_key: record[spec.qualified_key] for spec in specs}


def _store(dataset: Dataset, coverage: _Coverage, record: Mapping[str, FieldStats]) -> None:
    if dataset.read_only:
        return
    order = [key for key in dataset.schema.qualified_keys if key in record]
    document = {
        "version": _RECORD_VERSION,
        **coverage.to_json(),
        "fields": {key: record[key].to_json() for key in order},
    }
    try:
        dataset.update_metadata({METADATA_KEY: document})
    except DatasetStateError as err:
        # another process is writing: the statistics are still right, only not kept
        logger.debug("statistics not stored: %s", err)
