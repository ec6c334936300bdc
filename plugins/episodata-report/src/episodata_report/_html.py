"""The report page: one HTML document with inline CSS and images as data URIs."""

from __future__ import annotations

import base64
import html
import json
import math
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import numpy as np

from episodata_report._plots import INSTALL_HINT, bin_edges

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    import numpy.typing as npt

    from episodata_core.schema import DatasetSchema
    from episodata_core.stats import FieldStats
    from episodata_report._checks import Finding
    from episodata_report._collect import FrameRow, ReportData

__all__ = ["SECTIONS", "Image", "page"]

SECTIONS: tuple[tuple[str, str], ...] = (
    ("summary", "Summary"),
    ("data-checks", "Data checks"),
    ("episode-lengths", "Episode lengths"),
    ("returns", "Returns"),
    ("rewards", "Reward by step"),
    ("distributions", "Distributions per dimension"),
    ("field-stats", "Field statistics"),
    ("frames", "Frames"),
    ("schema", "Schema"),
    ("provenance", "Provenance"),
)
"""``(id, title)`` of every section, in page order; the ids are stable."""

_DETAIL_LIMIT = 16  # fields with at most this many elements list them one by one

_CSS = """
body { font: 15px/1.45 system-ui, sans-serif; margin: 0; color: #1c2833; background: #fbfcfc; }
header { background: #1f3a5f; color: #fff; padding: 18px 32px; }
header h1 { margin: 0 0 4px; font-size: 24px; }
header p { margin: 0; opacity: 0.85; font-family: ui-monospace, monospace; }
nav a { color: #d6eaf8; margin-right: 14px; }
main { padding: 8px 32px 32px; max-width: 1150px; }
section { margin: 24px 0; padding: 4px 20px 16px; background: #fff;
          border: 1px solid #d5dbdb; border-radius: 6px; }
h2 { border-bottom: 2px solid #1f3a5f; padding-bottom: 4px; }
table { border-collapse: collapse; margin: 8px 0; font-size: 14px; }
th, td { border: 1px solid #d5dbdb; padding: 3px 8px; text-align: left; }
th { background: #eaf2f8; }
table.kv td:first-child { background: #eaf2f8; font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.hint { background: #fef9e7; border-left: 4px solid #f1c40f; padding: 6px 10px; }
.ok { background: #eafaf1; border-left: 4px solid #27ae60; padding: 6px 10px; }
pre { font-size: 12px; max-height: 360px; overflow: auto; background: #f4f6f6; padding: 8px; }
.counts span { display: inline-block; margin-right: 18px; font-size: 18px; }
.counts b { font-size: 26px; }
figure { margin: 8px 0 14px; }
figure img.frames { image-rendering: pixelated; border: 1px solid #d5dbdb; }
figcaption { font-size: 13px; color: #566573; }
img.plot { max-width: 100%; }
footer { padding: 0 32px 24px; color: #808b96; font-size: 13px; }
"""


class Image:
    """A PNG shown inline as a data URI: the page is one file that can be mailed or moved."""

    __slots__ = ("alt", "data")

    def __init__(self, data: bytes, alt: str) -> None:
        self.data, self.alt = data, alt

    def tag(self, css_class: str) -> str:
        encoded = base64.b64encode(self.data).decode("ascii")
        return (
            f'<img class="{css_class}" src="data:image/png;base64,{encoded}" alt="{_e(self.alt)}">'
        )


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _num(value: Any) -> str:
    number = float(value)
    if math.isnan(number):
        return "&ndash;"  # cells are HTML
    if math.isinf(number):
        return "&infin;" if number > 0 else "&minus;&infin;"
    if number.is_integer() and abs(number) < 1e15:
        return str(int(number))
    return f"{number:.6g}"


def _table(header: Sequence[str], rows: Iterable[Sequence[str]], numeric: int = 0) -> str:
    """A table; the last ``numeric`` columns are right-aligned (cells are HTML already)."""
    first = len(header) - numeric
    head = "".join(f"<th>{_e(cell)}</th>" for cell in header)
    body = "".join(
        "<tr>"
        + "".join(
            f'<td class="num">{cell}</td>' if i >= first else f"<td>{cell}</td>"
            for i, cell in enumerate(row)
        )
        + "</tr>"
        for row in rows
    )
    if not any(header):
        return f'<table class="kv"><tbody>{body}</tbody></table>'
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _section(section_id: str, body: str) -> str:
    title = dict(SECTIONS)[section_id]
    return f'<section id="{section_id}"><h2>{_e(title)}</h2>{body}</section>'


