"""The ``meta/`` tables and the data files' bookkeeping columns, read and checked (§8.1).

Everything an import can reject is found here, before the first write: the episodes
table against ``info.json``, every data file's row counts and indexes, the column types
against the declared shapes, every PNG header, and every video's frame count per episode.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from episodata_core.errors import FormatError, PartialFileError
from episodata_lerobot._decode import binary_values, count_video_frames, png_size, probe_video
from episodata_lerobot._legacy import read_jsonl_episodes, read_jsonl_tasks, v2_locations

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from episodata_lerobot._source import Feature, LeRobotSource

__all__ = ["EpisodeEntry", "Tables", "column_array", "open_parquet", "read_pieces", "read_tables"]

SHOWN = 5
_EPISODE_COLUMNS = ("episode_index", "tasks", "length", "data/chunk_index", "data/file_index",
                    "dataset_from_index", "dataset_to_index")  # fmt: skip
_VIDEO_COLUMNS = ("chunk_index", "file_index", "from_timestamp", "to_timestamp")


@dataclass(frozen=True)
class EpisodeEntry:
    """One row of ``meta/episodes`` (v2: ``meta/episodes.jsonl``) and where its frames are."""

    index: int
    length: int
    tasks: tuple[str, ...]
    data_path: Path
    row_start: int
    """The episode's first row in its data file."""
    from_index: int
    videos: dict[str, tuple[Path, float, float]] = field(default_factory=dict)
    """``{feature: (mp4, from_timestamp, to_timestamp)}``; a v2 mp4's span is ``(0, inf)``."""


@dataclass
class Tables:
    """What an import reads from ``meta/``, for the selected episodes."""

    episodes: list[EpisodeEntry]
    tasks: list[str]
    """Task strings by task_index."""
    found: int
    files: list[Path]
    """Every file the import reads."""


