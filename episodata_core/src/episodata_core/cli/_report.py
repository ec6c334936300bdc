"""``episodata report``: a self-contained HTML page about a stored dataset."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from episodata_core.cli._command import Command, arg
from episodata_core.dataset import Dataset
from episodata_core.errors import MissingDependencyError

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable

__all__ = ["COMMANDS", "default_output"]

INSTALL_HINT = 'pip install "episodata[report]"'


def default_output(path: str) -> Path:
    """``./<dataset-name>-report.html``: the dataset folder belongs to its backend."""
    name = Path(path).expanduser().resolve().name or "dataset"
    return Path(f"{name}-report.html")


def _renderer() -> Callable[..., Path]:
    try:
        from episodata_report import render_report
    except ModuleNotFoundError as err:
        if err.name is None or err.name.partition(".")[0] != "episodata_report":
            raise
        raise MissingDependencyError(
            "episodata report needs the episodata-report distribution, which is not "
            f"installed: {INSTALL_HINT}"
        ) from err
    return render_report


def _cmd_report(args: argparse.Namespace) -> int:
    render_report = _renderer()
    output = Path(args.output) if args.output else default_output(args.path)
    # read-only: a report never writes into the dataset (statistics are not stored)
    with Dataset.open(args.path, read_only=True) as dataset:
        written = render_report(dataset, output, episodes_for_frames=args.frame_episodes)
    print(f"wrote {written}")
    return 0


def _count(text: str) -> int:
    import argparse

    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


COMMANDS: tuple[Command, ...] = (
    Command(
        "report",
        help="write a self-contained HTML report of a dataset (histograms, statistics, frames)",
        run=_cmd_report,
        arguments=(
            arg("path", help="dataset folder"),
            arg(
                "-o",
                "--output",
                help="HTML file to write (default: ./<dataset-name>-report.html); its PNG "
                "images also go to <name>_files/ beside it",
            ),
            arg(
                "--frame-episodes",
                type=_count,
                default=3,
                metavar="N",
                help="episodes to show frames of, per image field (default: 3)",
            ),
        ),
        description=(
            "Write one HTML page with the episode length histogram, the return "
            "distribution, per-field statistics (min/max/mean/std, NaN counts), frames of "
            "image fields, terminated/truncated counts and the schema. Histograms need "
            f"matplotlib: {INSTALL_HINT}."
        ),
    ),
)