def _no_plots() -> str:
    return f'<p class="hint">Plots need matplotlib: <code>{_e(INSTALL_HINT)}</code></p>'


def _histogram_table(values: npt.NDArray[Any], *, integer: bool, what: str) -> str:
    counts, edges = np.histogram(values, bins=bin_edges(values, integer=integer))
    rows = [
        (f"{_num(low)} &ndash; {_num(high)}", _num(count))
        for low, high, count in zip(edges[:-1], edges[1:], counts, strict=True)
        if count
    ]
    return _table((what, "episodes"), rows, numeric=1)


def _spread(values: npt.NDArray[Any]) -> str:
    if not values.size:
        return "<p>No episodes.</p>"
    return (
        f"<p>min {_num(values.min())} · median {_num(np.median(values))} · "
        f"mean {_num(values.mean())} · max {_num(values.max())}</p>"
    )


def _summary(data: ReportData) -> str:
    counts = data.counts
    lengths = data.lengths
    steps = int(lengths.sum())
    badges = "".join(
        f"<span><b>{counts[name]}</b> {name}</span>"
        for name in ("terminated", "truncated", "ongoing", "unflagged")
        if counts[name] or name != "unflagged"
    )
    rows = [
        ("dataset", _e(data.location or "(in memory)")),
        ("backend", f"{_e(data.backend)} (format version {data.format_version})"),
        ("episodes", f"{len(lengths)} ({len(lengths) - counts['ongoing']} finalized)"),
        ("terminated", str(counts["terminated"])),
        ("truncated", str(counts["truncated"]) + " (not also terminated)"),
        ("ongoing", str(counts["ongoing"])),
        ("transitions (steps)", str(steps)),
        ("observations", f"{steps + len(lengths)} (T + 1 per episode)"),
        (
            "written by",
            f"episodata-core {_e(data.episodata_version)} on {_e(data.created_at)}",
        ),
    ]
    if counts["unflagged"]:
        rows.insert(6, ("finalized without a flag", str(counts["unflagged"])))
    return f'<p class="counts">{badges}</p>' + _table(("", ""), rows)


def _lengths(data: ReportData, plot: Image | None, plots: bool) -> str:
    body = _spread(data.lengths)
    if data.lengths.size and data.lengths.min() == data.lengths.max():
        n = data.lengths.size
        every = "The episode has" if n == 1 else f"All {n} episodes have"
        return f"<p>{every} {_num(data.lengths[0])} transitions.</p>"
    if plot is not None:
        return body + plot.tag("plot")
    if not plots:
        body += _no_plots()
    if data.lengths.size:
        body += _histogram_table(data.lengths, integer=True, what="transitions")
    return body


def _returns(data: ReportData, plot: Image | None, plots: bool) -> str:
    if not data.returns:
        return "<p>The schema has no scalar reward field.</p>"
    parts = []
    for key, values in data.returns.items():
        finite = values[np.isfinite(values)]
        note = (
            f" ({values.size - finite.size} with non-finite returns left out)"
            if (finite.size < values.size)
            else ""
        )
        parts.append(f"<h3>{_e(key)}</h3>{_spread(finite)}")
        if finite.size and finite.min() == finite.max():
            continue  # one value: the spread above says it all
        if plot is None and finite.size:
            parts.append(_histogram_table(finite, integer=False, what="return") + note)
        elif note:
            parts.append(f"<p>{_e(note.strip())}</p>")
    body = "<p>Sum of rewards of each finalized episode.</p>" + "".join(parts)
    if plot is not None:
        return body + plot.tag("plot")
    return body + ("" if plots else _no_plots())


def _stat_cells(stats: FieldStats) -> list[str]:
    return [
        _num(stats.total),
        _num(stats.nan_count),
        _num(stats.min),
        _num(stats.max),
        _num(stats.mean),
        _num(stats.std),
    ]