def open_parquet(path: Path, where: str, **kwargs: Any) -> Any:
    """A ``pyarrow.parquet.ParquetFile`` (``kwargs`` its options).

    A cut or damaged file is a :class:`PartialFileError`.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not path.is_file():
        raise FormatError(
            f"{where}: {str(path)!r} does not exist; the dataset folder is incomplete"
        )
    try:
        return pq.ParquetFile(path, **kwargs)
    except (pa.ArrowException, OSError) as err:
        raise PartialFileError(
            f"{where}: {str(path)!r} is not a readable parquet file ({err}); it is cut short "
            "or damaged (copy or download it again)"
        ) from err


def read_pieces(
    path: Path, where: str, columns: list[str], batch_rows: int, budget: int,
    groups: list[int] | None = None,
) -> Iterator[tuple[int, Any]]:  # fmt: skip
    """``(first row in the file, table)`` pieces of a parquet file's row groups, in order.

    A row group of at most ``budget`` bytes (uncompressed, as its metadata says) is read
    whole; a larger one in batches of ``batch_rows`` through a buffered stream, so that
    its bytes are never all in memory. (Batch reads of small groups would cost more
    memory than whole ones: the reader's buffers outlive the batches.)
    """
    import pyarrow as pa

    handle = open_parquet(path, where)
    metadata = handle.metadata
    starts = np.cumsum(
        [0] + [metadata.row_group(g).num_rows for g in range(metadata.num_row_groups)]
    )
    try:
        for group in range(metadata.num_row_groups) if groups is None else groups:
            at = int(starts[group])
            if metadata.row_group(group).total_byte_size <= budget:
                yield at, handle.read_row_group(group, columns=columns)
                continue
            buffered = open_parquet(path, where, buffer_size=4 << 20)
            for batch in buffered.iter_batches(batch_size=batch_rows, row_groups=[group],
                                               columns=columns):  # fmt: skip
                yield at, pa.Table.from_batches([batch])
                at += batch.num_rows
    except (pa.ArrowException, OSError) as err:
        raise PartialFileError(
            f"{where}: {str(path)!r} cannot be read ({err}); it is damaged"
        ) from err


def _read(handle: Any, path: Path, where: str, **kwargs: Any) -> Any:
    import pyarrow as pa

    try:
        return handle.read(**kwargs)
    except (pa.ArrowException, OSError) as err:
        raise PartialFileError(
            f"{where}: {str(path)!r} cannot be read ({err}); it is damaged"
        ) from err


def column_array(
    column: Any, rows: int, shape: tuple[int, ...], dtype: np.dtype[Any], where: str
) -> Any:
    """A numeric (possibly nested-list) Arrow column as ``[rows, *shape]`` of ``dtype``."""
    import pyarrow as pa

    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if array.null_count:
        raise FormatError(f"{where}: {array.null_count} missing (null) value(s)")
    while (
        pa.types.is_list(array.type)
        or pa.types.is_fixed_size_list(array.type)
        or pa.types.is_large_list(array.type)
    ):
        array = array.flatten()
        if array.null_count:
            raise FormatError(f"{where}: {array.null_count} missing (null) value(s)")
    values = array.to_numpy(zero_copy_only=False)
    size = math.prod(shape)
    if values.size != rows * size:
        per_row = values.size / rows if rows else 0
        raise FormatError(
            f"{where}: {per_row:g} values per frame, but meta/info.json declares shape "
            f"{list(shape)} ({size} values); the data does not match its info.json"
        )
    if values.dtype != dtype:
        raise FormatError(f"{where}: stored as {values.dtype}, but meta/info.json declares {dtype}")
    return values.reshape((rows, *shape))


def _check_type(feature: Feature, arrow_type: Any, where: str) -> None:
    """A column's Arrow type against the feature's dtype and declared shape."""
    import pyarrow as pa

    if feature.kind == "image":
        if not (pa.types.is_struct(arrow_type) and arrow_type.get_field_index("bytes") >= 0):
            raise FormatError(f"{where}: an image column is struct<bytes, path>, got {arrow_type}")
        return
    dims: list[int | None] = []
    leaf = arrow_type
    while (
        pa.types.is_list(leaf) or pa.types.is_fixed_size_list(leaf) or pa.types.is_large_list(leaf)
    ):
        dims.append(leaf.list_size if pa.types.is_fixed_size_list(leaf) else None)
        leaf = leaf.value_type
    try:
        stored = np.dtype(leaf.to_pandas_dtype())
    except (NotImplementedError, TypeError) as err:
        raise FormatError(f"{where}: column type {arrow_type} is not numeric") from err
    if stored != feature.dtype:
        raise FormatError(
            f"{where}: stored as {stored}, but meta/info.json declares {feature.dtype}"
        )
    if all(d is not None for d in dims):
        per_row = math.prod(d for d in dims if d is not None)
        if per_row != math.prod(feature.declared):
            raise FormatError(
                f"{where}: the column holds {per_row} value(s) per frame ({arrow_type}), but "
                f"meta/info.json declares shape {list(feature.declared)}; the data does not "
                "match its info.json"
            )


def read_tables(
    source: LeRobotSource, selection: list[int] | None, budget: int = 256 << 20
) -> Tables:
    """Read and check ``meta/`` and the bookkeeping of the selected episodes' files.

    PNG bytes are read ``budget / 16`` bytes at a time (one frame's pixels per row).
    """
    where = source.where
    tasks = read_jsonl_tasks(source) if source.legacy else _read_tasks(source)
    rows = read_jsonl_episodes(source) if source.legacy else _read_episodes(source)
    found = len(rows)
    if found != source.info["total_episodes"]:
        raise FormatError(
            f"{where}: {source.episodes_table} holds {found} episodes but info.json says total_episodes "
            f"= {source.info['total_episodes']}; the dataset is incomplete"
        )
    by_index = {int(row["episode_index"]): row for row in rows}
    if selection is None:
        chosen = [int(row["episode_index"]) for row in rows]
    else:
        unknown = [e for e in selection if e not in by_index]
        if unknown:
            raise FormatError(
                f"{where}: episodes={selection} names episode(s) {unknown}, which the dataset "
                f"does not hold (episode_index 0..{found - 1})"
            )
        chosen = list(selection)
    files: set[Path] = {source.root / "meta" / "info.json"}
    if source.legacy:
        # v2 rows carry no dataset_from_index: the global index runs on from episode to episode
        starts = np.cumsum([0] + [int(row["length"]) for row in rows]).tolist()
        entries = [_legacy_entry(source, by_index[e], int(starts[e]), files) for e in chosen]
    else:
        entries = [_entry(source, by_index[e], files) for e in chosen]
    _check_data_files(source, entries, len(tasks), budget)
    _check_videos(source, entries)
    files.update(entry.data_path for entry in entries)
    return Tables(entries, tasks, found, sorted(files))


def _read_tasks(source: LeRobotSource) -> list[str]:
    path = source.root / "meta" / "tasks.parquet"
    handle = open_parquet(path, source.where)
    table = _read(handle, path, source.where)
    if "task_index" not in table.column_names or "task" not in table.column_names:
        raise FormatError(f"{source.where}: meta/tasks.parquet needs columns task_index and task")
    indexes = table.column("task_index").to_pylist()
    names = table.column("task").to_pylist()
    if sorted(indexes) != list(range(len(indexes))):
        raise FormatError(
            f"{source.where}: meta/tasks.parquet task_index is not 0..{len(indexes) - 1}"
        )
    ordered = [""] * len(indexes)
    for index, name in zip(indexes, names, strict=True):
        ordered[index] = str(name)
    return ordered


def _read_episodes(source: LeRobotSource) -> list[dict[str, Any]]:
    folder = source.root / "meta" / "episodes"
    paths = sorted(folder.glob("chunk-*/file-*.parquet"))
    if not paths:
        raise FormatError(
            f"{source.where}: no meta/episodes/chunk-*/file-*.parquet; the dataset is incomplete"
        )
    videos = [f.name for f in source.fields if f.kind == "video"]
    wanted = [*_EPISODE_COLUMNS, *(f"videos/{v}/{c}" for v in videos for c in _VIDEO_COLUMNS)]
    rows: list[dict[str, Any]] = []
    for path in paths:
        handle = open_parquet(path, source.where)
        missing = [name for name in wanted if name not in handle.schema_arrow.names]
        if missing:
            raise FormatError(
                f"{source.where}: {path.relative_to(source.root)} lacks columns {missing}"
            )
        rows += _read(handle, path, source.where, columns=wanted).to_pylist()
    rows.sort(key=lambda row: int(row["episode_index"]))
    indexes = [int(row["episode_index"]) for row in rows]
    if indexes != list(range(len(indexes))):
        raise FormatError(
            f"{source.where}: meta/episodes episode_index is not 0..{len(indexes) - 1}"
        )
    return rows


def _legacy_entry(
    source: LeRobotSource, row: dict[str, Any], from_index: int, files: set[Path]
) -> EpisodeEntry:
    """A v2 episode: its own parquet file and its own mp4s, whole."""
    index = int(row["episode_index"])
    data_path, videos = v2_locations(source, index)
    files.update(path for path, _, _ in videos.values())
    return EpisodeEntry(index, int(row["length"]), tuple(row["tasks"]), data_path, -1,
                        from_index, videos)  # fmt: skip


def _entry(source: LeRobotSource, row: dict[str, Any], files: set[Path]) -> EpisodeEntry:
    data_path = source.path_of(
        "data_path",
        chunk_index=int(row["data/chunk_index"]),
        file_index=int(row["data/file_index"]),
    )
    videos: dict[str, tuple[Path, float, float]] = {}
    for feature in source.fields:
        if feature.kind != "video":
            continue
        prefix = f"videos/{feature.name}/"
        path = source.path_of(
            "video_path",
            video_key=feature.name,
            chunk_index=int(row[prefix + "chunk_index"]),
            file_index=int(row[prefix + "file_index"]),
        )
        if not path.is_file():
            raise FormatError(
                f"{source.where}: episode {row['episode_index']}: video file "
                f"{str(path.relative_to(source.root))!r} of feature {feature.name!r} is missing; "
                "the dataset folder is incomplete (copy or download videos/ again)"
            )
        files.add(path)
        videos[feature.name] = (
            path,
            float(row[prefix + "from_timestamp"]),
            float(row[prefix + "to_timestamp"]),
        )
    length, start, stop = (
        int(row[k]) for k in ("length", "dataset_from_index", "dataset_to_index")
    )
    if stop - start != length:
        raise FormatError(
            f"{source.where}: episode {row['episode_index']}: length {length} but rows "
            f"{start}..{stop} in meta/episodes"
        )
    return EpisodeEntry(int(row["episode_index"]), length, tuple(row["tasks"] or ()), data_path, -1,
                        start, videos)  # fmt: skip


def _check_data_files(
    source: LeRobotSource, entries: list[EpisodeEntry], task_count: int, budget: int
) -> None:
    """Row positions, counts and indexes of every selected episode; column types."""
    by_file: dict[Path, list[int]] = {}
    for position, entry in enumerate(entries):
        by_file.setdefault(entry.data_path, []).append(position)
    for path, positions in by_file.items():
        where = f"{source.where}: {path.relative_to(source.root)}"
        handle = open_parquet(path, source.where)
        schema = handle.schema_arrow
        for feature in source.features:
            if feature.kind == "video":
                continue
            if feature.name not in schema.names:
                raise FormatError(f"{where} lacks the column of feature {feature.name!r}")
            _check_type(
                feature, schema.field(feature.name).type, f"{where}: column {feature.name!r}"
            )
        columns = ["episode_index", "frame_index", "index", "task_index"]
        table = _read(handle, path, source.where, columns=columns)
        episode = table.column("episode_index").to_numpy()
        frame = table.column("frame_index").to_numpy()
        index = table.column("index").to_numpy()
        task = table.column("task_index").to_numpy()
        if task.size and (task.min() < 0 or task.max() >= task_count):
            raise FormatError(
                f"{where}: task_index outside 0..{task_count - 1} "
                f"({'meta/tasks.jsonl' if source.legacy else 'meta/tasks.parquet'})"
            )
        if source.legacy and episode.size and not np.all(episode == entries[positions[0]].index):
            # a v2 file is one episode's alone: rows of another are a mix-up, not data to skip
            others = sorted(set(episode.tolist()) - {entries[positions[0]].index})
            raise FormatError(
                f"{where}: holds rows of episode(s) {others[:SHOWN]} besides episode "
                f"{entries[positions[0]].index}; a LeRobot v2 data file holds one episode"
            )
        for position in positions:
            entry = entries[position]
            rows = np.flatnonzero(episode == entry.index)
            expected = np.arange(entry.length)
            first = int(rows[0]) if rows.size else -1
            if rows.size != entry.length or (
                rows.size and not np.array_equal(rows - first, expected)
            ):
                raise FormatError(
                    f"{where}: episode {entry.index} has {rows.size} rows here, "
                    f"{source.episodes_table} says {entry.length} contiguous rows; the file is "
                    "incomplete or the episodes table is wrong"
                )
            if not np.array_equal(frame[rows], expected) or not np.array_equal(
                index[rows], expected + entry.from_index
            ):
                raise FormatError(
                    f"{where}: episode {entry.index}: frame_index / index are not 0..{entry.length - 1}"
                    f" / {entry.from_index}..{entry.from_index + entry.length - 1}"
                )
            entries[position] = _with_row(entry, first)
        images = [f for f in source.fields if f.kind == "image"]
        if images:
            _check_images(source, path, where, images, budget)


def _check_images(
    source: LeRobotSource, path: Path, where: str, images: list[Feature], budget: int
) -> None:
    """Every PNG header of a data file, its bytes read about ``budget / 16`` at a time."""
    share = max(1, budget // 16)  # only headers are looked at: a small share of the budget
    rows = max(1, share // sum(math.prod(f.shape) for f in images))
    for first_row, table in read_pieces(path, source.where, [f.name for f in images], rows, share):
        for feature in images:
            values = table.column(feature.name).combine_chunks().field("bytes")
            _check_png_headers(values, feature, f"{where}: column {feature.name!r}", first_row)


def _with_row(entry: EpisodeEntry, row: int) -> EpisodeEntry:
    return EpisodeEntry(entry.index, entry.length, entry.tasks, entry.data_path, row,
                        entry.from_index, entry.videos)  # fmt: skip


def _check_png_headers(values: Any, feature: Feature, where: str, first: int) -> None:
    if values.null_count:
        raise FormatError(f"{where}: {values.null_count} frame(s) have no image bytes")
    bad: list[str] = []
    offsets, data = binary_values(values)
    for row in range(int(offsets.shape[0]) - 1):
        size = png_size(bytes(data[offsets[row] : min(offsets[row] + 24, offsets[row + 1])]))
        if size != feature.shape[:2]:
            bad.append(
                f"row {first + row}: " + ("not a PNG" if size is None else f"{size[0]}x{size[1]}")
            )
    if bad:
        raise FormatError(
            f"{where}: meta/info.json declares {feature.shape[0]}x{feature.shape[1]} PNG images; "
            + "; ".join(bad[:SHOWN])
            + (f"; and {len(bad) - SHOWN} more" if len(bad) > SHOWN else "")
        )


def _check_videos(source: LeRobotSource, entries: list[EpisodeEntry]) -> None:
    probed: dict[Path, list[float]] = {}
    for entry in entries:
        for name, (path, start, stop) in entry.videos.items():
            where = f"{source.where}: feature {name!r}"
            feature = next(f for f in source.fields if f.name == name)
            if path not in probed:
                probed[path] = probe_video(path, feature.shape, where)
            count = count_video_frames(probed[path], start, stop, source.fps)
            if count != entry.length:
                # a v2 mp4 is the episode's alone: its span is open-ended
                span = f" in [{start:.3f}, {stop:.3f}) s" if math.isfinite(stop) else ""
                raise FormatError(
                    f"{where}: {str(path.relative_to(source.root))!r} holds {count} frames"
                    f"{span}, but episode {entry.index} has {entry.length}; "
                    "the video is cut short or does not belong to this dataset"
                )
