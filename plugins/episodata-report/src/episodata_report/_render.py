"""``render_report``: gather, draw and write the page with its PNG files."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from episodata_core.stats import METADATA_KEY
from episodata_report._collect import collect
from episodata_report._html import Image, page
from episodata_report._plots import have_matplotlib, length_histogram, return_histogram
from episodata_report._png import encode_png

if TYPE_CHECKING:
    import os

    from episodata_core.dataset import Dataset

__all__ = ["render_report"]


def _slug(key: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", key.replace("/", "-"))


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
    dataset: Dataset, output_html: str | os.PathLike[str], *, episodes_for_frames: int = 3
) -> Path:
    """Write a self-contained HTML report of ``dataset`` and return its path.

    The page has a summary (backend, episode and step counts, terminated, truncated and
    ongoing episodes), an episode length histogram, the distribution of returns, a table
    of per-field statistics (from :meth:`Dataset.stats`), a strip of frames from every
    image field (fields with a ``layout``) for the first ``episodes_for_frames``
    episodes, and the schema. Images are embedded as data URIs and also written as PNG
    files to ``<name>_files/`` next to the page. Without matplotlib the histograms
    become tables and the page says how to install it. A writable dataset keeps the
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
    folder_name = f"{output.stem}_files"
    data = collect(dataset, episodes_for_frames=episodes_for_frames)
    plots = have_matplotlib()

    def image(name: str, png: bytes, alt: str) -> Image:
        return Image(f"{folder_name}/{name}", png, alt)

    lengths_plot = returns_plot = None
    if plots and data.lengths.size:
        lengths_plot = image(
            "episode-lengths.png",
            length_histogram(data.lengths, data.status),
            "histogram of episode lengths",
        )
    if plots and any(np.isfinite(values).any() for values in data.returns.values()):
        returns_plot = image("returns.png", return_histogram(data.returns), "histogram of returns")
    frame_images = {
        (row.field, row.episode): image(
            f"frames-{_slug(row.field)}-episode{row.episode}.png",
            encode_png(row.strip),
            f"frames of {row.field}, episode {row.episode}",
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
        frame_images=frame_images,
        stats_coverage=_coverage(dataset),
    )
    images = [i for i in (lengths_plot, returns_plot, *frame_images.values()) if i is not None]
    if images:
        folder = output.parent / folder_name
        folder.mkdir(exist_ok=True)
        for item in images:
            (output.parent / item.path).write_bytes(item.data)
    output.write_text(text, encoding="utf-8")
    return output
