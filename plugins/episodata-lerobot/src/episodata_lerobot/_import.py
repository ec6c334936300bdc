"""The LeRobot import: check everything, then read the episodes window by window (§8.2).

Order: ``info.json`` and the features (``_source``), the ``meta/`` tables, every data
file's bookkeeping, PNG headers and video frame counts (``_tables``), the warnings; only
then the first write. Episodes are read in windows of adjacent episodes whose decoded
frames fit ``read_budget_bytes``, and each window is written before the next is read; an
episode larger than the budget is read and written in blocks that fit it (``_stream``).

LeRobot frames are action-out without a final observation: frame t holds the observation
at which action t was taken and ``next.reward`` t is what it earned. ``drop`` keeps the
T - 1 exact transitions; ``missing`` keeps all T and fills the unknown last row.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from episodata_core.errors import FormatError, SchemaError
from episodata_core.importing import PendingEpisodes, WarningLog, field_reports, flag_counts
from episodata_core.schema import DatasetSchema, FieldSpec
from episodata_core.transfer import ImportReport, ImportResult
from episodata_lerobot._decode import decode_video_into, open_video
from episodata_lerobot._source import read_source
from episodata_lerobot._stream import (
    TASK_KEY,
    VALID_KEY,
    allocate_columns,
    decode_into,
    fill_row,
    stream_episode,
)
from episodata_lerobot._tables import open_parquet, read_tables

if TYPE_CHECKING:
    import numpy.typing as npt

    from episodata_core.dataset import Dataset
    from episodata_lerobot._options import LeRobotImportOptions
    from episodata_lerobot._source import Feature, LeRobotSource
    from episodata_lerobot._tables import EpisodeEntry, Tables

__all__ = ["TASK_KEY", "VALID_KEY", "import_source", "read_schema"]


def read_schema(source: str, options: LeRobotImportOptions) -> DatasetSchema:
    """The schema an import of ``source`` gives; reads info.json and meta/episodes only."""
    found = read_source(source)
    return _schema(found, options, _multi_task(found))


def _multi_task(found: LeRobotSource) -> bool:
    import pyarrow.compute as pc

    from episodata_lerobot._legacy import read_jsonl_episodes
    from episodata_lerobot._tables import _read

    if found.legacy:
        return any(len(row["tasks"]) > 1 for row in read_jsonl_episodes(found))
    for path in sorted((found.root / "meta" / "episodes").glob("chunk-*/file-*.parquet")):
        handle = open_parquet(path, found.where)
        if "tasks" not in handle.schema_arrow.names:
            raise FormatError(f"{found.where}: {path.relative_to(found.root)} lacks column 'tasks'")
        lengths = pc.list_value_length(
            _read(handle, path, found.where, columns=["tasks"]).column("tasks")
        )
        if pc.max(lengths).as_py() is not None and pc.max(lengths).as_py() > 1:
            return True
    return False


def _spec(feature: Feature) -> FieldSpec:
    image = feature.kind in ("image", "video")
    meta: dict[str, Any] = {"feature": feature.name, "dtype": feature.kind if image else str(feature.dtype),
                            "shape": list(feature.declared), "names": feature.names}  # fmt: skip
    if feature.info is not None:
        meta["info"] = feature.info
    return FieldSpec(
        feature.key,
        shape=feature.shape,
        dtype=feature.dtype,
        role=feature.role,
        layout="HWC" if image else None,
        low=0 if image else None,
        high=255 if image else None,
        metadata={"lerobot": meta},
    )


def _schema(found: LeRobotSource, options: LeRobotImportOptions, multi_task: bool) -> DatasetSchema:
    order = {"observation": 0, "action": 1, "reward": 2, "info": 3}
    fields = sorted(found.fields, key=lambda f: order[f.role])
    specs = [_spec(f) for f in fields]
    if multi_task:
        specs.append(FieldSpec(TASK_KEY, shape=(), dtype="int64", role="info",
                               description="task_index of the frame (meta/tasks.parquet)"))  # fmt: skip
    if options.final_observation == "missing":
        specs.append(FieldSpec(VALID_KEY, shape=(), dtype="bool", role="info",
                               description="False on the last observation row, which LeRobot does not store"))  # fmt: skip
    if not any(spec.role == "observation" for spec in specs):
        raise FormatError(f"{found.where}: meta/info.json declares no observation.* feature")
    try:
        return DatasetSchema(specs)
    except SchemaError as err:
        raise FormatError(f"{found.where}: the features' field keys collide ({err})") from err


@dataclass
class _Window:
    entries: list[EpisodeEntry]
    block_rows: int = 0
    """Above 0: one episode larger than the budget, read this many frames at a time."""

    @property
    def rows(self) -> tuple[int, int]:
        return self.entries[0].row_start, self.entries[-1].row_start + self.entries[-1].length


def _windows(tables: Tables, frame_bytes: int, budget: int) -> list[_Window]:
    """Adjacent episodes of one data file, grouped while their frames fit the budget."""
    windows: list[_Window] = []
    for entry in tables.episodes:
        if entry.length > 1 and entry.length * frame_bytes > budget:
            windows.append(_Window([entry], block_rows=max(1, budget // frame_bytes)))
            continue
        last = windows[-1].entries[-1] if windows and not windows[-1].block_rows else None
        if (
            last is not None
            and last.data_path == entry.data_path
            and entry.row_start == last.row_start + last.length
            and (sum(e.length for e in windows[-1].entries) + entry.length) * frame_bytes <= budget
        ):
            windows[-1].entries.append(entry)
        else:
            windows.append(_Window([entry]))
    return windows


def import_source(source: str, dataset: Dataset, options: LeRobotImportOptions) -> ImportResult:
    """Check ``source`` completely, then append its selected episodes to ``dataset``."""
    found = read_source(source)
    tables = read_tables(found, options.episodes, options.read_budget_bytes)
    multi_task = any(
        len(entry.tasks) > 1 for entry in _all_entries(found, tables, options.read_budget_bytes)
    )
    schema = _schema(found, options, multi_task)
    log = WarningLog(found.where, package="episodata_lerobot", noun="dataset")
    for name, why in found.skipped:
        log.add("ignored_feature", f"feature {name!r}: {why}; skipped")
    drop = options.final_observation == "drop"
    empty = [e for e in tables.episodes if e.length == 0 or (drop and e.length == 1)]
    log.finish(strict=options.strict)  # the last check before the first write
    frame_bytes = sum(math.prod(s.shape) * s.np_dtype.itemsize for s in schema) or 1
    # budget / 16 per add_episodes call, as the other importers: the backend's copies of
    # what it writes stay small next to the window
    pending = PendingEpisodes(dataset, max_bytes=max(1, options.read_budget_bytes // 16))
    flags: list[tuple[bool, bool]] = []
    kept: list[EpisodeEntry] = []
    for window in _windows(tables, frame_bytes, options.read_budget_bytes):
        if window.block_rows:
            entry = window.entries[0]
            pending.write()  # the episodes before it go first
            flags.append(stream_episode(found, schema, entry, options, window.block_rows, dataset))
            kept.append(entry)
            continue
        columns = _read_window(found, window, schema)
        offset = 0
        for entry in window.entries:
            rows = slice(offset, offset + entry.length)
            offset += entry.length
            if entry in empty:
                continue
            episode = _episode(found, schema, columns, rows, entry, options)
            flags.append((bool(episode["terminated"]), bool(episode["truncated"])))
            kept.append(entry)
            pending.add(episode)
        pending.write()  # before the next window, so no view keeps this one alive
    return _result(found, tables, schema, options, kept, flags, log, len(empty))


def _all_entries(found: LeRobotSource, tables: Tables, budget: int) -> list[EpisodeEntry]:
    # read_schema decides on every episode's task count; the import must agree with it
    if len(tables.episodes) == tables.found:
        return tables.episodes
    return read_tables(found, None, budget).episodes


def _read_window(found: LeRobotSource, window: _Window, schema: DatasetSchema) -> dict[str, Any]:
    """``{feature name: [rows, ...]}`` of the window's frames, images decoded.

    Row group by row group (an episode each, as LeRobot writes them) into arrays of the
    whole window: the PNG bytes of one row group at a time are in memory, not the window's.
    """
    import pyarrow as pa

    start, stop = window.rows
    path = window.entries[0].data_path
    where = f"{found.where}: {path.relative_to(found.root)}"
    handle = open_parquet(path, found.where)
    names = [f.name for f in found.features if f.kind != "video"] + ["task_index"]
    out = allocate_columns(found, stop - start)
    position = 0
    for group in range(handle.metadata.num_row_groups):
        count = handle.metadata.row_group(group).num_rows
        low, high = max(start, position), min(stop, position + count)
        if high > low:
            try:
                table = handle.read_row_group(group, columns=names)
            except (pa.ArrowException, OSError) as err:
                raise FormatError(f"{where} cannot be read ({err}); the file is damaged") from err
            table = table.slice(low - position, high - low)
            decode_into(found, table, out, low - start, low, where)
            del table
        position += count
    for feature in found.features:
        if feature.kind == "video":
            out[feature.name] = _read_video(found, window, feature)
    return out


def _read_video(found: LeRobotSource, window: _Window, feature: Feature) -> npt.NDArray[np.uint8]:
    """The window's frames of one video feature, decoded into one array."""
    out = np.empty((sum(e.length for e in window.entries), *feature.shape), dtype=np.uint8)
    at = 0
    containers: dict[Any, Any] = {}
    try:
        for entry in window.entries:
            path, begin, end = entry.videos[feature.name]
            where = f"{found.where}: {path.relative_to(found.root)}, episode {entry.index}"
            if path not in containers:
                containers[path] = open_video(path, where)
            count = decode_video_into(containers[path], begin, end, found.fps,
                                      out[at : at + entry.length], where)  # fmt: skip
            if count != entry.length:
                raise FormatError(f"{where}: decoded {count} frames, expected {entry.length}")
            at += entry.length
    finally:
        for container in containers.values():
            container.close()
    return out


