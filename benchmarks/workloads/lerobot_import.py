"""W9, LeRobot rows: importing LeRobot v3 folders (PNG images in parquet, AV1 video) into Zarr.

The sources are written by episodata's own ``lerobot`` exporter from seeded frames (64x64x3
images, a 6-dim state, a 2-dim action). The ceiling reads the same files with pyarrow and
Pillow / PyAV alone: every parquet column once, every PNG decoded, every video frame
decoded to rgb24. Rates are megabytes of decoded frames per second.
"""

from __future__ import annotations

import io
import time
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from benchmarks.results import Figure, ratio_target
from benchmarks.workloads._import_rows import ceiling, rss_target, timed_import

if TYPE_CHECKING:
    from pathlib import Path

    from benchmarks.harness import Context
    from benchmarks.results import WorkloadResult

__all__ = ["lerobot_rows", "read_lerobot", "write_lerobot"]

SIDE = 64
EPISODE = 200


def write_lerobot(path: Path, frames: int, seed: int, images: str) -> None:
    """A LeRobot v3 folder of ``frames`` frames in 200-frame episodes."""
    from episodata import Dataset, DatasetSchema, FieldSpec, export_datasets

    rng = np.random.default_rng([seed, 19])
    schema = DatasetSchema([
        FieldSpec("state", shape=(6,), dtype="float32"),
        FieldSpec("image", shape=(SIDE, SIDE, 3), dtype="uint8", layout="HWC"),
        FieldSpec("action", shape=(2,), dtype="float32", role="action"),
        FieldSpec("reward", shape=(), dtype="float32", role="reward"),
    ])  # fmt: skip
    dataset = Dataset.create(schema)
    for start in range(0, frames, EPISODE):
        n = min(EPISODE, frames - start)
        # a bright square moving over a noisy background: compressible like a camera
        image = rng.integers(100, 108, size=(n + 1, SIDE, SIDE, 3), dtype=np.uint8)
        for t in range(n + 1):
            x = (t * 2) % (SIDE - 16)
            image[t, 16:32, x : x + 16] = 250
        state = rng.standard_normal((n + 1, 6), dtype=np.float32)
        dataset.add_episode({
            "initial_observation": {"state": state[0], "image": image[0]},
            "observations": {"state": state[1:], "image": image[1:]},
            "actions": rng.standard_normal((n, 2), dtype=np.float32),
            "rewards": rng.standard_normal(n, dtype=np.float32),
        })  # fmt: skip
    export_datasets("lerobot", dataset, path, fps=30, images="png" if images == "png" else "video")


def read_lerobot(path: Path) -> tuple[int, float]:
    """Read the folder with pyarrow, Pillow and PyAV alone; ``(decoded bytes, seconds)``."""
    import av
    import pyarrow.parquet as pq
    from PIL import Image

    began = time.perf_counter()
    total = 0
    for data in sorted((path / "data").rglob("*.parquet")):
        handle = pq.ParquetFile(data)
        for group in range(handle.metadata.num_row_groups):
            table = handle.read_row_group(group)
            for name in table.column_names:
                column = table.column(name)
                if name == "observation.image":
                    for raw in column.combine_chunks().field("bytes").to_pylist():
                        with Image.open(io.BytesIO(raw)) as image:
                            total += np.asarray(image).nbytes
                else:
                    total += column.nbytes
    for video in sorted((path / "videos").rglob("*.mp4")):
        with av.open(str(video)) as container:
            for frame in container.decode(video=0):
                total += frame.to_ndarray(format="rgb24").nbytes
    return total, time.perf_counter() - began


def _check_count(name: str, dataset: Any, *, expected: int) -> None:
    if dataset.num_episodes != expected:
        raise AssertionError(
            f"{name}: {dataset.num_episodes} episodes imported, expected {expected}"
        )


def _imported(source: Path, target: Path) -> Any:
    from episodata import import_dataset

    dataset, _ = import_dataset("lerobot", source, target)
    return dataset


def lerobot_rows(context: Context, result: WorkloadResult) -> None:
    """Append the LeRobot figures and targets to W9's result."""
    from episodata_core import registry

    frames = context.sizes.lerobot_frames
    try:
        registry.get_importer("lerobot")
    except LookupError:
        result.figures.append(
            Figure("lerobot", "episodata", "MB/s", status="skipped: not installed")
        )
        return
    for images in ("png", "video"):
        name = f"lerobot {images}"
        source = context.run_dir / f"lerobot-{images}"
        if not source.exists():
            write_lerobot(source, frames, context.sizes.seed, images)
        raw, read_s = read_lerobot(source)
        read = ceiling(f"{name} pyarrow/PyAV read", source, raw, read_s)
        target = context.run_dir / f"{source.name}.zarr"
        mine = timed_import(
            context,
            f"{name} import",
            read,
            target,
            partial(_imported, source, target),
            partial(_check_count, name, expected=-(-frames // EPISODE)),
        )
        result.figures += [read, mine]
        result.targets.append(
            ratio_target(result, f"{name} import", f"{name} pyarrow/PyAV read", 0.5)
        )
        result.targets.append(rss_target(name, mine, read))
