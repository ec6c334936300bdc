"""LeRobot v2.1 / v2.0 folders (one parquet and one mp4 per episode) through the importer.

The folders are the v3 fixtures rewritten in the v2 layout by ``lerobot_v2.make_v2``
(test support, written from LeRobot's documented layout). Oracles: the fixtures' ground
truth (``*.frames.npz``), for video the test's own PyAV decode of the mp4s it wrote, and
the same data imported from the v3 folder.
"""

from __future__ import annotations

import dataclasses
import re
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from lerobot_fixtures import DATA, LENGTHS, edit_info, expected_import, frame_images
from lerobot_v2 import encode_mp4, make_v2, read_jsonl, v2_video_frames, write_jsonl

from episodata_core.errors import FormatError
from episodata_core.testing import BadSource, ExpectedImport, ImporterTests
from episodata_core.testing.importer import HEAVY_MODULES
from episodata_core.transfer import import_dataset
from episodata_lerobot import LeRobotImporter

if TYPE_CHECKING:
    from pathlib import Path

    from episodata_core.dataset import Dataset


def _v2_expected(
    name: str, folder: Path, version: str = "v2.1", **kwargs: object
) -> ExpectedImport:
    """The v3 fixture's expected import, its images those of the v2 folder's own files."""
    expected = expected_import(name, **kwargs)  # type: ignore[arg-type]
    episodes = []
    for e, episode in zip(kwargs.get("episodes", (0, 1, 2)), expected.episodes, strict=True):  # type: ignore[call-overload]
        if name == "pendulum-video":
            frames = v2_video_frames(folder, e)
            image = episode.observations["image"]
            assert len(frames) == LENGTHS[e]
            # the filled last row of final_observation="missing" stays
            observations = {
                **episode.observations,
                "image": np.concatenate([frames, image[len(frames) :]]),
            }
            episode = dataclasses.replace(episode, observations=observations)
        episodes.append(episode)
    source = {**expected.source, "codebase_version": version}
    return dataclasses.replace(expected, episodes=episodes, source=source)


def _bad_v2(directory: Path, name: str) -> list[BadSource]:
    directory.mkdir(parents=True, exist_ok=True)
    no_episode = make_v2(name, directory / "no-episode")
    (no_episode / "data" / "chunk-000" / "episode_000001.parquet").unlink()
    old = make_v2(name, directory / "v16")
    edit_info(old, lambda info: info.update(codebase_version="v1.6"))
    unknown = make_v2(name, directory / "v29")
    edit_info(unknown, lambda info: info.update(codebase_version="v2.9"))
    longer = make_v2(name, directory / "longer")
    lines = read_jsonl(longer / "meta" / "episodes.jsonl")
    lines[1]["length"] += 1  # says 5 frames; the parquet holds 4
    write_jsonl(longer / "meta" / "episodes.jsonl", lines)
    garbled = make_v2(name, directory / "garbled")
    with (garbled / "meta" / "episodes.jsonl").open("a") as handle:
        handle.write('{"episode_index": 3, "tasks": \n')
    mixed = make_v2(name, directory / "mixed")
    one = mixed / "data" / "chunk-000" / "episode_000001.parquet"
    zero = pq.read_table(mixed / "data" / "chunk-000" / "episode_000000.parquet")
    pq.write_table(pa.concat_tables([pq.read_table(one), zero]), one)  # episode 0's rows too
    no_tasks = make_v2(name, directory / "no-tasks")
    (no_tasks / "meta" / "tasks.jsonl").unlink()
    return [
        BadSource(no_episode, FormatError, re.escape("data/chunk-000/episode_000001.parquet' does not exist; the dataset folder is incomplete")),
        BadSource(old, FormatError, re.escape("codebase_version is 'v1.6'; the lerobot importer reads 'v2.0', 'v2.1', 'v3.0'")),
        BadSource(unknown, FormatError, re.escape("codebase_version 'v2.9' is a LeRobot v2 layout this importer does not know")),
        BadSource(longer, FormatError, re.escape("episode 1 has 4 rows here, meta/episodes.jsonl says 5 contiguous rows")),
        BadSource(garbled, FormatError, re.escape("meta/episodes.jsonl line 4 is not valid JSON")),
        BadSource(mixed, FormatError, re.escape("holds rows of episode(s) [0] besides episode 1; a LeRobot v2 data file holds one episode")),
        BadSource(no_tasks, FormatError, re.escape("meta/tasks.jsonl does not exist")),
        BadSource(make_v2(name, directory / "unknown-episode"), FormatError,
                  re.escape("names episode(s) [7]"), {"episodes": [0, 7]}),
    ]  # fmt: skip


class TestLeRobotV21ImagesKit(ImporterTests[LeRobotImporter]):
    importer_cls = LeRobotImporter
    heavy_modules = (*HEAVY_MODULES, "pyarrow", "av", "PIL")
    persistent_backends = ("npz_directory",)  # zarr: the v3 kit covers it

    def import_cases(self, directory: Path) -> list[tuple[Path, ExpectedImport]]:
        folder = make_v2("pendulum-images", directory)
        return [
            (folder, _v2_expected("pendulum-images", folder)),
            (folder, _v2_expected("pendulum-images", folder, final_observation="missing")),
            (folder, _v2_expected("pendulum-images", folder, episodes=(2, 0))),
        ]

    def bad_sources(self, directory: Path) -> list[BadSource]:
        return _bad_v2(directory, "pendulum-images")


