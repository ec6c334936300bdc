"""The statistics LeRobot keeps per episode and per dataset (formats.md §8.3).

LeRobot 0.6.1's definition, computed the way it computes it so that the numbers agree to
the last bits (its float32 estimator loses up to ~1 % of an image's ``std`` to
cancellation, and a two-pass ``std`` does not reproduce that):

- Values are promoted to ``result_type(dtype, float32)`` (float32 for bool, uint8, int16
  and float32; float64 for int32/int64 and float64). Per element (images per channel):
  ``min``, ``max``, ``mean`` (``np.mean``), ``std = sqrt(max(0, mean(x**2) - mean**2))``
  in that dtype, and ``count``. A feature with one row has ``np.std`` and its quantiles
  equal to its mean.
- Quantiles ``q01 q10 q50 q90 q99``: a 5000-bin histogram over ``linspace(min - 1e-10,
  max + 1e-10, 5001)``; the first bin whose cumulative count reaches ``q * rows`` gives
  its left edge plus the linear fraction within it (the first bin: its left edge).
- Images ``[T, H, W, C]`` uint8: a sample of frames, ``round(linspace(0, T - 1, n))``
  with ``n = T`` below 100 frames, else ``max(100, min(int(T ** 0.75), 10000))``; frames
  whose larger side is 300 pixels or more keep every ``(larger side // 150)``-th row and
  column; pixels as RGB (grey repeated, alpha dropped). Statistics over the sampled
  pixels' levels 0..255, then divided by 255 (float32 stays float32), shaped
  ``[3, 1, 1]``; ``count`` is the number of sampled frames.
- The dataset's statistics fold the episodes in one at a time, as LeRobot's writer does:
  min of mins, max of maxes, count-weighted means and quantiles, pooled variance.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import numpy.typing as npt

__all__ = ["QUANTILES", "aggregate", "episode_stats", "image_sample", "sample_indices"]

QUANTILES = {"q01": 0.01, "q10": 0.10, "q50": 0.50, "q90": 0.90, "q99": 0.99}
BINS = 5000
EPS = 1e-10
ORDER = ("min", "max", "mean", "std", "count", *QUANTILES)


def sample_indices(frames: int) -> npt.NDArray[np.intp]:
    """The frames of a ``frames``-long episode whose images LeRobot describes."""
    count = max(min(100, frames), min(int(frames**0.75), 10_000))
    return np.round(np.linspace(0, frames - 1, count)).astype(np.intp)


def image_sample(values: npt.NDArray[np.uint8]) -> npt.NDArray[np.uint8]:
    """``[N, h, w, 3]``: the sampled, downsampled RGB frames of ``values`` ``[T, H, W, C]``."""
    picked = values[sample_indices(values.shape[0])]
    height, width = values.shape[1], values.shape[2]
    if max(width, height) >= 300:
        step = max(height, width) // 150
        picked = picked[:, ::step, ::step]
    channels = values.shape[3]
    if channels == 1:  # Pillow's convert("RGB") of a grey image repeats it
        picked = np.repeat(picked, 3, axis=3)
    elif channels == 4:  # and of RGBA drops alpha
        picked = picked[..., :3]
    return np.ascontiguousarray(picked)


def _quantile(counts: npt.NDArray[np.float64], edges: npt.NDArray[Any], target: float) -> Any:
    cumulative = np.cumsum(counts)
    index = int(np.searchsorted(cumulative, target))
    if index == 0:
        return edges[0]
    if index >= cumulative.shape[0]:
        return edges[-1]
    below = cumulative[index - 1]
    inside = cumulative[index] - below
    if inside == 0:
        return edges[index]
    return edges[index] + (target - below) / inside * (edges[index + 1] - edges[index])


def _moments(rows: npt.NDArray[Any]) -> dict[str, npt.NDArray[Any]]:
    """Statistics of ``rows`` ``[M, D]`` per column, in LeRobot's dtypes."""
    if rows.shape[0] < 2:
        mean = np.mean(rows, axis=0)
        one: dict[str, npt.NDArray[Any]] = {
            "min": np.min(rows, axis=0),
            "max": np.max(rows, axis=0),
            "mean": mean,
            "std": np.std(rows, axis=0),
        }
        one.update({name: mean.copy() for name in QUANTILES})
        return one
    data = rows.astype(np.result_type(rows.dtype, np.float32), copy=False)
    low, high = np.min(data, axis=0), np.max(data, axis=0)
    mean = np.mean(data, axis=0)
    variance = np.mean(data**2, axis=0) - mean**2
    out = {"min": low, "max": high, "mean": mean, "std": np.sqrt(np.maximum(0, variance))}
    found: dict[str, list[Any]] = {name: [] for name in QUANTILES}
    for column in range(data.shape[1]):
        # the edges in the data's dtype: a float32 column's bins are float32 bins
        edges = np.linspace(low[column] - EPS, high[column] + EPS, BINS + 1)
        counts = np.zeros(BINS) + np.histogram(data[:, column], bins=edges)[0]
        for name, q in QUANTILES.items():
            found[name].append(_quantile(counts, edges, q * data.shape[0]))
    out.update({name: np.array(values) for name, values in found.items()})
    return out


