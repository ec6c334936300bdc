"""``episodata report``: a self-contained HTML page about a stored dataset.

The ``episodata.commands`` entry point names :class:`ReportCommand`; this module stays
light (the renderer and matplotlib load when the command runs).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from episodata_core.commands import Arg, arg

if TYPE_CHECKING:
    import argparse

__all__ = ["ReportCommand", "default_output"]

INSTALL_HINT = 'pip install "episodata[report]"'


def default_output(path: str) -> Path:
    """``./<dataset-name>-report.html``: the dataset folder belongs to its backend."""
    name = Path(path).expanduser().resolve().name or "dataset"
    return Path(f"{name}-report.html")


def _count(text: str) -> int:
    import argparse

    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


class ReportCommand:
    """``episodata report PATH``: write one HTML page about a dataset."""

    name: ClassVar[str] = "report"
    description: ClassVar[str] = (
        "write a self-contained HTML report of a dataset (histograms, statistics, frames)"
    )
    epilog: ClassVar[str] = (
        "Write one self-contained HTML page: flag counts, data checks (NaN, infinite, "
        "out-of-bounds and constant values), episode length and return histograms, "
        "reward by step, per-dimension distributions, per-field statistics, frames of "
        "image fields, the schema and the provenance. Plots need "
        f"matplotlib: {INSTALL_HINT}."
    )
    arguments: ClassVar[tuple[Arg, ...]] = (
        arg("path", help="dataset folder"),
        arg(
            "-o",
            "--output",
            help="HTML file to write (default: ./<dataset-name>-report.html); its images "
            "are embedded in it",
        ),
        arg(
            "--frame-episodes",
            type=_count,
            default=3,
            metavar="N",
            help="episodes to show frames of, per image field (default: 3)",
        ),
        arg("-q", "--quiet", action="store_true", help="no progress bar"),
    )

    def run(self, args: argparse.Namespace) -> int:
        """Render the report of ``args.path`` (opened read-only) to ``args.output``."""
        from episodata_core.dataset import Dataset
        from episodata_report._render import render_report

        output = Path(args.output) if args.output else default_output(args.path)
        # read-only: a report never writes into the dataset (statistics are not stored)
        with Dataset.open(args.path, read_only=True) as dataset:
            written = render_report(
                dataset,
                output,
                episodes_for_frames=args.frame_episodes,
                progress=not args.quiet and sys.stderr.isatty(),
            )
        print(f"wrote {written}")
        return 0
