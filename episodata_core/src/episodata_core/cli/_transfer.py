"""``episodata import`` and ``export``: run importer and exporter plugins by name."""

from __future__ import annotations

import json
import warnings
from typing import TYPE_CHECKING, Any

from episodata_core.cli._command import Verb, arg
from episodata_core.cli._output import progress_wanted
from episodata_core.dataset import Dataset
from episodata_core.errors import EpisodataImportWarning, SchemaError
from episodata_core.transfer import export_datasets, import_dataset

if TYPE_CHECKING:
    import argparse

__all__ = ["COMMANDS", "parse_options"]


def parse_options(pairs: list[str] | None) -> dict[str, Any]:
    """Options from ``KEY=VALUE`` strings; each value is parsed as JSON, else kept as text."""
    options: dict[str, Any] = {}
    for pair in pairs or []:
        key, sep, text = pair.partition("=")
        if not sep or not key:
            raise SchemaError(f"option {pair!r}: write it as KEY=VALUE, e.g. -o seed=42")
        try:
            options[key.replace("-", "_")] = json.loads(text)
        except json.JSONDecodeError:
            options[key.replace("-", "_")] = text
    return options


def _cmd_import(args: argparse.Namespace) -> int:
    options = parse_options(args.option)
    with warnings.catch_warnings():
        if not args.quiet:
            # the summary printed below lists every import warning with its code
            warnings.simplefilter("ignore", EpisodataImportWarning)
        dataset, report = import_dataset(
            args.importer,
            args.source,
            args.destination,
            backend=args.backend,
            progress=progress_wanted(args.quiet),
            **options,
        )
    dataset.close()
    if not args.quiet:
        print(report.summary())
        print(f"wrote {args.destination}")
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    options = parse_options(args.option)
    for flag, name in (("offset", "offset"), ("per_env", "episodes_per_env"), ("seed", "seed")):
        value = getattr(args, flag)
        if value is not None:
            options[name] = value
    datasets = {}
    for spec in args.sources:
        label, sep, path = spec.rpartition("=")
        opened = Dataset.open(path if sep else spec, read_only=True)
        datasets[label if sep else opened.location.rstrip("/").rsplit("/", 1)[-1]] = opened  # type: ignore[union-attr]
    try:
        report = export_datasets(
            args.exporter,
            datasets,
            args.destination,
            progress=progress_wanted(args.quiet),
            **options,
        )
    finally:
        for dataset in datasets.values():
            dataset.close()
    if not args.quiet:
        summary = getattr(report, "summary", None)
        print(summary() if callable(summary) else report)
        print(f"wrote {args.destination}")
    return 0


COMMANDS: tuple[Verb, ...] = (
    Verb(
        "import",
        help="import a foreign file into a new dataset (importers: d4rl, lewm, ...)",
        run=_cmd_import,
        arguments=(
            arg("importer", help="registered importer name (see: episodata plugins)"),
            arg("source", help="file or folder to import"),
            arg("destination", help="new dataset folder"),
            arg("--backend", help="backend of the new dataset (default: zarr)"),
            arg(
                "-o",
                "--option",
                action="append",
                metavar="KEY=VALUE",
                help="an importer option (repeatable); VALUE is JSON or a plain string",
            ),
            arg("-q", "--quiet", action="store_true", help="print nothing on success"),
        ),
    ),
    Verb(
        "export",
        help="export datasets to a foreign format (exporters: offset-segments, ...)",
        run=_cmd_export,
        arguments=(
            arg("exporter", help="registered exporter name (see: episodata plugins)"),
            arg(
                "sources",
                nargs="+",
                metavar="[LABEL=]SOURCE",
                help="dataset folders; the label defaults to the folder name",
            ),
            arg("destination", help="output folder"),
            arg("--offset", type=int, help="offset-segments: transitions per segment (K)"),
            arg("--per-env", type=int, help="offset-segments: segments per environment"),
            arg("--seed", type=int, help="offset-segments: sampling seed"),
            arg(
                "-o",
                "--option",
                action="append",
                metavar="KEY=VALUE",
                help="an exporter option (repeatable); VALUE is JSON or a plain string",
            ),
            arg("-q", "--quiet", action="store_true", help="print nothing on success"),
        ),
    ),
)
