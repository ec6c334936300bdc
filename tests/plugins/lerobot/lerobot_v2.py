"""LeRobot v2.1 (and v2.0) folders made from the v3 fixtures, for the v2 import tests.

Written from LeRobot's documented v2.1 layout (its v2.1 -> v3.0 converter describes it),
independently of the importer: one parquet per episode at
``data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet`` with the same
columns as v3, one mp4 per episode and video key at
``videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4`` (its
frames from time 0), ``meta/episodes.jsonl``, ``meta/tasks.jsonl`` and, in v2.1,
``meta/episodes_stats.jsonl`` (its stats left empty: the import ignores them).
test_lerobot_v2_converter.py (slow) checks these folders against LeRobot's own converter.
"""

from __future__ import annotations

import json
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np
from lerobot_fixtures import DATA

if TYPE_CHECKING:
    from pathlib import Path

V2_DATA_PATH = "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet"
V2_VIDEO_PATH = "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4"


def _decode_span(path: Path, start: float, stop: float, fps: int) -> np.ndarray:
    """Every frame of an mp4 whose time lies in ``[start, stop)``, ``[N, H, W, 3]`` uint8."""
    import av

    slack = 0.5 / fps
    frames = []
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        for frame in container.decode(stream):
            time = float(frame.pts * stream.time_base)
            if start - slack <= time < stop - slack:
                frames.append(frame.to_ndarray(format="rgb24"))
    return np.stack(frames)


def encode_mp4(path: Path, frames: np.ndarray, fps: int) -> None:
    """``frames`` ``[N, H, W, 3]`` as an H.264 mp4 from time 0 (near-lossless, crf 10)."""
    import av

    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), mode="w", format="mp4") as container:
        stream: Any = container.add_stream("libx264", rate=fps, options={"crf": "10"})
        stream.height, stream.width = frames.shape[1:3]
        stream.pix_fmt = "yuv420p"
        stream.time_base = Fraction(1, fps)
        stream.codec_context.thread_count = 1
        for index, pixels in enumerate(frames):
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(pixels), format="rgb24")
            frame.pts = index
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))


def make_v2(
    name: str, directory: Path, version: str = "v2.1", chunks_size: int = 2,
    source: Path | None = None,
) -> Path:  # fmt: skip
    """The v3 fixture ``name`` (or the v3 folder ``source``) as a ``version`` folder.

    The folder is ``directory / f"{name}-{version}"``.

    ``chunks_size=2`` spreads the three episodes over two chunk folders, so the
    ``episode_chunk`` of the paths is exercised.
    """
    import pyarrow.parquet as pq

    source = DATA / name if source is None else source
    target = directory / f"{name}-{version}"
    (target / "meta").mkdir(parents=True)
    info = json.loads((source / "meta" / "info.json").read_text())
    data = pq.read_table(source / "data" / "chunk-000" / "file-000.parquet")
    episodes = pq.read_table(source / "meta" / "episodes" / "chunk-000" / "file-000.parquet")
    tasks = pq.read_table(source / "meta" / "tasks.parquet").to_pylist()
    videos = [key for key, spec in info["features"].items() if spec["dtype"] == "video"]
    total = episodes.num_rows
    lines, stats = [], []
    for row in episodes.to_pylist():
        e, length = int(row["episode_index"]), int(row["length"])
        chunk = e // chunks_size
        rows = data.filter(np.asarray(data.column("episode_index")) == e)
        assert rows.num_rows == length
        path = target / V2_DATA_PATH.format(episode_chunk=chunk, episode_index=e)
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(rows, path)  # the v3 schema, huggingface metadata included
        for key in videos:
            prefix = f"videos/{key}/"
            mp4 = source / "videos" / key / "chunk-000" / "file-000.mp4"
            frames = _decode_span(mp4, row[prefix + "from_timestamp"], row[prefix + "to_timestamp"],
                                  info["fps"])  # fmt: skip
            assert frames.shape[0] == length
            encode_mp4(target / V2_VIDEO_PATH.format(episode_chunk=chunk, video_key=key,
                                                     episode_index=e), frames, info["fps"])  # fmt: skip
        lines.append({"episode_index": e, "tasks": list(row["tasks"]), "length": length})
        stats.append({"episode_index": e, "stats": {}})  # the import ignores the stats
    for key in ("data_files_size_in_mb", "video_files_size_in_mb"):
        info.pop(key, None)
    info.update(codebase_version=version, data_path=V2_DATA_PATH, chunks_size=chunks_size,
                total_chunks=(total + chunks_size - 1) // chunks_size,
                total_videos=total * len(videos), total_tasks=len(tasks),
                video_path=V2_VIDEO_PATH if videos else None)  # fmt: skip
    for spec in info["features"].values():
        spec.pop("fps", None)  # v3.0 adds a per-feature fps
    (target / "meta" / "info.json").write_text(json.dumps(info, indent=4))
    write_jsonl(target / "meta" / "episodes.jsonl", lines)
    write_jsonl(target / "meta" / "tasks.jsonl", tasks)
    if version == "v2.1":
        write_jsonl(target / "meta" / "episodes_stats.jsonl", stats)
    else:
        (target / "meta" / "stats.json").write_text("{}")
    return target


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def v2_video_frames(folder: Path, episode: int, key: str = "observation.image") -> np.ndarray:
    """Every frame of one episode's v2 mp4, decoded with PyAV: ``[T, H, W, 3]`` uint8."""
    info = json.loads((folder / "meta" / "info.json").read_text())
    path = folder / info["video_path"].format(
        episode_chunk=episode // info["chunks_size"], video_key=key, episode_index=episode
    )
    return _decode_span(path, 0.0, float("inf"), info["fps"])
