"""The statistics LeRobot keeps per episode and per dataset (formats.md §8.3).

Per feature: ``min``, ``max``, ``mean``, ``std`` over frames (per element; images per
channel over frames and pixels, in [0, 1], shaped ``[C, 1, 1]``), ``count`` (frames) and
the quantiles ``q01 q10 q50 q90 q99`` read off a 5000-bin histogram over
``[min - 1e-10, max + 1e-10]`` (the first bin's left edge when the first bin reaches the
quantile, else linear within the bin), as the files LeRobot 0.6.1 writes show. The
dataset's statistics weight each episode by its frames: min of mins, max of maxes,
weighted means of means and quantiles, pooled variance.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import numpy.typing as npt

__all__ = ["QUANTILES", "aggregate", "episode_stats"]

QUANTILES = {"q01": 0.01, "q10": 0.10, "q50": 0.50, "q90": 0.90, "q99": 0.99}
BINS = 5000
EPS = 1e-10


def _quantiles(values: npt.NDArray[Any]) -> dict[str, npt.NDArray[Any]]:
    """``{qXX: [D]}`` of ``values`` ``[N, D]``, column by column, in the values' dtype."""
    dtype = values.dtype
    out = {name: np.empty(values.shape[1], dtype=dtype) for name in QUANTILES}
    eps = dtype.type(EPS)
    for column in range(values.shape[1]):
        data = values[:, column]
        low, high = data.min() - eps, data.max() + eps
        edges = np.linspace(low, high, BINS + 1, dtype=dtype)
        counts, _ = np.histogram(data, bins=edges)
        cdf = np.cumsum(counts) / data.shape[0]
        for name, q in QUANTILES.items():
            index = int(np.searchsorted(cdf, q, side="left"))
            index = min(index, BINS - 1)
            if index == 0:
                out[name][column] = edges[0]
                continue
            below, here = cdf[index - 1], cdf[index]
            fraction = (q - below) / (here - below) if here > below else 0.0
            out[name][column] = edges[index] + fraction * (edges[index + 1] - edges[index])
    return out


def episode_stats(values: npt.NDArray[Any], image: bool) -> dict[str, npt.NDArray[Any]]:
    """The statistics of one feature over one episode's frames ``[T, ...]``.

    Images are ``[T, H, W, C]`` uint8 and described per channel in [0, 1]; other values
    are ``[T]`` or ``[T, D]`` and described per element.
    """
    frames = values.shape[0]
    if image:
        channels = values.shape[-1]
        scaled = values.reshape(-1, channels).astype(np.float32) / np.float32(255)
        data = scaled
        shape: tuple[int, ...] = (channels, 1, 1)
    else:
        kind = values.dtype.kind
        compute = np.float32 if kind == "b" else (np.float64 if kind in "iu" else values.dtype)
        data = values.reshape(frames, -1).astype(compute, copy=False)
        shape = (data.shape[1],)
    stats = {
        "min": data.min(axis=0),
        "max": data.max(axis=0),
        "mean": data.mean(axis=0),
        "std": data.std(axis=0),
    }
    stats.update(_quantiles(data))
    shaped = {
        name: np.asarray(value, dtype=np.float64).reshape(shape) for name, value in stats.items()
    }
    shaped["count"] = np.asarray([frames], dtype=np.int64)
    return {name: shaped[name] for name in ("min", "max", "mean", "std", "count", *QUANTILES)}


def aggregate(per_episode: list[dict[str, npt.NDArray[Any]]]) -> dict[str, npt.NDArray[Any]]:
    """The dataset's statistics of one feature from its episodes' statistics."""
    counts = np.asarray([int(stats["count"][0]) for stats in per_episode], dtype=np.float64)
    total = counts.sum()

    def weighted(name: str) -> npt.NDArray[np.float64]:
        stacked = np.stack([stats[name] for stats in per_episode])
        weights = counts.reshape((-1,) + (1,) * (stacked.ndim - 1))
        return np.asarray((stacked * weights).sum(axis=0) / total)

    mean = weighted("mean")
    means = np.stack([stats["mean"] for stats in per_episode])
    stds = np.stack([stats["std"] for stats in per_episode])
    weights = counts.reshape((-1,) + (1,) * (means.ndim - 1))
    variance = ((stds**2 + (means - mean) ** 2) * weights).sum(axis=0) / total
    out = {
        "min": np.min(np.stack([stats["min"] for stats in per_episode]), axis=0),
        "max": np.max(np.stack([stats["max"] for stats in per_episode]), axis=0),
        "mean": mean,
        "std": np.sqrt(variance),
        "count": np.asarray([int(total)], dtype=np.int64),
    }
    out.update({name: weighted(name) for name in QUANTILES})
    return out
