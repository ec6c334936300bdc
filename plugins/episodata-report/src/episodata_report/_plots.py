"""Histograms as PNG bytes, drawn with matplotlib's Agg canvas when it is installed.

matplotlib is imported inside the functions and never through ``pyplot``, so the
report changes no global backend and ``import episodata_report`` stays light.
"""

from __future__ import annotations

import importlib
import io
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import numpy.typing as npt

__all__ = ["INSTALL_HINT", "have_matplotlib", "length_histogram", "return_histogram"]

INSTALL_HINT = 'pip install "episodata[report]"'

STATUS_COLORS = {
    "terminated": "#c0392b",
    "truncated": "#e67e22",
    "unflagged": "#7f8c8d",
    "ongoing": "#2e86c1",
}


def have_matplotlib() -> bool:
    """Whether matplotlib can be imported (the ``plots`` extra)."""
    try:
        importlib.import_module("matplotlib")
    except ImportError:
        return False
    return True


def _figure(title: str, xlabel: str) -> tuple[Any, Any]:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(7.5, 3.2), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    axes.set_title(title)
    axes.set_xlabel(xlabel)
    axes.set_ylabel("episodes")
    axes.grid(axis="y", alpha=0.3)
    return figure, axes


def _png(figure: Any) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()


def bin_edges(values: npt.NDArray[Any], *, integer: bool) -> npt.NDArray[np.float64]:
    """Histogram bin edges; one bin per value for small integer ranges."""
    if not values.size:
        return np.array([0.0, 1.0])
    low, high = float(values.min()), float(values.max())
    if integer and high - low < 50:
        return np.arange(low - 0.5, high + 1.5)
    edges: npt.NDArray[np.float64] = np.histogram_bin_edges(
        values, bins=min(40, max(5, values.size))
    )
    return edges


def length_histogram(lengths: npt.NDArray[np.int64], status: npt.NDArray[np.str_]) -> bytes:
    """Episode lengths ``[N]``, stacked by end state ``[N]``."""
    figure, axes = _figure("Episode length", "transitions per episode")
    edges = bin_edges(lengths, integer=True)
    names = [name for name in STATUS_COLORS if np.any(status == name)]
    axes.hist(
        [lengths[status == name] for name in names],
        bins=edges,
        stacked=True,
        label=names,
        color=[STATUS_COLORS[name] for name in names],
    )
    axes.legend(loc="upper right")
    return _png(figure)


def return_histogram(returns: dict[str, npt.NDArray[np.float64]]) -> bytes:
    """One histogram of finalized episodes' returns ``[N]`` per reward field."""
    figure, axes = _figure("Return (sum of rewards per finalized episode)", "return")
    for key, values in returns.items():
        finite = values[np.isfinite(values)]
        axes.hist(finite, bins=bin_edges(finite, integer=False), alpha=0.7, label=key)
    if len(returns) > 1:
        axes.legend(loc="upper right")
    return _png(figure)
