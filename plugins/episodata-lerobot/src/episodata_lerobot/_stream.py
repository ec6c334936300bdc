"""Episodes larger than the read budget, read and written in blocks of frames (§8.2).

An episode whose decoded frames exceed ``read_budget_bytes`` is read ``budget // frame
bytes`` frames at a time: its parquet rows as record batches of a buffered reader (the
column chunks are read in pieces, not whole), its video frames from one decoder that
runs through the episode once. Each block is appended to the episode with a step writer
as soon as it is decoded; the action (and reward) of a block's last frame leads to the
next block's first observation, so it is carried over.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from episodata_core.errors import FormatError
from episodata_lerobot._decode import decode_png_rows, iter_video_frames, open_video
from episodata_lerobot._tables import column_array, open_parquet, read_pieces

if TYPE_CHECKING:
    from collections.abc import Iterator

    import numpy.typing as npt

    from episodata_core.dataset import Dataset
    from episodata_core.schema import DatasetSchema
    from episodata_lerobot._options import LeRobotImportOptions
    from episodata_lerobot._source import LeRobotSource
    from episodata_lerobot._tables import EpisodeEntry

__all__ = ["TASK_KEY", "VALID_KEY", "allocate_columns", "decode_columns", "decode_into", "fill_row",
           "stream_episode"]  # fmt: skip

VALID_KEY = "observation_valid"
"""Info field of ``final_observation='missing'``: False on the filled last row only."""
TASK_KEY = "task_index"
"""Info field of datasets whose episodes hold several tasks: the frame's task_index."""