class TestLeRobotV21VideoKit(ImporterTests[LeRobotImporter]):
    importer_cls = LeRobotImporter
    heavy_modules = (*HEAVY_MODULES, "pyarrow", "av", "PIL")
    persistent_backends = ("npz_directory",)

    def import_cases(self, directory: Path) -> list[tuple[Path, ExpectedImport]]:
        folder = make_v2("pendulum-video", directory)
        return [
            (folder, _v2_expected("pendulum-video", folder)),
            (
                folder,
                _v2_expected("pendulum-video", folder, episodes=(1,), final_observation="missing"),
            ),
        ]

    def bad_sources(self, directory: Path) -> list[BadSource]:
        name = "pendulum-video"
        no_video = make_v2(name, directory / "no-video")
        (no_video / "videos" / "chunk-001" / "observation.image" / "episode_000002.mp4").unlink()
        extra = make_v2(name, directory / "extra-frame")
        frames = v2_video_frames(extra, 1)
        mp4 = extra / "videos" / "chunk-000" / "observation.image" / "episode_000001.mp4"
        encode_mp4(mp4, np.concatenate([frames, frames[-1:]]), 10)  # 5 frames for 4
        return [
            *_bad_v2(directory, name),
            BadSource(no_video, FormatError, re.escape("video file 'videos/chunk-001/observation.image/episode_000002.mp4' of feature 'observation.image' is missing")),
            BadSource(extra, FormatError, re.escape("episode_000001.mp4' holds 5 frames, but episode 1 has 4")),
        ]  # fmt: skip


def _fields(dataset: Dataset, e: int) -> dict[str, np.ndarray]:
    read = dataset.episode(e).read()
    return {"state": read.all_obs["state"], "image": read.all_obs["image"],
            "action": read.action, "reward": read.reward}  # fmt: skip


@pytest.mark.parametrize("version", ["v2.1", "v2.0"])
def test_v2_png_import_equals_the_v3_import(tmp_path: Path, version: str) -> None:
    folder = make_v2("pendulum-images", tmp_path, version)
    ours, report = import_dataset("lerobot", folder)
    theirs, expected = import_dataset("lerobot", DATA / "pendulum-images")
    assert ours.schema == theirs.schema
    assert report.model_dump(exclude={"warnings"}) == expected.model_dump(exclude={"warnings"})
    for e in range(3):
        a, b = _fields(ours, e), _fields(theirs, e)
        for key in a:
            np.testing.assert_array_equal(a[key], b[key], err_msg=f"episode {e} {key}")
        np.testing.assert_array_equal(a["image"], frame_images("pendulum-images")[e])
        assert ours.episode(e).terminated == theirs.episode(e).terminated
        assert ours.episode(e).truncated == theirs.episode(e).truncated
    # a budget below one frame: every episode read block by block (the streaming path)
    small, _ = import_dataset("lerobot", folder, read_budget_bytes=1)
    for e in range(3):
        a, b = _fields(small, e), _fields(theirs, e)
        for key in a:
            np.testing.assert_array_equal(a[key], b[key], err_msg=f"episode {e} {key}")
    record = ours.manifest.metadata["imports"][-1]
    assert record["source"]["codebase_version"] == version
    # the global index continues across the per-episode files, as v3's dataset_from_index
    assert record["episodes"] == theirs.manifest.metadata["imports"][-1]["episodes"]


def test_v2_video_import_is_the_v3_import_within_codec_loss(tmp_path: Path) -> None:
    folder = make_v2("pendulum-video", tmp_path)
    # a budget below one frame: every episode read block by block (the streaming path)
    ours, _ = import_dataset("lerobot", folder, read_budget_bytes=1)
    theirs, _ = import_dataset("lerobot", DATA / "pendulum-video")
    for e in range(3):
        a, b = _fields(ours, e), _fields(theirs, e)
        for key in ("state", "action", "reward"):
            np.testing.assert_array_equal(a[key], b[key], err_msg=f"episode {e} {key}")
        # the v2 mp4 is a re-encode of LeRobot's decode: equal to its own decode exactly,
        # to the v3 import within the codec's loss
        np.testing.assert_array_equal(a["image"], v2_video_frames(folder, e))
        difference = np.abs(a["image"].astype(int) - frame_images("pendulum-video")[e])
        assert difference.mean() < 2.0, difference.mean()


def test_v2_info_json_without_chunks_size_is_refused(tmp_path: Path) -> None:
    folder = make_v2("pendulum-images", tmp_path)
    edit_info(folder, lambda info: info.pop("chunks_size"))
    with pytest.raises(FormatError, match=re.escape("meta/info.json lacks 'chunks_size'")):
        import_dataset("lerobot", folder, tmp_path / "out.zarr")
    assert not (tmp_path / "out.zarr").exists()


def test_v2_episode_with_several_tasks_keeps_each_frames_task(tmp_path: Path) -> None:
    folder = make_v2("pendulum-images", tmp_path)
    write_jsonl(folder / "meta" / "tasks.jsonl",
                [{"task_index": 0, "task": "swing up"}, {"task_index": 1, "task": "balance"}])  # fmt: skip
    lines = read_jsonl(folder / "meta" / "episodes.jsonl")
    lines[2]["tasks"] = ["swing up", "balance"]
    write_jsonl(folder / "meta" / "episodes.jsonl", lines)
    path = folder / "data" / "chunk-001" / "episode_000002.parquet"
    table = pq.read_table(path)
    task = np.asarray([0] * 4 + [1] * 4, dtype=np.int64)
    table = table.set_column(table.schema.get_field_index("task_index"), "task_index",
                             pa.array(task))  # fmt: skip
    pq.write_table(table, path)
    dataset, _ = import_dataset("lerobot", folder, final_observation="missing")
    read = dataset.episode(2).read()
    np.testing.assert_array_equal(read.all_infos["task_index"][:-1], task)
    record = dataset.manifest.metadata["imports"][-1]
    assert record["episodes"]["tasks"][2] == ["swing up", "balance"]
    assert record["source"]["tasks"] == ["swing up", "balance"]
