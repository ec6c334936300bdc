"""``episodata info``, ``verify`` and ``copy``: look at, check and migrate stored datasets."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from episodata_core import location, registry
from episodata_core.cli._command import Verb, arg, table
from episodata_core.cli._output import counted, progress_wanted
from episodata_core.dataset import Dataset
from episodata_core.errors import DatasetStateError, EpisodataError
from episodata_core.protocols import SupportsVerify

if TYPE_CHECKING:
    import argparse

__all__ = ["COMMANDS", "describe", "folder_size"]


def folder_size(folder: str | os.PathLike[str]) -> tuple[int, int]:
    """Total bytes and number of files under ``folder`` (symlinks are not followed)."""
    total = files = 0
    for root, _, names in os.walk(folder):
        for name in names:
            path = Path(root) / name
            if not path.is_symlink():
                total += path.stat().st_size
                files += 1
    return total, files


def _bytes(count: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if count < 1024 or unit == "GiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    raise AssertionError("unreachable")


def describe(dataset: Dataset) -> str:
    """The text of ``episodata info``: schema, counts, sizes, backend and provenance."""
    table_ = dataset.backend.episode_table()
    manifest = dataset.manifest
    ongoing = int(np.count_nonzero(table_.ongoing))
    finalized = len(table_) - ongoing
    # four disjoint counts that add up to `finalized`: an episode may carry both flags
    done = ~table_.ongoing
    both = int(np.count_nonzero(table_.terminated & table_.truncated & done))
    terminated = int(np.count_nonzero(table_.terminated & ~table_.truncated & done))
    truncated = int(np.count_nonzero(table_.truncated & ~table_.terminated & done))
    neither = finalized - terminated - truncated - both
    lines = [f"dataset: {dataset.location or '(in memory)'}"]
    if manifest.incomplete is not None:
        lines.append(f"incomplete: {manifest.incomplete.describe(len(table_))}")
    installed = {
        i.name: f"{i.distribution}=={i.version}"
        for i in registry.list_plugins("backend")
        if i.distribution
    }
    lines.append(
        f"backend: {manifest.backend} ({installed.get(manifest.backend, 'not installed')}), "
        f"format version {manifest.format_version}, generation {manifest.format_generation}"
    )
    lines.append(
        f"episodes: {len(table_)} ({finalized} finalized: {terminated} terminated, "
        f"{truncated} truncated, {both} both, {neither} neither; {ongoing} ongoing)"
    )
    steps = table_.length.astype(np.int64)
    if len(steps):
        lines.append(
            f"steps: {int(steps.sum())} transitions (episode length min {int(steps.min())}, "
            f"mean {float(steps.mean()):.1f}, max {int(steps.max())})"
        )
    if dataset.location is not None and not location.is_remote(dataset.location):
        size, files = folder_size(dataset.location)
        lines.append(f"on disk: {_bytes(size)} in {files} files")
    lines.append("")
    rows = [
        (
            spec.role,
            spec.key,
            spec.dtype,
            str(list(spec.shape)),
            ("optional " if spec.optional else "") + (spec.layout or ""),
        )
        for spec in dataset.schema
    ]
    lines.append(table(("ROLE", "KEY", "DTYPE", "SHAPE", "NOTES"), rows))
    provenance = manifest.provenance
    lines.append("")
    lines.append(
        f"written by episodata-core {provenance.episodata_version} on {provenance.created_at}"
    )
    lines += [f"  {p.role}: {p.distribution}=={p.version}" for p in provenance.plugins]
    for record in manifest.metadata.get("imports", []):
        source = record.get("source", {})
        lines.append(
            f"  import: {record.get('format')} from {source.get('file', '?')} "
            f"({record.get('episode_count', '?')} episodes)"
        )
    return "\n".join(lines)


def _cmd_info(args: argparse.Namespace) -> int:
    # an incomplete dataset is described too; its "incomplete:" line says what happened
    dataset = Dataset.open(
        args.path, read_only=True, allow_incomplete=True, storage_options=_options(args, args.path)
    )
    try:
        print(describe(dataset))
    finally:
        dataset.close()
    return 0


def _cmd_verify(args: argparse.Namespace) -> int:
    if "://" not in args.path and not Path(args.path).exists():
        # nothing there is not a damaged dataset: say what is wrong, as for any verb
        raise DatasetStateError(f"cannot verify {args.path!r}: there is no such folder")
    try:
        dataset = Dataset.open(
            args.path,
            read_only=True,
            allow_incomplete=True,
            storage_options=_options(args, args.path),
        )
    except EpisodataError as err:
        print(f"DAMAGED {args.path}: {err}")
        return 1
    incomplete = dataset.manifest.incomplete
    if incomplete is not None:
        # not damage, but not the dataset it was meant to be either: exit 1 as well
        print(f"INCOMPLETE {args.path}: {incomplete.describe(dataset.num_episodes)}")
    try:
        if not isinstance(dataset.backend, SupportsVerify):
            raise EpisodataError(
                f"backend {dataset.manifest.backend!r} records no checksums, so there is "
                "nothing to verify beyond the manifest (which is valid)"
            )
        problems = dataset.backend.verify()
    finally:
        dataset.close()
    for problem in problems:
        print(f"DAMAGED {problem}")
    if problems:
        print(f"{counted(len(problems), 'problem')} found in {args.path}")
        return 1
    what = f"manifest, index and checksums of {counted(dataset.num_episodes, 'episode')}"
    if incomplete is not None:
        print(f"the {what} are intact, but the dataset is incomplete")
        return 1
    print(f"OK {args.path}: {what}")
    return 0


def _cmd_copy(args: argparse.Namespace) -> int:
    source = Dataset.open(args.source, read_only=True, storage_options=_options(args, args.source))
    try:
        copy = source.copy_to(
            args.destination,
            storage_options=_options(args, args.destination),
            backend=args.backend,
            progress=progress_wanted(args.quiet),
            resume=args.resume,
        )
        copy.close()
    finally:
        source.close()
    if not args.quiet:
        print(f"copied {counted(source.num_episodes, 'episode')} to {args.destination}")
    return 0


def _options(args: argparse.Namespace, where: str) -> Any:
    """The ``--storage-option`` pairs, for a location on object storage."""
    pairs = location.options_from_pairs(getattr(args, "storage_option", None))
    return location.remote_options(where, pairs)


_STORAGE_OPTION = arg(
    "--storage-option",
    action="append",
    metavar="KEY=VALUE",
    help="how to reach s3:// or gs:// locations (endpoint, region, anonymous, profile...); repeat",
)

COMMANDS: tuple[Verb, ...] = (
    Verb(
        "info",
        help="describe a stored dataset: schema, counts, sizes, backend, provenance",
        run=_cmd_info,
        arguments=(arg("path", help="dataset folder or URL"), _STORAGE_OPTION),
    ),
    Verb(
        "verify",
        help="check a dataset against the checksums recorded when it was written",
        run=_cmd_verify,
        arguments=(arg("path", help="dataset folder or URL"), _STORAGE_OPTION),
        description=(
            "Check the manifest, the index and every stored checksum. Prints one line per "
            "damaged file, chunk or episode; exit code 1 when anything is damaged."
        ),
    ),
    Verb(
        "copy",
        help="copy a dataset to a new path, possibly on another backend",
        run=_cmd_copy,
        arguments=(
            arg("source", help="dataset folder to read"),
            arg("destination", help="new dataset folder to create"),
            arg("--backend", help="backend of the copy (default: zarr)"),
            arg(
                "--resume",
                action="store_true",
                help="finish an interrupted copy into DESTINATION, keeping what it copied",
            ),
            arg("-q", "--quiet", action="store_true", help="no progress bar"),
            _STORAGE_OPTION,
        ),
        description=(
            "Copy a dataset to a new path, possibly on another backend, keeping episode ids, "
            "flags and ongoing episodes. The copy is marked incomplete until it is done: "
            "running the same command again replaces an interrupted copy, --resume "
            "finishes it."
        ),
    ),
)