def _episode(
    found: LeRobotSource,
    schema: DatasetSchema,
    columns: dict[str, Any],
    rows: slice,
    entry: EpisodeEntry,
    options: LeRobotImportOptions,
) -> dict[str, Any]:
    """One episode in the action-in bulk form (views of the window where possible)."""
    by_role: dict[str, dict[str, npt.NDArray[Any]]] = {
        "observation": {},
        "action": {},
        "reward": {},
        "info": {},
    }
    for feature in found.fields:
        values = columns[feature.name][rows]
        by_role[feature.role][feature.key] = values.reshape((values.shape[0], *feature.shape))
    if TASK_KEY in {spec.key for spec in schema if spec.role == "info"}:
        by_role["info"][TASK_KEY] = columns["task_index"][rows]
    done = found.done
    last_done = bool(columns[done.name][rows].reshape(-1)[-1]) if done is not None else False
    if done is not None:
        early = np.flatnonzero(columns[done.name][rows].reshape(-1)[:-1])
        if early.size:
            raise FormatError(
                f"{found.where}: episode {entry.index}: next.done is True at frame(s) "
                f"{early[:5].tolist()} before its last frame; a LeRobot episode ends at its first done"
            )
    n = entry.length
    observations, infos = by_role["observation"], by_role["info"]
    if options.final_observation == "drop":
        # frames 0..T-1 are T observations; actions and rewards 0..T-2 lead between them.
        # The kept episode ends at a known, non-terminal observation: truncated.
        episode: dict[str, Any] = {
            "initial_observation": {k: v[0] for k, v in observations.items()},
            "observations": {k: v[1:] for k, v in observations.items()},
            "actions": {k: v[: n - 1] for k, v in by_role["action"].items()},
            "rewards": {k: v[: n - 1] for k, v in by_role["reward"].items()},
            "terminated": False,
            "truncated": True,
        }
    else:
        infos[VALID_KEY] = np.arange(n + 1) < n
        episode = {
            "initial_observation": {k: v[0] for k, v in observations.items()},
            "observations": {
                k: np.concatenate([v[1:], fill_row(v)]) for k, v in observations.items()
            },
            "actions": by_role["action"],
            "rewards": by_role["reward"],
            "terminated": last_done and options.done_means == "terminated",
            "truncated": last_done and options.done_means == "truncated",
        }
        infos = {
            k: v if k == VALID_KEY else np.concatenate([v, fill_row(v)]) for k, v in infos.items()
        }
    if infos:
        episode["initial_info"] = {k: v[0] for k, v in infos.items()}
        episode["infos"] = {k: v[1:] for k, v in infos.items()}
    return {
        k: v
        for k, v in episode.items()
        if not (isinstance(v, dict) and not v and k in ("actions", "rewards"))
    }


