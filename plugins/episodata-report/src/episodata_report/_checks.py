"""Data checks: what a researcher wants flagged before training on a dataset.

NaN counts, constant elements and bound violations are read from the dataset's
statistics, which already cover every value. Only when the statistics show an infinity
or a value outside the schema's bounds is the field read again, to count them: a clean
dataset costs nothing beyond its statistics.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import numpy.typing as npt

    from episodata_core.dataset import Dataset
    from episodata_core.protocols import EpisodeTable
    from episodata_core.schema import FieldSpec
    from episodata_core.stats import FieldStats

__all__ = ["Finding", "check_fields"]


@dataclass(frozen=True)
class Finding:
    """One suspicious property of one field."""

    field: str
    kind: str
    """``nan``, ``inf``, ``below-low``, ``above-high`` or ``constant``."""
    count: int
    """Values concerned (for ``constant``: elements that never change)."""
    of: int
    """Values checked (for ``constant``: the field's elements)."""
    detail: str


def _bound(value: Any, shape: tuple[int, ...]) -> npt.NDArray[np.float64] | None:
    if value is None:
        return None
    return np.broadcast_to(np.asarray(value, dtype=np.float64), shape)


def _first_row(spec: FieldSpec) -> int:
    # action and reward rows are 1..T: row 0 is the hidden zero of the reset row
    return 1 if spec.role in ("action", "reward") else 0


def _count_pass(
    dataset: Dataset, table: EpisodeTable, spec: FieldSpec, low: Any, high: Any
) -> dict[str, int]:
    """Count infinities and bound violations over every stored value of one field."""
    key = spec.qualified_key
    present = table.present.get(key)
    counts = {"inf": 0, "below-low": 0, "above-high": 0}
    first = _first_row(spec)
    for episode in range(len(table)):
        if present is not None and not bool(present[episode]):
            continue
        stop = int(table.length[episode]) + 1
        if stop <= first:
            continue
        values = dataset.backend.read_rows(episode, first, stop, [key])[key].astype(np.float64)
        infinite = np.isinf(values)
        counts["inf"] += int(np.count_nonzero(infinite))
        # an infinity is counted once, as infinite, not again as out of bounds
        if low is not None:
            counts["below-low"] += int(np.count_nonzero((values < low) & ~infinite))
        if high is not None:
            counts["above-high"] += int(np.count_nonzero((values > high) & ~infinite))
    return counts


def check_fields(
    dataset: Dataset, table: EpisodeTable, stats: dict[str, FieldStats]
) -> list[Finding]:
    """Findings for every numeric field, in schema order."""
    findings: list[Finding] = []
    for key, field_stats in stats.items():
        spec = dataset.schema[key]
        shape = field_stats.shape
        size = math.prod(shape)
        total = int(field_stats.total.sum())
        if not total:
            continue
        nan = int(field_stats.nan_count.sum())
        if nan:
            findings.append(Finding(key, "nan", nan, total, "NaN values"))
        low, high = _bound(spec.low, shape), _bound(spec.high, shape)
        with np.errstate(invalid="ignore"):
            has_inf = bool(np.isinf(field_stats.min).any() or np.isinf(field_stats.max).any())
            # min and max include infinities: a field whose only excess is an infinity is
            # read again, and the pass counts it as infinite only
            below = low is not None and bool((field_stats.min < low).any())
            above = high is not None and bool((field_stats.max > high).any())
        if has_inf or below or above:
            counts = _count_pass(
                dataset, table, spec, low if below else None, high if above else None
            )
            if counts["inf"]:
                findings.append(Finding(key, "inf", counts["inf"], total, "infinite values"))
            if counts["below-low"]:
                detail = f"values below the schema's low bound {spec.low}"
                findings.append(Finding(key, "below-low", counts["below-low"], total, detail))
            if counts["above-high"]:
                detail = f"values above the schema's high bound {spec.high}"
                findings.append(Finding(key, "above-high", counts["above-high"], total, detail))
        counted = field_stats.count > 1
        constant = int(np.count_nonzero(counted & (field_stats.min == field_stats.max)))
        if constant:
            if constant == size:
                same = size == 1 or bool(np.all(field_stats.min == field_stats.min.flat[0]))
                detail = (
                    f"every value is {float(field_stats.min.flat[0]):g}"
                    if same
                    else "every element keeps one value"
                )
            else:
                detail = f"{constant} of {size} elements never change"
            findings.append(Finding(key, "constant", constant, size, detail))
    return findings