def episode_stats(values: npt.NDArray[Any], image: bool) -> dict[str, npt.NDArray[Any]]:
    """The statistics of one feature over one episode's frames ``[T, ...]``.

    Images are ``[T, H, W, C]`` uint8 and described per RGB channel in [0, 1] (arrays
    ``[3, 1, 1]``); other values are ``[T]`` or ``[T, D]`` and described per element
    (arrays ``[D]``, ``[1]`` for ``[T]``). ``count`` is ``[1]`` int64.
    """
    if image:
        sample = image_sample(values)
        stats = _moments(sample.reshape(-1, 3))
        scaled = {name: value / 255.0 for name, value in stats.items()}
        out = {name: value.reshape(-1, 1, 1) for name, value in scaled.items()}
        out["count"] = np.array([sample.shape[0]], dtype=np.int64)
    else:
        rows = values.reshape(values.shape[0], -1)
        out = _moments(rows)
        out["count"] = np.array([values.shape[0]], dtype=np.int64)
    return {name: out[name] for name in ORDER}


def _combine(
    first: dict[str, npt.NDArray[Any]], second: dict[str, npt.NDArray[Any]]
) -> dict[str, npt.NDArray[Any]]:
    """Two sets of statistics of one feature as one (LeRobot's pairwise aggregation)."""
    parts = (first, second)
    means = np.stack([p["mean"] for p in parts])
    variances = np.stack([p["std"] ** 2 for p in parts])
    counts = np.stack([p["count"] for p in parts])
    total = counts.sum(axis=0)
    while counts.ndim < means.ndim:
        counts = np.expand_dims(counts, axis=-1)
    mean = (means * counts).sum(axis=0) / total
    variance = ((variances + (means - mean) ** 2) * counts).sum(axis=0) / total
    out = {
        "min": np.min(np.stack([p["min"] for p in parts]), axis=0),
        "max": np.max(np.stack([p["max"] for p in parts]), axis=0),
        "mean": mean,
        "std": np.sqrt(variance),
        "count": total,
    }
    for name in QUANTILES:
        out[name] = (np.stack([p[name] for p in parts]) * counts).sum(axis=0) / total
    return out


def aggregate(per_episode: list[dict[str, npt.NDArray[Any]]]) -> dict[str, npt.NDArray[Any]]:
    """The dataset's statistics of one feature from its episodes' statistics, in order."""
    total = per_episode[0]
    for stats in per_episode[1:]:
        total = _combine(total, stats)
    return {name: total[name] for name in ORDER}


def as_lists(stats: dict[str, npt.NDArray[Any]]) -> dict[str, Any]:
    """Nested lists for the tables: counts as ints, every other value as a float."""
    return {
        name: (value.astype(np.int64) if name == "count" else value.astype(np.float64)).tolist()
        for name, value in stats.items()
    }