def fill_row(values: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """One row of the value that marks an unknown observation: NaN, 0 or False."""
    row = np.zeros((1, *values.shape[1:]), dtype=values.dtype)
    if values.dtype.kind in "fc":
        row[...] = np.nan
    return row


def allocate_columns(found: LeRobotSource, rows: int) -> dict[str, npt.NDArray[Any]]:
    """Empty ``{feature name: [rows, ...]}`` arrays of the parquet features and task_index."""
    out = {
        f.name: np.empty((rows, *(f.shape if f.kind == "image" else f.declared)), dtype=f.dtype)
        for f in found.features
        if f.kind != "video"
    }
    out["task_index"] = np.empty(rows, dtype=np.int64)
    return out


def decode_into(
    found: LeRobotSource, table: Any, out: dict[str, npt.NDArray[Any]], at: int, first: int,
    where: str,
) -> None:  # fmt: skip
    """Decode a parquet table's columns into rows ``at..`` of ``out``, PNG images in place.

    Video features are not in the table; ``task_index`` is. ``first`` is the table's first
    row in its file, for messages.
    """
    rows = table.num_rows
    for feature in found.features:
        label = f"{where}: column {feature.name!r}"
        if feature.kind == "image":
            position = at
            for chunk in table.column(feature.name).chunks:
                end = position + len(chunk)
                decode_png_rows(chunk.field("bytes"), feature.shape, label,
                                out[feature.name][position:end], first + position - at)  # fmt: skip
                position = end
        elif feature.kind != "video":
            out[feature.name][at : at + rows] = column_array(
                table.column(feature.name), rows, feature.declared, feature.dtype, label
            )
    out["task_index"][at : at + rows] = table.column("task_index").to_numpy()


def decode_columns(
    found: LeRobotSource, table: Any, first: int, where: str
) -> dict[str, npt.NDArray[Any]]:
    """``{feature name: [rows, ...]}`` of a parquet table's columns, PNG images decoded."""
    out = allocate_columns(found, table.num_rows)
    decode_into(found, table, out, 0, first, where)
    return out


def _blocks(
    found: LeRobotSource, entry: EpisodeEntry, block_rows: int, budget: int
) -> Iterator[dict[str, npt.NDArray[Any]]]:
    """The episode's frames, ``block_rows`` (or fewer) at a time, decoded."""
    path = entry.data_path
    where = f"{found.where}: {path.relative_to(found.root)}"
    metadata = open_parquet(path, found.where).metadata
    start, stop = entry.row_start, entry.row_start + entry.length
    groups, position = [], 0
    for group in range(metadata.num_row_groups):
        count = metadata.row_group(group).num_rows
        if position < stop and position + count > start:
            groups.append(group)
        position += count
    videos = [f for f in found.features if f.kind == "video"]
    containers: list[Any] = []
    try:
        frames: dict[str, Iterator[npt.NDArray[np.uint8]]] = {}
        for feature in videos:
            video, begin, end = entry.videos[feature.name]
            at = f"{found.where}: {video.relative_to(found.root)}, episode {entry.index}"
            containers.append(open_video(video, at))
            frames[feature.name] = iter_video_frames(containers[-1], begin, end, found.fps,
                                                     feature.shape, at)  # fmt: skip
        names = [f.name for f in found.features if f.kind != "video"] + ["task_index"]
        for offset, piece in read_pieces(path, found.where, names, block_rows, budget, groups):
            low = max(start, offset)
            high = min(stop, offset + piece.num_rows)
            for first in range(low, high, block_rows):
                count = min(block_rows, high - first)
                columns = decode_columns(found, piece.slice(first - offset, count), first, where)
                for name, source in frames.items():
                    columns[name] = _take(source, count, f"{where}, video {name!r}", entry)
                yield columns
                del columns  # before the next block is decoded
            del piece
        for name, source in frames.items():
            if next(source, None) is not None:
                raise FormatError(
                    f"{found.where}: video {name!r} of episode {entry.index} holds more than "
                    f"its {entry.length} frames"
                )
    finally:
        for container in containers:
            container.close()


def _take(
    source: Iterator[npt.NDArray[np.uint8]], count: int, where: str, entry: EpisodeEntry
) -> npt.NDArray[np.uint8]:
    frames = [frame for _, frame in zip(range(count), source, strict=False)]
    if len(frames) != count:
        raise FormatError(f"{where}: episode {entry.index} ends before its {entry.length} frames")
    return np.stack(frames)


def stream_episode(
    found: LeRobotSource,
    schema: DatasetSchema,
    entry: EpisodeEntry,
    options: LeRobotImportOptions,
    block_rows: int,
    dataset: Dataset,
) -> tuple[bool, bool]:
    """Append one episode to ``dataset`` block by block; returns its (terminated, truncated)."""
    missing = options.final_observation == "missing"
    infos_kept = {spec.key for spec in schema if spec.role == "info"}
    writer: Any = None
    carry: dict[str, dict[str, npt.NDArray[Any]]] = {}
    last: dict[str, dict[str, npt.NDArray[Any]]] = {}
    position, last_done = 0, False
    for columns in _blocks(found, entry, block_rows, options.read_budget_bytes):
        count = next(iter(columns.values())).shape[0]
        by_role = _roles(found, columns, infos_kept)
        if missing:
            by_role["info"][VALID_KEY] = np.ones(count, dtype=bool)
        final = position + count == entry.length
        if found.done is not None:
            done = columns[found.done.name].reshape(-1)
            early = np.flatnonzero(done[:-1] if final else done)
            if early.size:
                raise FormatError(
                    f"{found.where}: episode {entry.index}: next.done is True at frame(s) "
                    f"{(early[:5] + position).tolist()} before its last frame; a LeRobot "
                    "episode ends at its first done"
                )
            last_done = bool(done[-1])
        begin = 0
        if writer is None:
            # copies: a view would keep the whole first block alive
            initial_infos = {k: v[0].copy() for k, v in by_role["info"].items()}
            observation = {k: v[0].copy() for k, v in by_role["observation"].items()}
            writer = dataset.new_episode(observation, initial_infos or None)
            del observation, initial_infos
            begin = 1  # frame 0 is the reset observation
        steps: dict[str, Any] = {
            "observations": {k: v[begin:] for k, v in by_role["observation"].items()}
        }
        if by_role["info"]:
            steps["infos"] = {k: v[begin:] for k, v in by_role["info"].items()}
        for role, key in (("action", "actions"), ("reward", "rewards")):
            if by_role[role]:
                # step j follows the action of frame j - 1: the last block's last frame leads here
                steps[key] = {k: np.concatenate([carry[role][k], v[:-1]]) if role in carry else v[:-1]
                              for k, v in by_role[role].items()}  # fmt: skip
                carry[role] = {k: v[-1:].copy() for k, v in by_role[role].items()}
        if count > begin:
            writer.add_steps(steps)
        position += count
        # copies of the last rows only: no reference keeps this block alive while the next
        # one is decoded
        last = {
            role: {k: v[-1:].copy() for k, v in values.items()} for role, values in by_role.items()
        }
        del columns, by_role, steps
    if writer is None or position != entry.length:
        raise FormatError(f"{found.where}: episode {entry.index}: read {position} of "
                          f"{entry.length} frames; the data file is incomplete")  # fmt: skip
    if not missing:
        # T - 1 transitions end at a known, non-terminal observation: truncated
        writer.end(truncated=True)
        return False, True
    final_step: dict[str, Any] = {
        "observations": {k: fill_row(v) for k, v in last["observation"].items()},
        "infos": {
            k: np.zeros(1, dtype=bool) if k == VALID_KEY else fill_row(v)
            for k, v in last["info"].items()
        },
    }
    for role, key in (("action", "actions"), ("reward", "rewards")):
        if role in carry:
            final_step[key] = carry[role]
    writer.add_steps(final_step)
    terminated = last_done and options.done_means == "terminated"
    truncated = last_done and options.done_means == "truncated"
    writer.end(terminated=terminated, truncated=truncated)
    return terminated, truncated


def _roles(
    found: LeRobotSource, columns: dict[str, npt.NDArray[Any]], infos_kept: set[str]
) -> dict[str, dict[str, npt.NDArray[Any]]]:
    by_role: dict[str, dict[str, npt.NDArray[Any]]] = {
        "observation": {}, "action": {}, "reward": {}, "info": {},
    }  # fmt: skip
    for feature in found.fields:
        values = columns[feature.name]
        by_role[feature.role][feature.key] = values.reshape((values.shape[0], *feature.shape))
    if TASK_KEY in infos_kept:
        by_role["info"][TASK_KEY] = columns["task_index"]
    return by_role
