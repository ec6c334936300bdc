"""The one table of a run, as Markdown: a row per system, then a row per target."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from benchmarks.results import Figure, WorkloadResult

__all__ = ["HEADER", "render", "summary"]

HEADER = (
    "workload",
    "system",
    "rate",
    "unit",
    "x ceiling",
    "p50 ms",
    "p99 ms",
    "first ms",
    "peak RSS MB",
    "held MB",
    "disk MB",
    "note",
)


def _number(value: float | None) -> str:
    if value is None or np.isnan(value):
        return "-"
    size = abs(value)
    if size >= 100:
        return f"{value:,.0f}"
    if size >= 10:
        return f"{value:.1f}"
    if size >= 0.1:
        return f"{value:.2f}"
    return f"{value:.3f}"


def _ceiling(result: WorkloadResult, figure: Figure) -> Figure | None:
    name = figure.extra.get("ceiling")
    if name is not None:
        return result.figure(str(name))
    return next((f for f in result.figures if f.role == "ceiling" and f.ok), None)


def _row(result: WorkloadResult, figure: Figure) -> list[str]:
    ceiling = _ceiling(result, figure)
    ratio = "-"
    if figure.role != "ceiling" and ceiling is not None and ceiling.ok and figure.ok:
        assert ceiling.rate is not None
        assert figure.rate is not None
        ratio = f"{figure.rate / ceiling.rate:.2f}"
    role = {"episodata": "", "ceiling": " (ceiling)", "peer": " (peer)"}[figure.role]
    note = figure.note if figure.status == "ok" else figure.status
    return [
        result.id,
        f"{figure.system}{role}",
        _number(figure.rate) if figure.ok else "-",
        figure.unit,
        ratio,
        _number(figure.p50_ms),
        _number(figure.p99_ms),
        _number(figure.first_ms),
        _number(figure.rss_peak_mb),
        _number(figure.rss_held_mb),
        _number(figure.disk_mb),
        note.replace("|", "/").splitlines()[0][:120] if note else "",
    ]


def render(results: list[WorkloadResult]) -> str:
    """The Markdown table: every system's figures, then the targets of each workload."""
    rows: list[list[str]] = []
    for result in results:
        if result.status != "ok" and not result.figures:
            rows.append([result.id, "(workload)", *["-"] * 9, result.status[:120]])
        rows += [_row(result, figure) for figure in result.figures]
        for target in result.targets:
            text = target.describe() + (f"; {target.note}" if target.note else "")
            rows.append([result.id, "target", *[""] * 9, text.replace("|", "/")])
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(HEADER)
    ]
    widths[-1] = len(HEADER[-1])  # the note column is ragged
    lines = [
        "| " + " | ".join(h.ljust(w) for h, w in zip(HEADER, widths, strict=True)) + " |",
        "|" + "|".join("-" * (w + 2) for w in widths) + "|",
    ]
    for row in rows:
        cells = [
            c.ljust(w) if i < 2 or i == 11 else c.rjust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def summary(results: list[WorkloadResult]) -> str:
    """One line: how many targets were met, missed, or not measured."""
    verdicts = [t.met for r in results for t in r.targets]
    met = sum(v is True for v in verdicts)
    missed = sum(v is False for v in verdicts)
    unknown = sum(v is None for v in verdicts)
    return f"targets: {met} met, {missed} missed, {unknown} not measured"