def _details(key: str, spec_layout: str | None, stats: FieldStats) -> str:
    size = math.prod(stats.shape)
    header = ("element", "values", "NaN", "min", "max", "mean", "std")
    if spec_layout and "C" in spec_layout.upper() and len(stats.shape) > 1:
        channel = spec_layout.upper().index("C")
        others = tuple(i for i in range(len(stats.shape)) if i != channel)
        per = stats.reduce(others)
        rows = [[f"channel {c}", *_stat_cells(_at(per, (c,)))] for c in range(per.shape[0])]
        label = "per channel"
    elif 1 < size <= _DETAIL_LIMIT:
        rows = [[_e(list(i)), *_stat_cells(_at(stats, i))] for i in np.ndindex(stats.shape)]
        label = "per element"
    else:
        return ""
    summary = f"<code>{_e(key)}</code> {label}"
    return f"<details><summary>{summary}</summary>{_table(header, rows, numeric=6)}</details>"


def _at(stats: FieldStats, index: tuple[int, ...]) -> FieldStats:
    from episodata_core.stats import FieldStats

    return FieldStats(
        stats.key,
        stats.count[index],
        stats.nan_count[index],
        stats.mean[index],
        stats.m2[index],
        stats.min[index],
        stats.max[index],
    )


def _field_stats(schema: DatasetSchema, stats: dict[str, FieldStats], coverage: str) -> str:
    header = ("field", "dtype", "shape", "values", "NaN", "min", "max", "mean", "std")
    rows = []
    details = []
    for key, value in stats.items():
        spec = schema[key]
        cells = _stat_cells(value.reduce())
        rows.append([f"<code>{_e(key)}</code>", _e(spec.dtype), _e(list(spec.shape)), *cells])
        details.append(_details(key, spec.layout, value))
    intro = (
        f"<p>{_e(coverage)} Observation and info fields count every observation (T + 1 per "
        "episode), action and reward fields every step (T). NaN values are counted apart and "
        "left out of min, max, mean and std (population std, ddof 0). Each row summarizes "
        "all elements of the field; <code>dataset.stats()</code> has them per element.</p>"
    )
    if not rows:
        return intro + "<p>No numeric fields.</p>"
    return intro + _table(header, rows, numeric=6) + "".join(details)


def _frames(rows: list[FrameRow], images: dict[tuple[str, int], Image], skipped: list[str]) -> str:
    if not rows and not skipped:
        return "<p>No image fields (fields with a <code>layout</code>) or no episodes.</p>"
    parts: list[str] = []
    current = None
    for row in rows:
        if row.field != current:
            current = row.field
            parts.append(f"<h3>{_e(row.field)}</h3>")
        when = ", ".join(str(step) for step in row.steps)
        what = "observations after steps" if row.role in ("observation", "info") else "steps"
        caption = f"episode {row.episode} · {row.length} transitions · {what} {when}"
        image = images[row.field, row.episode].tag("frames")
        parts.append(f"<figure>{image}<figcaption>{_e(caption)}</figcaption></figure>")
    parts += [f"<p>Not shown: {_e(reason)}</p>" for reason in skipped]
    intro = (
        "<p>Evenly spaced frames of the first episodes, left to right; the observation "
        "after step 0 is the reset observation.</p>"
    )
    return intro + "".join(parts)


def _schema(schema: DatasetSchema) -> str:
    def bounds(low: Any, high: Any) -> str:
        return "" if low is None and high is None else _e(f"{low} … {high}")

    rows = [
        [
            _e(spec.role),
            f"<code>{_e(spec.key)}</code>",
            _e(spec.dtype),
            _e(list(spec.shape)),
            _e(spec.layout or ""),
            "yes" if spec.optional else "",
            bounds(spec.low, spec.high),
            _e(spec.description),
        ]
        for spec in schema
    ]
    header = ("role", "key", "dtype", "shape", "layout", "optional", "bounds", "description")
    return _table(header, rows)


_FINDING_NAMES = {
    "nan": "NaN",
    "inf": "infinite",
    "below-low": "below bound",
    "above-high": "above bound",
    "constant": "constant",
}


def _checks(findings: list[Finding], fields: int) -> str:
    intro = (
        "<p>Every numeric field is checked for NaN and infinite values, values outside the "
        "schema's bounds and elements that never change (from the statistics of every "
        "value; fields with infinities or bound violations are read again to count them).</p>"
    )
    if not findings:
        return intro + f'<p class="ok">No findings in {fields} numeric fields.</p>'
    rows = [
        (
            f"<code>{_e(item.field)}</code>",
            _e(_FINDING_NAMES.get(item.kind, item.kind)),
            _e(item.detail),
            _num(item.count),
            f"{100 * item.count / max(item.of, 1):.3g} %",
        )
        for item in findings
    ]
    table = _table(("field", "check", "what", "count", "share"), rows, numeric=2)
    return intro + f'<p class="hint">{len(findings)} findings.</p>' + table


