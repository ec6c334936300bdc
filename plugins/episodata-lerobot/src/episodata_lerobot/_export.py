"""The ``lerobot`` exporter: episodes as a LeRobot v3.0 dataset folder (formats.md §8.3).

Frame t of an exported episode holds observation row t, action t, reward t (as
``next.reward``) and info row t, for t < T: the final observation row T has no frame in
LeRobot's layout, and ``next.done`` (True on the last frame of a terminated or truncated
episode) cannot say which of the two it was. Both are recorded in ``meta/episodata.json``.
The folder is built in ``<out>.partial`` and renamed into place when complete.
"""

from __future__ import annotations

import json
from importlib.metadata import version
from typing import TYPE_CHECKING, Any

import numpy as np
from pydantic import BaseModel, Field

from episodata_core.exporting import stage_folder
from episodata_lerobot._import import TASK_KEY
from episodata_lerobot._plan import Column, Plan, plan_export, provenance
from episodata_lerobot._stats import aggregate, as_lists, episode_stats
from episodata_lerobot._write import DATA_PATH, VIDEO_PATH, DataFiles, VideoFiles, encode_png

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

    import numpy.typing as npt

    from episodata_core.dataset import Dataset
    from episodata_lerobot._options import LeRobotExportOptions

__all__ = ["LeRobotExportReport", "export_datasets"]

NOT_STORED = {
    "final_observation": (
        "LeRobot frames hold the observation at which each action was taken; the observation "
        "after an episode's last action has no frame and is not exported"
    ),
    "terminated_vs_truncated": (
        "next.done is True on the last frame of an episode that was terminated or truncated; "
        "which one is recorded per episode here only"
    ),
}


class LeRobotExportReport(BaseModel):
    """What a ``lerobot`` export wrote."""

    destination: str
    episodes: int = Field(description="Episodes written.")
    frames: int = Field(description="Frames written (one per transition).")
    features: dict[str, str] = Field(description="{LeRobot feature: qualified field key}.")
    final_observations_not_stored: int = Field(
        description="Episodes whose final observation was left out."
    )
    files: list[str] = Field(description="Files written, relative to the root, sorted.")

    def summary(self) -> str:
        """A few human-readable lines for the command line."""
        return (
            f"wrote {self.episodes} episodes ({self.frames} frames) to {self.destination}\n"
            f"final observations not stored: {self.final_observations_not_stored} (LeRobot has none)"
        )


def export_datasets(
    datasets: Mapping[str, Dataset], destination: str, options: LeRobotExportOptions
) -> LeRobotExportReport:
    """Check, write in ``<destination>.partial``, then publish at ``destination``."""
    plan = plan_export(datasets, options)
    staged = stage_folder(destination, overwrite=options.overwrite)
    with staged.writing() as partial:
        frames = _write(partial, plan, options)
    out = staged.out
    files = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    return LeRobotExportReport(
        destination=str(out),
        episodes=len(plan.episodes),
        frames=frames,
        features={c.name: c.spec.qualified_key for c in plan.columns},
        final_observations_not_stored=len(plan.episodes),
        files=files,
    )


def _frames(dataset: Dataset, position: int, column: Column) -> npt.NDArray[Any]:
    """The T frames of one field: observation/info rows 0..T-1, action/reward rows 1..T."""
    read = dataset.episode(position).read(fields=[column.spec.qualified_key])
    buffer = np.asarray(read.buffers[column.spec.qualified_key])
    values = buffer[:-1] if column.spec.role in ("observation", "info") else buffer[1:]
    if column.chw:
        values = values.transpose(0, 2, 3, 1)
    return values


def _hf_feature(column: Column | None, dtype: str, length: int | None = None) -> dict[str, Any]:
    if column is not None and column.kind == "image":
        return {"_type": "Image"}
    value = {"dtype": dtype, "_type": "Value"}
    return value if length is None else {"feature": value, "length": length, "_type": "List"}


def _arrow_column(values: npt.NDArray[Any], declared: tuple[int, ...]) -> Any:
    import pyarrow as pa

    if declared == (1,):
        return pa.array(values.reshape(-1))
    return pa.FixedSizeListArray.from_arrays(pa.array(values.reshape(-1)), declared[0])


