"""The lerobot importer beyond the kit: read windows, tasks, images, bad input."""

from __future__ import annotations

import io
import re
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from lerobot_fixtures import DATA, LENGTHS, copy_dataset, frame_images, rewrite_data, truth
from PIL import Image

from episodata_core.errors import FormatError
from episodata_core.transfer import import_dataset
from episodata_lerobot._write import VideoWriter

if TYPE_CHECKING:
    from pathlib import Path


@pytest.mark.parametrize("name", ["pendulum-images", "pendulum-video"])
def test_one_episode_windows_give_the_same_episodes(name: str) -> None:
    # a budget below one frame makes every episode its own read window
    small, _ = import_dataset("lerobot", DATA / name, read_budget_bytes=1)
    images = frame_images(name)
    z = truth(name)
    for e, n in enumerate(LENGTHS):
        read = small.episode(e).read()
        np.testing.assert_array_equal(read.all_obs["image"], images[e])
        np.testing.assert_array_equal(read.all_obs["state"], z[f"truth/ep{e}/state"][:n])
        np.testing.assert_array_equal(read.action, z[f"truth/ep{e}/action"][: n - 1])


def test_video_frames_equal_lerobots_own_decode() -> None:
    dataset, _ = import_dataset("lerobot", DATA / "pendulum-video", final_observation="missing")
    ours = np.concatenate([dataset.episode(e).read().all_obs["image"][:-1] for e in range(3)])
    theirs = truth("pendulum-video")["lerobot/observation.image"]  # [18, 3, 32, 32] in [0, 1]
    np.testing.assert_array_equal(ours.transpose(0, 3, 1, 2).astype(np.float32) / 255, theirs)


def test_episodes_with_several_tasks_keep_each_frames_task(tmp_path: Path) -> None:
    folder = copy_dataset("pendulum-images", tmp_path)
    tasks = pa.table({"task_index": pa.array([0, 1], pa.int64()), "task": ["swing up", "hold"]})
    pq.write_table(tasks, folder / "meta/tasks.parquet")

    def second_task(table: pa.Table) -> pa.Table:
        task = table.column("task_index").to_numpy().copy()
        task[3:6] = 1  # the second half of episode 0
        return table.set_column(
            table.schema.get_field_index("task_index"), "task_index", pa.array(task)
        )

    rewrite_data(folder, second_task)
    episodes = folder / "meta/episodes/chunk-000/file-000.parquet"
    table = pq.read_table(episodes)
    listed = pa.array([["swing up", "hold"], ["swing up"], ["swing up"]])
    pq.write_table(
        table.set_column(table.schema.get_field_index("tasks"), "tasks", listed), episodes
    )
    dataset, _ = import_dataset("lerobot", folder)
    assert "info/task_index" in dataset.schema.qualified_keys
    np.testing.assert_array_equal(
        dataset.episode(0).read().all_infos["task_index"], [0, 0, 0, 1, 1, 1]
    )
    record = dataset.manifest.metadata["imports"][0]
    assert record["episodes"]["tasks"][0] == ["swing up", "hold"]
    assert record["source"]["tasks"] == ["swing up", "hold"]


def _png(frame: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(frame).save(buffer, format="PNG")
    return buffer.getvalue()


def test_png_of_another_size_is_refused_before_writing(tmp_path: Path) -> None:
    folder = copy_dataset("pendulum-images", tmp_path)

    def smaller_image(table: pa.Table) -> pa.Table:
        rows = table.column("observation.image").to_pylist()
        rows[8] = {"bytes": _png(np.zeros((16, 32, 3), np.uint8)), "path": rows[8]["path"]}
        column = pa.array(rows, type=table.schema.field("observation.image").type)
        return table.set_column(
            table.schema.get_field_index("observation.image"), "observation.image", column
        )

    rewrite_data(folder, smaller_image)
    with pytest.raises(FormatError, match=re.escape("declares 32x32 PNG images; row 8: 16x32")):
        import_dataset("lerobot", folder, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_video_of_another_size_is_refused(tmp_path: Path) -> None:
    folder = copy_dataset("pendulum-video", tmp_path)
    mp4 = folder / "videos/observation.image/chunk-000/file-000.mp4"
    mp4.unlink()
    writer = VideoWriter(mp4, codec="h264", fps=10, height=16, width=16, crf=20, gop=2, preset=0)
    writer.add(np.zeros((18, 16, 16, 3), np.uint8))
    writer.close()
    with pytest.raises(
        FormatError,
        match=re.escape("holds 16x16 frames but meta/info.json declares shape [32, 32, 3]"),
    ):
        import_dataset("lerobot", folder, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_selection_reports_the_others_as_not_selected() -> None:
    dataset, report = import_dataset("lerobot", DATA / "pendulum-images", episodes=[1])
    assert report.episodes_skipped == {"not_selected": 2}
    assert len(dataset.episode(0)) == LENGTHS[1] - 1
    assert dataset.episode(0).truncated
    assert not dataset.episode(0).terminated