def _rewards(data: ReportData, plots: dict[str, Image], have_plots: bool) -> str:
    if not data.reward_curves:
        return "<p>No finalized episode with a scalar reward field.</p>"
    intro = (
        "<p>Reward at each step index, over the finalized episodes that reach it: the mean, "
        "the band from the smallest to the largest, and (dashed) how many episodes are "
        "that long.</p>"
    )
    if not have_plots:
        return intro + _no_plots()
    return intro + "".join(plots[key].tag("plot") for key in data.reward_curves if key in plots)


def _distributions(data: ReportData, plots: dict[str, Image], have_plots: bool) -> str:
    if not data.samples:
        return "<p>No numeric field small enough to plot per dimension (or no transitions).</p>"
    count = len(next(iter(data.samples.values())))
    intro = (
        f"<p>{count} transitions drawn uniformly (seed 0); observations where each action "
        "was taken, and the actions and rewards of those steps. Dotted red lines are the "
        "schema's bounds.</p>"
    )
    if not have_plots:
        return intro + _no_plots()
    return intro + "".join(plots[key].tag("plot") for key in data.samples if key in plots)


def _provenance(record: dict[str, Any]) -> str:
    rows = [
        ("written by", f"episodata-core {_e(record.get('episodata_version'))}"),
        ("created", _e(record.get("created_at"))),
        (
            "plugins",
            _e(", ".join(f"{p['distribution']} {p['version']}" for p in record["plugins"])),
        ),
    ]
    for number, item in enumerate(record.get("imports", [])):
        source = item.get("source", {}) if isinstance(item, dict) else {}
        what = f"{item.get('format', '?')} importer, file {source.get('file', '?')}"
        if source.get("bytes") is not None:
            what += f" ({_num(source['bytes'])} bytes)"
        rows.append((f"import {number + 1}", _e(what)))
    pipeline = record.get("pipeline")
    if isinstance(pipeline, dict):
        digest = str(pipeline.get("config_sha256", ""))[:12]
        rows.append(("pipeline", _e(f"config sha256 {digest}")))
    text = json.dumps(record, indent=1, default=str)
    if len(text) > 20_000:
        text = text[:20_000] + "\n... (truncated; the full record is in manifest.json)"
    raw = f"<details><summary>the full record</summary><pre>{_e(text)}</pre></details>"
    return _table(("", ""), rows) + raw


def page(
    data: ReportData,
    schema: DatasetSchema,
    *,
    title: str,
    plots: bool,
    lengths_plot: Image | None,
    returns_plot: Image | None,
    reward_plots: dict[str, Image],
    dimension_plots: dict[str, Image],
    frame_images: dict[tuple[str, int], Image],
    stats_coverage: str,
) -> str:
    """The whole HTML document."""
    nav = "".join(f'<a href="#{sid}">{_e(name)}</a>' for sid, name in SECTIONS)
    sections = [
        _section("summary", _summary(data)),
        _section("data-checks", _checks(data.findings, len(data.stats))),
        _section("episode-lengths", _lengths(data, lengths_plot, plots)),
        _section("returns", _returns(data, returns_plot, plots)),
        _section("rewards", _rewards(data, reward_plots, plots)),
        _section("distributions", _distributions(data, dimension_plots, plots)),
        _section("field-stats", _field_stats(schema, data.stats, stats_coverage)),
        _section("frames", _frames(data.frames, frame_images, data.skipped_frames)),
        _section("schema", _schema(schema)),
        _section("provenance", _provenance(data.provenance)),
    ]
    generated = datetime.now(UTC).isoformat(timespec="seconds")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>episodata report: {_e(title)}</title><style>{_CSS}</style></head><body>"
        f"<header><h1>episodata report: {_e(title)}</h1>"
        f"<p>{_e(data.location or '(in-memory dataset)')}</p><nav>{nav}</nav></header>"
        f"<main>{''.join(sections)}</main>"
        f"<footer>Generated by episodata-report on {generated}.</footer></body></html>\n"
    )