def _result(
    found: LeRobotSource,
    tables: Tables,
    schema: DatasetSchema,
    options: LeRobotImportOptions,
    kept: list[EpisodeEntry],
    flags: list[tuple[bool, bool]],
    log: WarningLog,
    empty: int,
) -> ImportResult:
    drop = options.final_observation == "drop"
    terminated = np.asarray([f[0] for f in flags], dtype=bool)
    truncated = np.asarray([f[1] for f in flags], dtype=bool)
    skipped: dict[str, int] = {}
    if empty:
        skipped["empty"] = empty
    if len(tables.episodes) < tables.found:
        skipped["not_selected"] = tables.found - len(tables.episodes)
    sources = {f.qualified_key: f.name for f in found.fields}
    if options.final_observation == "missing":
        sources[f"info/{VALID_KEY}"] = ""
    report = ImportReport(
        rows_read=sum(e.length for e in tables.episodes),
        episodes_found=tables.found,
        episodes_imported=len(kept),
        episodes_skipped=skipped,
        transitions=sum(e.length - 1 if drop else e.length for e in kept),
        final_transitions_dropped=len(kept) if drop else 0,
        final_obs_source={"dropped" if drop else "missing": len(kept)} if kept else {},
        flag_counts=flag_counts(terminated, truncated),
        warnings=list(log.records),
        fields=field_reports(schema, sources),
    )
    info = found.info
    record = {
        "format": "lerobot",
        "source": {
            "file": found.root.name,
            "bytes": sum(path.stat().st_size for path in tables.files),
            "sha256": None,
            "codebase_version": info.get("codebase_version"),
            "fps": info.get("fps"),
            "robot_type": info.get("robot_type"),
            "total_episodes": info.get("total_episodes"),
            "total_frames": info.get("total_frames"),
            "tasks": tables.tasks,
            "features": {f.name: f.qualified_key for f in found.fields},
            "skipped_features": [name for name, _ in found.skipped],
            "final_observation": options.final_observation,
        },
        "alignment": {"source_convention": "action-out", "converted_at_import": True},
        "episodes": {
            "episode_index": [e.index for e in kept],
            "tasks": [list(e.tasks) for e in kept],
            "length": [e.length for e in kept],
            "dataset_from_index": [e.from_index for e in kept],
        },
    }
    return ImportResult(report=report, record=record)