def _write(root: Path, plan: Plan, options: LeRobotExportOptions) -> int:
    import pyarrow as pa

    fps = plan.fps
    task_names: list[str] = []
    stats: dict[str, list[dict[str, npt.NDArray[Any]]]] = {}
    episode_rows: list[dict[str, Any]] = []
    videos = {c.name: c for c in plan.columns if c.kind == "video"}
    hf = {c.name: _hf_feature(c, str(c.spec.np_dtype), None if c.declared == (1,) else c.declared[0])
          for c in plan.columns}  # fmt: skip
    if options.done_feature:
        hf["next.done"] = _hf_feature(None, "bool")
    hf.update({"timestamp": _hf_feature(None, "float32")})
    hf.update(
        {
            name: _hf_feature(None, "int64")
            for name in ("frame_index", "episode_index", "index", "task_index")
        }
    )
    metadata = {b"huggingface": json.dumps({"info": {"features": hf}}).encode()}
    data = DataFiles(root, options.data_files_size_in_mb, options.chunks_size)
    writers = {
        name: VideoFiles(root, name, options.video_files_size_in_mb, options.chunks_size,
                         codec=options.video_codec, fps=fps, height=column.declared[0],
                         width=column.declared[1], crf=options.crf, gop=options.gop,
                         preset=options.preset)
        for name, column in videos.items()
    }  # fmt: skip
    index = 0
    flags: list[dict[str, Any]] = []
    try:
        for number, (label, dataset, position) in enumerate(plan.episodes):
            episode = dataset.episode(position)
            length = len(episode)
            arrays: dict[str, Any] = {}
            frames: dict[str, npt.NDArray[Any]] = {}
            for column in plan.columns:
                values = _frames(dataset, position, column)
                frames[column.name] = values
                if column.kind == "image":
                    arrays[column.name] = pa.array(
                        [
                            {"bytes": encode_png(f), "path": f"frame-{t:06d}.png"}
                            for t, f in enumerate(values)
                        ],
                        type=pa.struct([("bytes", pa.binary()), ("path", pa.string())]),
                    )
                elif column.kind == "array":
                    arrays[column.name] = _arrow_column(values, column.declared)
            done = np.zeros(length, dtype=bool)
            done[-1] = episode.terminated or episode.truncated
            if options.done_feature:
                arrays["next.done"] = pa.array(done)
                frames["next.done"] = done
            tasks = _frame_tasks(dataset, position, plan, number, length)
            for task in tasks:
                if task not in task_names:
                    task_names.append(task)
            task_index = np.asarray([task_names.index(t) for t in tasks], dtype=np.int64)
            frame_index = np.arange(length, dtype=np.int64)
            bookkeeping: dict[str, npt.NDArray[Any]] = {
                "timestamp": (frame_index / fps).astype(np.float32),
                "frame_index": frame_index,
                "episode_index": np.full(length, number, dtype=np.int64),
                "index": frame_index + index,
                "task_index": task_index,
            }
            arrays.update({name: pa.array(values) for name, values in bookkeeping.items()})
            frames.update(bookkeeping)
            frames["timestamp"] = frame_index / fps  # LeRobot's statistics use the exact times
            # one row group per episode, as LeRobot writes them
            chunk, file = data.add(pa.table(arrays).replace_schema_metadata(metadata))
            row: dict[str, Any] = {
                "episode_index": number,
                "tasks": list(dict.fromkeys(tasks)),
                "length": length,
                "data/chunk_index": chunk,
                "data/file_index": file,
                "dataset_from_index": index,
                "dataset_to_index": index + length,
            }
            for name, video in writers.items():
                chunk, file, start, stop = video.add(frames[name])
                row.update({
                    f"videos/{name}/chunk_index": chunk,
                    f"videos/{name}/file_index": file,
                    f"videos/{name}/from_timestamp": start,
                    f"videos/{name}/to_timestamp": stop,
                })  # fmt: skip
            for name in _stats_order(plan, options):
                image = name in {c.name for c in plan.columns if c.kind != "array"}
                computed = episode_stats(frames[name], image)
                stats.setdefault(name, []).append(computed)
                row.update(
                    {f"stats/{name}/{key}": value for key, value in as_lists(computed).items()}
                )
            row.update({"meta/episodes/chunk_index": 0, "meta/episodes/file_index": 0})
            episode_rows.append(row)
            flags.append({
                "episode_index": number, "label": label, "source_episode": position,
                "source_episode_index": provenance(dataset, position, "episode_index"),
                "terminated": episode.terminated, "truncated": episode.truncated,
            })  # fmt: skip
            index += length
    finally:
        data.close()
        for video in writers.values():
            video.close()
    _write_meta(root, plan, options, episode_rows, task_names, stats, index, flags)
    return index


def _frame_tasks(
    dataset: Dataset, position: int, plan: Plan, number: int, length: int
) -> list[str]:
    if f"info/{TASK_KEY}" in dataset.schema.qualified_keys and plan.source_tasks:
        read = dataset.episode(position).read(fields=[f"info/{TASK_KEY}"])
        indexes = np.asarray(read.buffers[f"info/{TASK_KEY}"])[:-1]
        return [plan.source_tasks[int(i)] for i in indexes]
    return plan.tasks[number] * length


