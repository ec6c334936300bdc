"""``render_report``: gather, draw and write the page with its PNG files."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from episodata_core.stats import METADATA_KEY
from episodata_report._collect import collect
from episodata_report._html import Image, page
from episodata_report._plots import (
    dimension_plot,
    have_matplotlib,
    length_histogram,
    return_histogram,
    reward_curve_plot,
)
from episodata_report._png import encode_png

if TYPE_CHECKING:
    import os

    import numpy.typing as npt

    from episodata_core.dataset import Dataset

__all__ = ["render_report"]


def _coverage(dataset: Dataset) -> str:
    record = dataset.manifest.metadata.get(METADATA_KEY)
    episodes, steps = dataset.num_episodes, dataset.num_steps
    text = f"Statistics of {episodes} episodes and {steps} transitions, ongoing ones included."
    stored = (
        isinstance(record, dict)
        and record.get("episodes") == episodes
        and record.get("steps") == steps
    )
    if stored:
        return text + " They are stored in the manifest (metadata.stats)."
    if dataset.read_only:
        return text + " Computed for this report (the dataset was opened read-only)."
    return text


def render_report(
    dataset: Dataset,
    output_html: str | os.PathLike[str],
    *,
    episodes_for_frames: int = 3,
    progress: bool = False,
) -> Path:
    """Write a self-contained HTML report of ``dataset`` and return its path.

    The page has a summary (backend, episode and step counts, terminated, truncated and
    ongoing episodes), data checks (NaN and infinite values, values outside the schema's
    bounds, constant elements), an episode length histogram, the distribution of
    returns, reward by step index, per-dimension distributions of every small numeric
    field (from uniformly sampled transitions), a table of per-field statistics (from
    :meth:`Dataset.stats`), a strip of frames from every image field (fields with a
    ``layout``) for the first ``episodes_for_frames`` episodes, the schema, and the
    provenance (episodata version, plugins, imports, pipeline). Images are embedded as
    data URIs, so the page is one self-contained file. Without matplotlib the
    histograms become tables and the page says how to install it. ``progress=True`` shows
    the pass over the episodes' rewards as a bar on stderr. A writable dataset keeps the
    statistics in its manifest, as :meth:`Dataset.stats` does; a read-only one is not
    changed.

    Examples
    --------
    >>> render_report(Dataset.open("data/cartpole", read_only=True), "cartpole.html")
    PosixPath('cartpole.html')
    """
    if episodes_for_frames < 0:
        raise ValueError(f"episodes_for_frames must be 0 or more, got {episodes_for_frames}")
    output = Path(output_html)
    output.parent.mkdir(parents=True, exist_ok=True)
    data = collect(dataset, episodes_for_frames=episodes_for_frames, progress=progress)
    plots = have_matplotlib()
    distinct_lengths = data.lengths.size and data.lengths.min() != data.lengths.max()
    lengths_plot = returns_plot = None
    if plots and distinct_lengths:
        lengths_plot = Image(
            length_histogram(data.lengths, data.status), "histogram of episode lengths"
        )
    if plots and any(_spread_out(values) for values in data.returns.values()):
        returns_plot = Image(return_histogram(data.returns), "histogram of returns")
    reward_plots = {}
    dimension_plots = {}
    if plots:
        reward_plots = {
            key: Image(
                reward_curve_plot(key, curve.mean, curve.low, curve.high, curve.episodes),
                f"reward by step index of {key}",
            )
            for key, curve in data.reward_curves.items()
        }
        for key, values in data.samples.items():
            spec = dataset.schema[key]
            dimension_plots[key] = Image(
                dimension_plot(
                    key, values, _flat_bound(spec.low, values), _flat_bound(spec.high, values)
                ),
                f"distribution per dimension of {key}",
            )
    frame_images = {
        (row.field, row.episode): Image(
            encode_png(row.strip), f"frames of {row.field}, episode {row.episode}"
        )
        for row in data.frames
    }
    location = dataset.location
    title = Path(location).name if location else "in-memory dataset"
    text = page(
        data,
        dataset.schema,
        title=title,
        plots=plots,
        lengths_plot=lengths_plot,
        returns_plot=returns_plot,
        reward_plots=reward_plots,
        dimension_plots=dimension_plots,
        frame_images=frame_images,
        stats_coverage=_coverage(dataset),
    )
    output.write_text(text, encoding="utf-8")
    return output


def _spread_out(values: npt.NDArray[np.float64]) -> bool:
    finite = values[np.isfinite(values)]
    return bool(finite.size) and bool(finite.min() != finite.max())


def _flat_bound(bound: Any, values: npt.NDArray[np.float64]) -> npt.NDArray[np.float64] | None:
    if bound is None:
        return None
    return np.broadcast_to(np.asarray(bound, dtype=np.float64), values.shape[1:]).reshape(-1)
