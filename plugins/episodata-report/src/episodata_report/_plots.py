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

__all__ = [
    "INSTALL_HINT",
    "dimension_plot",
    "have_matplotlib",
    "length_histogram",
    "log_scale",
    "return_histogram",
    "reward_curve_plot",
]

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


def _canvas(width: float, height: float) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def _figure(title: str, xlabel: str, ylabel: str = "episodes") -> tuple[Any, Any]:
    figure = _canvas(7.5, 3.2)
    axes = figure.add_subplot()
    axes.set_title(title)
    axes.set_xlabel(xlabel)
    axes.set_ylabel(ylabel)
    axes.grid(axis="y", alpha=0.3)
    return figure, axes


def log_scale(counts: npt.NDArray[Any]) -> bool:
    """Whether bar heights ``counts`` need a log axis: the tallest is 100x the shortest.

    From one episode to millions, a linear axis would flatten every bar but the tallest.
    """
    nonzero = counts[counts > 0]
    return bool(nonzero.size) and bool(nonzero.max() >= 100 * nonzero.min())


def _count_axis(axes: Any, counts: npt.NDArray[Any]) -> None:
    """Whole-number counts, on a log scale when :func:`log_scale` says so."""
    from matplotlib.ticker import MaxNLocator

    if log_scale(counts):
        axes.set_yscale("log")
        axes.set_ylabel(axes.get_ylabel() + " (log scale)")
    else:
        axes.yaxis.set_major_locator(MaxNLocator(integer=True))


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
    if high == low:
        return np.array([low - 0.5, high + 0.5])
    edges: npt.NDArray[np.float64] = np.histogram_bin_edges(
        values, bins=min(40, max(5, int(np.sqrt(values.size))))
    )
    return edges


def length_histogram(lengths: npt.NDArray[np.int64], status: npt.NDArray[np.str_]) -> bytes:
    """Episode lengths ``[N]``, stacked by end state ``[N]``."""
    figure, axes = _figure("Episode length", "transitions per episode")
    edges = bin_edges(lengths, integer=True)
    names = [name for name in STATUS_COLORS if np.any(status == name)]
    counts, _, _ = axes.hist(
        [lengths[status == name] for name in names],
        bins=edges,
        stacked=True,
        label=names,
        color=[STATUS_COLORS[name] for name in names],
    )
    _count_axis(axes, np.asarray(counts).reshape(len(names), -1)[-1])
    axes.legend(loc="upper right")
    return _png(figure)


def return_histogram(returns: dict[str, npt.NDArray[np.float64]]) -> bytes:
    """One histogram of finalized episodes' returns ``[N]`` per reward field."""
    figure, axes = _figure("Return (sum of rewards per finalized episode)", "return")
    tallest = []
    for key, values in returns.items():
        finite = values[np.isfinite(values)]
        counts, _, _ = axes.hist(
            finite, bins=bin_edges(finite, integer=False), alpha=0.7, label=key
        )
        tallest.append(np.asarray(counts))
    _count_axis(axes, np.concatenate(tallest) if tallest else np.zeros(0))
    if len(returns) > 1:
        axes.legend(loc="upper right")
    return _png(figure)


def reward_curve_plot(
    key: str,
    mean: npt.NDArray[np.float64],
    low: npt.NDArray[np.float64],
    high: npt.NDArray[np.float64],
    episodes: npt.NDArray[np.int64],
) -> bytes:
    """Mean reward ``[S]`` by step index with its min-max band, and how many episodes reach it."""
    figure, axes = _figure(f"Reward by step: {key}", "step index", "reward")
    steps = np.arange(1, mean.size + 1)
    axes.fill_between(steps, low, high, color="#aed6f1", alpha=0.6, label="min to max")
    axes.plot(steps, mean, color="#1f3a5f", linewidth=1.2, label="mean over episodes")
    reach = axes.twinx()
    reach.plot(steps, episodes, color="#7f8c8d", linewidth=0.8, linestyle="--")
    reach.set_ylabel("episodes reaching the step", color="#7f8c8d")
    reach.set_ylim(bottom=0)
    axes.legend(loc="upper left")
    return _png(figure)


def dimension_plot(
    key: str,
    values: npt.NDArray[np.float64],
    low: npt.NDArray[np.float64] | None,
    high: npt.NDArray[np.float64] | None,
) -> bytes:
    """Distribution of each dimension of ``values`` ``[N, D]``, with the schema's bounds.

    Up to 12 dimensions get a histogram each; more get one box per dimension (whiskers
    at the 1st and 99th percentiles), which stays readable up to 64.
    """
    dims = values.shape[1]
    finite = [column[np.isfinite(column)] for column in values.T]
    if dims <= 12:
        columns = min(dims, 4)
        rows = -(-dims // columns)
        # wide enough for the title even with one panel
        figure = _canvas(max(6.5, 2.6 * columns + 0.6), 1.9 * rows + 0.5)
        figure.suptitle(f"{key}: values per dimension ({values.shape[0]} sampled transitions)")
        for d in range(dims):
            axes = figure.add_subplot(rows, columns, d + 1)
            data = finite[d]
            if data.size:
                axes.hist(data, bins=bin_edges(data, integer=False), color="#2e86c1")
            for bound, what in ((low, "low"), (high, "high")):
                if bound is not None and np.isfinite(bound[d]):
                    axes.axvline(bound[d], color="#c0392b", linestyle=":", label=what)
            if dims > 1:
                axes.set_title(f"[{d}]", fontsize=9)
            axes.tick_params(labelsize=7)
            axes.set_yticks([])
        return _png(figure)
    figure = _canvas(min(14.0, 2 + 0.25 * dims), 3.4)
    axes = figure.add_subplot()
    axes.set_title(f"{key}: values per dimension ({values.shape[0]} sampled transitions)")
    axes.boxplot(
        [column if column.size else np.zeros(1) for column in finite],
        whis=(1, 99),
        showfliers=False,
    )
    axes.set_xlabel("dimension")
    axes.set_xticks(range(1, dims + 1), [str(d) if d % 4 == 0 else "" for d in range(dims)])
    for bound in (low, high):
        if bound is not None:
            axes.plot(range(1, dims + 1), bound, "r:", linewidth=0.8)
    return _png(figure)