def _stats_order(plan: Plan, options: LeRobotExportOptions) -> list[str]:
    names = [c.name for c in plan.columns]
    if options.done_feature:
        names.append("next.done")
    return [*names, "timestamp", "frame_index", "episode_index", "index", "task_index"]


def _info_feature(column: Column, plan: Plan, options: LeRobotExportOptions) -> dict[str, Any]:
    if column.kind == "array":
        return {
            "dtype": str(column.spec.np_dtype),
            "shape": list(column.declared),
            "names": column.names,
        }
    feature: dict[str, Any] = {
        "dtype": column.kind,
        "shape": list(column.declared),
        "names": column.names,
    }
    if column.kind == "video":
        h, w, c = column.declared
        feature["info"] = {
            "video.height": h, "video.width": w, "video.codec": options.video_codec,
            "video.pix_fmt": "yuv420p", "video.fps": plan.fps, "video.channels": c,
            "has_audio": False, "video.g": options.gop, "video.crf": options.crf,
            "video.preset": options.preset if options.video_codec == "av1" else None,
            "video.fast_decode": 0, "video.video_backend": "pyav", "video.extra_options": {},
            "is_depth_map": False,
        }  # fmt: skip
    return feature


def _write_meta(
    root: Path,
    plan: Plan,
    options: LeRobotExportOptions,
    episode_rows: list[dict[str, Any]],
    task_names: list[str],
    stats: dict[str, list[dict[str, npt.NDArray[Any]]]],
    frames: int,
    flags: list[dict[str, Any]],
) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    features = {c.name: _info_feature(c, plan, options) for c in plan.columns}
    if options.done_feature:
        features["next.done"] = {"dtype": "bool", "shape": [1], "names": None}
    features["timestamp"] = {"dtype": "float32", "shape": [1], "names": None}
    for name in ("frame_index", "episode_index", "index", "task_index"):
        features[name] = {"dtype": "int64", "shape": [1], "names": None}
    count = len(episode_rows)
    info = {
        "codebase_version": "v3.0",
        "fps": plan.fps,
        "features": features,
        "total_episodes": count,
        "total_frames": frames,
        "total_tasks": len(task_names),
        "chunks_size": options.chunks_size,
        "data_files_size_in_mb": _number(options.data_files_size_in_mb),
        "video_files_size_in_mb": _number(options.video_files_size_in_mb),
        "data_path": DATA_PATH,
        "video_path": VIDEO_PATH if any(c.kind == "video" for c in plan.columns) else None,
        "robot_type": plan.robot_type,
        "splits": {"train": f"0:{count}"},
    }
    meta = root / "meta"
    (meta / "episodes" / "chunk-000").mkdir(parents=True)
    (meta / "info.json").write_text(json.dumps(info, indent=4, ensure_ascii=False))
    pq.write_table(
        pa.Table.from_pylist(episode_rows), meta / "episodes" / "chunk-000" / "file-000.parquet"
    )
    tasks = pa.table(
        {"task_index": pa.array(range(len(task_names)), pa.int64()), "task": task_names}
    )
    pq.write_table(
        tasks.replace_schema_metadata({b"pandas": _pandas_tasks_metadata()}), meta / "tasks.parquet"
    )
    dataset_stats = {name: as_lists(aggregate(per)) for name, per in stats.items()}
    (meta / "stats.json").write_text(json.dumps(dataset_stats, indent=4))
    record = {
        "exporter": f"episodata-lerobot {version('episodata-lerobot')}",
        "not_stored": NOT_STORED,
        "features": {c.name: c.spec.qualified_key for c in plan.columns},
        "episodes": flags,
    }
    (meta / "episodata.json").write_text(json.dumps(record, indent=4))


def _number(value: float) -> float | int:
    """A whole number as an int, as LeRobot writes its limits."""
    return int(value) if float(value).is_integer() else value


def _pandas_tasks_metadata() -> bytes:
    """The pandas metadata that makes ``pd.read_parquet`` index tasks by their string."""
    columns = [
        {"name": "task_index", "field_name": "task_index", "pandas_type": "int64",
         "numpy_type": "int64", "metadata": None},
        {"name": "task", "field_name": "task", "pandas_type": "unicode", "numpy_type": "object",
         "metadata": None},
    ]  # fmt: skip
    return json.dumps({
        "index_columns": ["task"],
        "column_indexes": [{"name": None, "field_name": None, "pandas_type": "unicode",
                            "numpy_type": "object", "metadata": {"encoding": "UTF-8"}}],
        "columns": columns, "attributes": {}, "creator": {"library": "pyarrow"},
        "pandas_version": "2.3.3",
    }).encode()  # fmt: skip
