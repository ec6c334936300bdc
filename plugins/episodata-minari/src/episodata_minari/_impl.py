"""The Minari import itself: validate everything, then write the episodes one by one.

Order (validation before the first write): the folder and ``metadata.json`` (``_source``),
the structure of ``main_data.hdf5`` (``_layout``), the flag values, a decoding pre-pass over
JPEG-encoded images, the warnings; only then the first write.

Minari stores each episode action-out *with* its final observation (docs/minari.md,
"What maps to what"): ``observations``
and ``infos`` hold T + 1 rows, ``actions``, ``rewards`` and the flags T. Row 0 is the reset
row, and ``actions[t]``, ``rewards[t]`` are step t + 1, the step that led to observation
row t + 1, so every step is kept and the conversion is a split of row 0 from the rest.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from episodata_core.errors import FormatError
from episodata_core.importing import (
    PendingEpisodes,
    WarningLog,
    field_reports,
    flag_counts,
    source_record,
)
from episodata_core.transfer import ImportReport, ImportResult
from episodata_minari._images import decode_jpeg_rows, pad_jpeg_rows
from episodata_minari._layout import inspect_file, open_file
from episodata_minari._source import KNOWN_VERSIONS, resolve_source, version_is_known

if TYPE_CHECKING:
    import numpy.typing as npt

    from episodata_core.dataset import Dataset
    from episodata_core.schema import DatasetSchema
    from episodata_minari._layout import EpisodeEntry, Layout, Leaf
    from episodata_minari._options import MinariOptions

__all__ = ["import_source", "read_schema"]

IMAGE_CACHE_BYTES = 256 << 20
"""Decoded images the pre-pass keeps for the write pass; beyond this they are decoded again."""
SHOWN = 5


def read_schema(source: str, options: MinariOptions) -> DatasetSchema:
    """The schema an import of ``source`` produces; raises on a malformed dataset."""
    found = resolve_source(source)
    with open_file(found) as handle:
        return inspect_file(handle, found, options).schema


@dataclass(frozen=True)
class Flags:
    """The episode-level flags: ``terminations[T-1]`` and ``truncations[T-1]``."""

    terminated: npt.NDArray[np.bool_]
    truncated: npt.NDArray[np.bool_]


def import_source(source: str, dataset: Dataset, options: MinariOptions) -> ImportResult:
    """Validate ``source`` completely, then append its episodes to ``dataset``."""
    found = resolve_source(source)
    log = WarningLog(repr(source), package="episodata_minari", noun="dataset")
    if not version_is_known(found.minari_version):
        low, high = (".".join(map(str, v)) for v in KNOWN_VERSIONS)
        log.add(
            "unknown_minari_version",
            f"metadata.json gives minari_version {found.minari_version!r}; this importer knows "
            f"the layout of minari {low} to {high}. Check the imported episodes",
        )
    with open_file(found) as handle:
        layout = inspect_file(handle, found, options)
        for code, message, count in layout.warnings:
            log.add(code, message, count)
        flags = _read_flags(handle, layout)
        images = _decode_pass(handle, layout)
        log.finish(strict=options.strict)  # the last check before the first write
        # episodes are committed together, up to 64 MiB of arrays per add_episodes call
        pending = PendingEpisodes(dataset)
        for position, entry in enumerate(layout.episodes):
            if entry.steps:
                episode = _episode(handle[entry.name], layout, entry, options, images)
                episode["terminated"] = bool(flags.terminated[position])
                episode["truncated"] = bool(flags.truncated[position])
                pending.add(episode)
        pending.write()
    return _result(layout, options, flags, log)


def _read_flags(handle: Any, layout: Layout) -> Flags:
    """Validated flags; a True flag before the last step is a :class:`FormatError`."""
    where = repr(layout.source.given)
    count = len(layout.episodes)
    ends = {key: np.zeros(count, dtype=bool) for key in ("terminations", "truncations")}
    early: list[str] = []
    for position, entry in enumerate(layout.episodes):
        for key, flags in ends.items():
            values = _flag_values(handle[entry.name][key], f"{where}: {entry.name}/{key}")
            rows = np.flatnonzero(values[:-1])
            if rows.size:
                early.append(f"{entry.name}/{key} at row(s) {rows[:SHOWN].tolist()}")
            flags[position] = bool(values[-1]) if values.size else False
    if early:
        raise FormatError(
            f"{where}: a flag is True before the last step of its episode ("
            + "; ".join(early[:SHOWN])
            + (f"; and {len(early) - SHOWN} more" if len(early) > SHOWN else "")
            + "). A Minari episode ends at its first termination or truncation; the file "
            "is damaged or joins several episodes in one group"
        )
    return Flags(ends["terminations"], ends["truncations"])


def _flag_values(dataset: Any, where: str) -> npt.NDArray[np.bool_]:
    values = np.asarray(dataset[()])
    values = values.reshape(values.shape[0])
    if values.dtype.kind == "b":
        return values
    bad = np.flatnonzero((values != 0) & (values != 1))
    if bad.size:
        shown = ", ".join(f"row {int(r)}: {values[r].item()!r}" for r in bad[:SHOWN])
        raise FormatError(
            f"{where} must hold bool or 0/1 values; {bad.size} row(s) do not ({shown}). The "
            "file is damaged"
        )
    return np.asarray(values != 0, dtype=bool)


def _decode_pass(handle: Any, layout: Layout) -> dict[tuple[str, str], npt.NDArray[np.uint8]]:
    """Decode every JPEG-encoded image once before the first write; keep what fits."""
    kept: dict[tuple[str, str], npt.NDArray[np.uint8]] = {}
    used = 0
    for leaf in layout.leaves:
        if leaf.kind != "jpeg":
            continue
        for entry in layout.episodes:
            decoded = _decode(handle[entry.name], leaf, layout)
            if used + decoded.nbytes <= IMAGE_CACHE_BYTES:
                kept[entry.name, leaf.source] = decoded
                used += decoded.nbytes
    return kept


def _decode(group: Any, leaf: Leaf, layout: Layout) -> npt.NDArray[np.uint8]:
    where = f"{layout.source.given!r}: {group.name.lstrip('/')}/{leaf.source}"
    return decode_jpeg_rows(group[leaf.source][()], leaf.shape, where)


def _read(
    group: Any, leaf: Leaf, layout: Layout, images: dict[tuple[str, str], npt.NDArray[np.uint8]]
) -> npt.NDArray[Any]:
    if leaf.kind == "jpeg":
        cached = images.get((group.name.lstrip("/"), leaf.source))
        return cached if cached is not None else _decode(group, leaf, layout)
    if leaf.kind == "jpeg_bytes":
        return pad_jpeg_rows(group[leaf.source][()], leaf.shape[0])
    if leaf.kind == "string":
        return np.asarray(group[leaf.source].asstr()[()], dtype=leaf.dtype)
    return np.asarray(group[leaf.source][()])


def _episode(
    group: Any,
    layout: Layout,
    entry: EpisodeEntry,
    options: MinariOptions,
    images: dict[tuple[str, str], npt.NDArray[np.uint8]],
) -> dict[str, Any]:
    """One episode in the action-in bulk form of ``Dataset.add_episodes`` (views of the reads)."""
    by_role: dict[str, dict[str, npt.NDArray[Any]]] = {"observation": {}, "action": {}, "info": {}}
    for leaf in layout.leaves:
        by_role[leaf.role][leaf.key] = _read(group, leaf, layout, images)
    # squeezes a (T, 1) reward column; the dtype stays as stored
    rewards = np.asarray(group["rewards"][()]).reshape(entry.steps)
    observations = by_role["observation"]
    episode: dict[str, Any] = {
        "initial_observation": {key: values[0] for key, values in observations.items()},
        "observations": {key: values[1:] for key, values in observations.items()},
        "actions": by_role["action"],
        "rewards": {options.field_names.reward: rewards},
    }
    if by_role["info"]:
        episode["initial_info"] = {key: values[0] for key, values in by_role["info"].items()}
        episode["infos"] = {key: values[1:] for key, values in by_role["info"].items()}
    return episode


def _result(layout: Layout, options: MinariOptions, flags: Flags, log: WarningLog) -> ImportResult:
    found = layout.source
    steps = np.asarray([entry.steps for entry in layout.episodes], dtype=np.int64)
    kept = steps > 0
    terminated, truncated = flags.terminated[kept], flags.truncated[kept]
    imported = [entry for entry in layout.episodes if entry.steps]
    report = ImportReport(
        rows_read=layout.rows,
        episodes_found=len(layout.episodes),
        episodes_imported=len(imported),
        episodes_skipped={"empty": int((~kept).sum())} if not kept.all() else {},
        transitions=int(steps.sum()),
        final_transitions_dropped=0,
        final_obs_source={"observations": len(imported)} if imported else {},
        flag_counts=flag_counts(terminated, truncated),
        warnings=list(log.records),
        fields=field_reports(layout.schema, layout.source_keys),
    )
    record = {
        "format": "minari",
        # bytes and sha256 describe the data file, main_data.hdf5; file names the source
        "source": source_record(
            found.hdf5_path,
            hash_source=options.hash_source,
            file=Path(found.given).name,
            dataset_id=found.dataset_id,
            minari_version=found.minari_version,
            data_format="hdf5",
            total_episodes=found.total_episodes,
            total_steps=found.total_steps,
            jpeg_encoding=found.metadata.get("jpeg_encoding"),
            decoded_images=[leaf.source for leaf in layout.leaves if leaf.kind == "jpeg"],
            jpeg_bytes_kept=[leaf.source for leaf in layout.leaves if leaf.kind == "jpeg_bytes"],
        ),
        "alignment": {"source_convention": "action-out", "converted_at_import": True},
        "episodes": {
            "id": [entry.id for entry in imported],
            "seed": [entry.seed for entry in imported],
        },
    }
    return ImportResult(report=report, record=record)
