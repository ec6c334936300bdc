"""``episodata migrate``: convert a dataset of an older format generation to today's."""

from __future__ import annotations

from typing import TYPE_CHECKING

from episodata_core.cli._command import Verb, arg
from episodata_core.cli._output import progress_wanted
from episodata_core.dataset import Dataset
from episodata_core.generations import FORMAT_GENERATION

if TYPE_CHECKING:
    import argparse

__all__ = ["COMMANDS"]


def _cmd_migrate(args: argparse.Namespace) -> int:
    source = Dataset.open(args.source, read_only=True)
    try:
        generation = source.manifest.format_generation
        # the same backend by default: a 0.2 zarr dataset becomes a zarr dataset of today
        migrated = source.copy_to(
            args.destination,
            backend=args.backend or source.manifest.backend,
            progress=progress_wanted(args.quiet),
            resume=args.resume,
        )
        backend = migrated.manifest.backend
        migrated.close()
    finally:
        source.close()
    if not args.quiet:
        print(
            f"migrated {source.num_episodes} episodes from format generation {generation} "
            f"({args.source}) to {FORMAT_GENERATION} ({args.destination}, backend {backend!r})"
        )
    return 0


COMMANDS: tuple[Verb, ...] = (
    Verb(
        "migrate",
        help="convert a dataset of an older format generation (episodata 0.2) to today's",
        run=_cmd_migrate,
        arguments=(
            arg("source", help="dataset folder to read (any format generation)"),
            arg("destination", help="new dataset folder to create"),
            arg("--backend", help="backend of the new dataset (default: the source's)"),
            arg(
                "--resume",
                action="store_true",
                help="finish an interrupted migration into DESTINATION, keeping what it wrote",
            ),
            arg("-q", "--quiet", action="store_true", help="no progress bar or summary"),
        ),
        description=(
            "Convert a dataset written by an older episodata (format generation 0.2) to "
            f"today's layout (generation {FORMAT_GENERATION}), keeping every episode id, flag, "
            "info field, metadata and ongoing episode (an ongoing episode stays ongoing). The "
            "new dataset is marked incomplete until it is done: an interrupted migration is "
            "refused by open, replaced by running the same command again, or finished by "
            "--resume."
        ),
    ),
)
