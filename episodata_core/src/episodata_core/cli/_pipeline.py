"""``episodata pipeline validate|run FILE``: configuration-driven pipelines."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

from episodata_core.cli._command import Verb, arg
from episodata_core.cli._output import counted, progress_wanted
from episodata_core.errors import EpisodataImportWarning
from episodata_core.pipeline import Pipeline

if TYPE_CHECKING:
    import argparse

__all__ = ["COMMANDS"]


def _cmd_pipeline(args: argparse.Namespace) -> int:
    pipeline = Pipeline.from_toml(
        args.file, allow_import_paths=args.allow_import_paths, workdir=args.workdir
    )
    if args.executor is not None or args.address is not None:
        pipeline = pipeline.with_executor(args.executor, address=args.address)
    if args.action == "validate":
        steps = pipeline.validate()
        print(
            f"{args.file}: valid ({len(steps)} steps, config sha256 {pipeline.config.digest()[:12]})"
        )
        for number, step in enumerate(steps, 1):
            print(f"  {number}. {step}")
        return 0
    with warnings.catch_warnings():
        if not args.quiet:
            # the import summary printed below lists every import warning with its code
            warnings.simplefilter("ignore", EpisodataImportWarning)
        result = pipeline.run(progress=progress_wanted(args.quiet))
    if not args.quiet:
        if result.import_report is not None:
            print(result.import_report.summary())
        print(
            f"dataset: {result.dataset.location or '(in memory)'} "
            f"({counted(result.dataset.num_episodes, 'episode')})"
        )
        for export in pipeline.config.exports:
            print(f"exported: {export.path} ({export.exporter})")
        ran = result.dataset.manifest.metadata.get("pipeline", {}).get("executor", {})
        if "tasks" in ran:  # an executor that split the work says how it went
            print(
                f"executor: {ran['name']}, {ran['tasks']} tasks on {ran['cluster'].get('cpus')} "
                f"CPUs ({ran.get('shards_reused', 0)} reused), {ran['seconds']}"
            )
    result.dataset.close()
    return 0


COMMANDS: tuple[Verb, ...] = (
    Verb(
        "pipeline",
        help="validate or run a TOML pipeline (import, store, export)",
        run=_cmd_pipeline,
        arguments=(
            arg("action", choices=("validate", "run"), help="validate: check only; run: execute"),
            arg("file", help="pipeline TOML file"),
            arg("-q", "--quiet", action="store_true", help="no progress bars or summary"),
            arg("--executor", help="run on this executor instead of the file's (local, ray)"),
            arg("--address", help="the executor's cluster address ('auto', 'ray://HOST:10001')"),
            arg(
                "--workdir",
                metavar="DIR",
                help="resolve the file's relative paths against DIR instead of the file's "
                "folder (e.g. --workdir . to run an example pipeline here)",
            ),
            arg(
                "--allow-import-paths",
                action="store_true",
                help="accept 'package.module:Class' for a plugin: imports (runs) that module; "
                "only for a file you trust",
            ),
        ),
        description=(
            "validate resolves every plugin by name and checks every options table without "
            "writing anything, and imports no module unless --allow-import-paths is given; "
            "run executes the steps and records the resolved config, its hash and the plugin "
            "versions in the dataset's manifest."
        ),
    ),
)
