"""Self-contained HTML reports of episodata datasets.

``render_report(dataset, "report.html")`` writes one page with histograms, per-field
statistics, frames of image fields and the schema. matplotlib (the ``plots`` extra,
``pip install "episodata[report]"``) draws the histograms; it is imported only while a
report is rendered, and without it the page shows tables instead.
"""

from __future__ import annotations

from episodata_report._html import SECTIONS
from episodata_report._render import render_report

__all__ = ["SECTIONS", "__version__", "render_report"]

__version__ = "0.3.0"
