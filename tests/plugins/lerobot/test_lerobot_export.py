"""The lerobot exporter: the kit, and LeRobot -> episodata -> LeRobot against the fixtures."""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

import av
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from lerobot_fixtures import DATA, expected_episode, expected_import, frame_images

from episodata_core.dataset import Dataset
from episodata_core.errors import FormatError
from episodata_core.schema import DatasetSchema, FieldSpec
from episodata_core.testing import ExpectedEpisode, ExpectedImport
from episodata_core.testing.exporter import ExportCase, ExporterTests, FailingExport
from episodata_core.testing.importer import HEAVY_MODULES
from episodata_core.transfer import export_datasets, import_dataset
from episodata_lerobot import LeRobotExporter

if TYPE_CHECKING:
    from pathlib import Path

DATA_FILE = "data/chunk-000/file-000.parquet"
EPISODES_FILE = "meta/episodes/chunk-000/file-000.parquet"
MP4 = "videos/observation.image/chunk-000/file-000.mp4"


def _imported(name: str) -> Dataset:
    dataset, _ = import_dataset("lerobot", DATA / name, final_observation="missing")
    return dataset


def _synthetic() -> tuple[Dataset, ExpectedImport]:
    """Episodes that never were LeRobot: a CHW image, an int action, a float64 reward."""
    rng = np.random.default_rng(5)
    schema = DatasetSchema([
        FieldSpec("pos", shape=(2,), dtype="float32"),
        FieldSpec("cam", shape=(3, 8, 6), dtype="uint8", layout="CHW"),
        FieldSpec("action", shape=(), dtype="int64", role="action"),
        FieldSpec("reward", shape=(), dtype="float64", role="reward"),
    ])  # fmt: skip
    dataset = Dataset.create(schema)
    expected = []
    for n in (3, 5):
        pos = rng.normal(size=(n + 1, 2)).astype(np.float32)
        cam = rng.integers(0, 256, size=(n + 1, 3, 8, 6), dtype=np.uint8)
        action = rng.integers(-3, 3, size=n)
        reward = rng.normal(size=n)
        dataset.add_episode({
            "initial_observation": {"pos": pos[0], "cam": cam[0]},
            "observations": {"pos": pos[1:], "cam": cam[1:]},
            "actions": action, "rewards": reward, "terminated": True,
        })  # fmt: skip
        # back through the importer: T frames of rows 0..T-1, T-1 transitions
        expected.append(ExpectedEpisode(
            observations={"pos": pos[:n], "cam": cam[:n].transpose(0, 2, 3, 1)},
            actions={"action": action[: n - 1, None]},
            rewards={"reward": reward[: n - 1]},
            truncated=True,
        ))  # fmt: skip
    oracle = ExpectedImport(
        episodes=expected,
        provenance={"episode_index": [0, 1], "tasks": [["push"], ["push"]], "length": [3, 5]},
        source={"fps": 15, "robot_type": None, "tasks": ["push"]},
    )
    return dataset, oracle


class TestLeRobotExporterKit(ExporterTests[LeRobotExporter]):
    exporter_cls = LeRobotExporter
    heavy_modules = (*HEAVY_MODULES, "pyarrow", "av", "PIL")
    round_trip_importer = "lerobot"

    def export_cases(self) -> list[ExportCase]:
        synthetic, oracle = _synthetic()
        images = expected_import("pendulum-images", final_observation="missing")
        return [
            ExportCase({"pendulum": _imported("pendulum-images")}, {}, "pendulum-images",
                       images, name="images"),
            ExportCase({"push": synthetic}, {"fps": 15, "task": "push"}, None, oracle,
                       name="synthetic"),
            # AV1 re-encoded: the kit checks that the bytes are reproducible
            ExportCase({"pendulum": _imported("pendulum-video")}, {}, "pendulum-video",
                       expected_import("pendulum-video", final_observation="missing"),
                       name="video"),
        ]  # fmt: skip

    def check_round_trip(self, dataset: Dataset, report: Any, case: ExportCase) -> None:
        if case.name != "video":
            super().check_round_trip(dataset, report, case)
            return
        # everything but the images exactly; the images within AV1's loss of a re-encode
        assert case.round_trip is not None
        for e, expected in enumerate(case.round_trip.episodes):
            read = dataset.episode(e).read()
            np.testing.assert_array_equal(read.all_obs["state"], expected.observations["state"])
            np.testing.assert_array_equal(read.action, expected.actions["action"])
            np.testing.assert_array_equal(read.reward, expected.rewards["reward"])
            difference = np.abs(read.all_obs["image"].astype(int) - expected.observations["image"])
            assert difference.mean() < 3.0, difference.mean()

    def check_export(self, destination: Path, case: ExportCase, report: Any) -> None:
        if case.oracle is None:
            info = json.loads((destination / "meta" / "info.json").read_text())
            assert info["features"]["observation.cam"]["shape"] == [8, 6, 3]
            assert info["features"]["action"] == {"dtype": "int64", "shape": [1], "names": None}
            return
        source = DATA / case.oracle
        assert pq.read_table(destination / DATA_FILE).equals(pq.read_table(source / DATA_FILE))

    def failing_exports(self) -> list[FailingExport]:
        synthetic, _ = _synthetic()
        text = Dataset.create(DatasetSchema([FieldSpec("s", shape=(2,), dtype="float32"),
                                             FieldSpec("note", shape=(), dtype="<U4", role="info")]))  # fmt: skip
        text.add_episode({
            "initial_observation": {"s": np.zeros(2, np.float32)}, "initial_info": {"note": "a"},
            "observations": {"s": np.ones((1, 2), np.float32)}, "infos": {"note": np.asarray(["b"])},
        })  # fmt: skip
        return [
            FailingExport({"push": synthetic}, {}, FormatError, "frame rate is unknown"),
            FailingExport({"push": synthetic}, {"fps": 5, "episodes": [1, 2]}, FormatError,
                          re.escape("names position(s) [2], but dataset 'push' holds episodes 0..1")),
            FailingExport({"t": text}, {"fps": 5}, FormatError, re.escape("field 'info/note' has dtype")),
            FailingExport({"a": synthetic, "b": _imported("pendulum-images")}, {"fps": 5}, FormatError,
                          "another schema"),
        ]  # fmt: skip


def _episodes_table(path: Path) -> dict[str, list[Any]]:
    return pq.read_table(path / EPISODES_FILE).to_pydict()


def _close(actual: Any, expected: Any, name: str, video: bool) -> None:
    # LeRobot's own numbers, computed its way (float32 estimator, frame sample): equal to
    # 1e-6. LeRobot computed a video's statistics on the frames before encoding, we on the
    # decoded frames: there the image statistics differ by the codec's loss
    if video and name.startswith("stats/observation.image/"):
        np.testing.assert_allclose(np.asarray(actual, float), np.asarray(expected, float),
                                   atol=0.15, err_msg=name)  # fmt: skip
        return
    np.testing.assert_allclose(np.asarray(actual, float), np.asarray(expected, float), rtol=1e-6,
                               atol=0, err_msg=name)  # fmt: skip


@pytest.mark.parametrize("name", ["pendulum-images", "pendulum-video"])
def test_round_trip_gives_the_same_dataset(name: str, tmp_path: Path) -> None:
    source = DATA / name
    out = tmp_path / name
    export_datasets("lerobot", _imported(name), out)
    # frames: every column equal, PNG bytes included; videos carry no column
    assert pq.read_table(out / DATA_FILE).equals(pq.read_table(source / DATA_FILE))
    assert json.loads((out / "meta/info.json").read_text()) == json.loads(
        (source / "meta/info.json").read_text()
    )
    tasks = pq.read_table(out / "meta/tasks.parquet")
    assert tasks.equals(pq.read_table(source / "meta/tasks.parquet").select(tasks.column_names))
    ours, theirs = _episodes_table(out), _episodes_table(source)
    assert list(ours) == list(theirs)  # the same columns in the same order
    for column, values in theirs.items():
        if column.startswith("stats/"):
            _close(ours[column], values, column, "video" in name)
        else:
            assert ours[column] == values, column
    stats_ours = json.loads((out / "meta/stats.json").read_text())
    stats_theirs = json.loads((source / "meta/stats.json").read_text())
    assert set(stats_ours) == set(stats_theirs)  # LeRobot writes them in set order
    for feature, values in stats_theirs.items():
        for key, value in values.items():
            _close(stats_ours[feature][key], value, f"stats/{feature}/{key}", "video" in name)
    recorded = json.loads((out / "meta/episodata.json").read_text())
    assert [e["terminated"] for e in recorded["episodes"]] == [True] * 3
    assert set(recorded["not_stored"]) == {"final_observation", "terminated_vs_truncated"}


def _decode(path: Path) -> np.ndarray:
    with av.open(str(path)) as container:
        return np.stack([f.to_ndarray(format="rgb24") for f in container.decode(video=0)])


@pytest.mark.parametrize("codec", ["av1", "h264"])
def test_video_export_is_within_codec_loss(codec: str, tmp_path: Path) -> None:
    out = tmp_path / codec
    export_datasets("lerobot", _imported("pendulum-video"), out, video_codec=codec, crf=20)
    decoded = _decode(out / MP4)
    source = np.concatenate(frame_images("pendulum-video"))
    assert decoded.shape == source.shape
    difference = np.abs(decoded.astype(int) - source)
    assert difference.mean() < 2.0, difference.mean()
    info = json.loads((out / "meta/info.json").read_text())
    assert info["features"]["observation.image"]["info"]["video.codec"] == codec
    starts = _episodes_table(out)["videos/observation.image/from_timestamp"]
    assert starts == [0.0, 0.6, 1.0]
    # and our importer reads it back frame for frame as PyAV decodes it
    again, _ = import_dataset("lerobot", out, final_observation="missing")
    images = np.concatenate([again.episode(e).read().all_obs["image"][:-1] for e in range(3)])
    np.testing.assert_array_equal(images, decoded)


def test_png_images_export_as_video_on_request(tmp_path: Path) -> None:
    out = tmp_path / "as-video"
    export_datasets("lerobot", _imported("pendulum-images"), out, images="video")
    assert "observation.image" not in pq.read_table(out / DATA_FILE).column_names
    assert _decode(out / MP4).shape == (18, 32, 32, 3)


def test_a_selection_of_episodes_exports_those_only(tmp_path: Path) -> None:
    out = tmp_path / "two"
    report = export_datasets("lerobot", _imported("pendulum-images"), out, episodes=[2, 0])
    assert (report.episodes, report.frames) == (2, 14)
    frames = pq.read_table(out / DATA_FILE)
    source = pq.read_table(DATA / "pendulum-images" / DATA_FILE)
    # episode 2's frames, then episode 0's, renumbered
    order = np.r_[10:18, 0:6]
    for column in ("observation.state", "action", "next.reward", "observation.image"):
        assert frames.column(column).to_pylist() == source.column(column).take(order).to_pylist()
    assert frames.column("episode_index").to_pylist() == [0] * 8 + [1] * 6
    assert frames.column("index").to_pylist() == list(range(14))
    recorded = json.loads((out / "meta/episodata.json").read_text())["episodes"]
    assert [e["source_episode_index"] for e in recorded] == [2, 0]


def _files_of(out: Path, folder: str) -> dict[tuple[int, int], Path]:
    """``{(chunk_index, file_index): path}`` of the files in ``out/folder/chunk-*/``."""
    found = {}
    for path in (out / folder).glob("chunk-*/file-*.*"):
        match = re.fullmatch(
            r"chunk-(\d+)/file-(\d+)\.\w+", path.relative_to(out / folder).as_posix()
        )
        assert match is not None, path
        found[int(match[1]), int(match[2])] = path
    return dict(sorted(found.items()))


def test_data_files_split_at_the_size_limit(tmp_path: Path) -> None:
    out = tmp_path / "split"
    # ~1 KiB per episode of 32x32 PNGs: every episode starts a new file; 2 files per chunk
    export_datasets("lerobot", _imported("pendulum-images"), out, data_files_size_in_mb=0.002,
                    chunks_size=2)  # fmt: skip
    files = _files_of(out, "data")
    assert list(files) == [(0, 0), (0, 1), (1, 0)]
    info = json.loads((out / "meta/info.json").read_text())
    assert (info["data_files_size_in_mb"], info["chunks_size"]) == (0.002, 2)
    # the files hold LeRobot's own frames, in order, whole episodes each
    tables = [pq.read_table(path) for path in files.values()]
    source = pq.read_table(DATA / "pendulum-images" / DATA_FILE)
    assert pa.concat_tables(tables).equals(source)
    episodes = _episodes_table(out)
    for e in range(3):
        where = (episodes["data/chunk_index"][e], episodes["data/file_index"][e])
        assert set(pq.read_table(files[where]).column("episode_index").to_pylist()) == {e}
    # and the importer reads them back exactly
    again, _ = import_dataset("lerobot", out, final_observation="missing")
    for e in range(3):
        expected = expected_episode("pendulum-images", e, "missing")
        read = again.episode(e).read()
        np.testing.assert_array_equal(read.all_obs["image"], expected.observations["image"])
        np.testing.assert_array_equal(read.all_obs["state"], expected.observations["state"])
        np.testing.assert_array_equal(read.action, expected.actions["action"])
        np.testing.assert_array_equal(read.reward, expected.rewards["reward"])


def _noise_camera(lengths: tuple[int, ...]) -> Dataset:
    """Episodes of 48x48 noise: ~5 KB per AV1 frame, so a few episodes fill 0.1 MiB."""
    rng = np.random.default_rng(9)
    dataset = Dataset.create(DatasetSchema([
        FieldSpec("cam", shape=(48, 48, 3), dtype="uint8", layout="HWC"),
        FieldSpec("action", shape=(2,), dtype="float32", role="action"),
    ]))  # fmt: skip
    for n in lengths:
        cam = rng.integers(0, 256, size=(n + 1, 48, 48, 3), dtype=np.uint8)
        dataset.add_episode({
            "initial_observation": {"cam": cam[0]}, "observations": {"cam": cam[1:]},
            "actions": rng.normal(size=(n, 2)).astype(np.float32), "terminated": True,
        })  # fmt: skip
    return dataset


LENGTHS_NOISE = (30, 20, 40, 25, 35, 30)


@pytest.mark.parametrize("codec", ["av1", "h264"])
def test_video_files_split_at_the_size_limit(codec: str, tmp_path: Path) -> None:
    out = tmp_path / "split"
    export_datasets("lerobot", _noise_camera(LENGTHS_NOISE), out, fps=10, task="look",
                    images="video", video_codec=codec, video_files_size_in_mb=0.1,
                    chunks_size=3)  # fmt: skip
    files = _files_of(out, "videos/observation.cam")
    assert len(files) >= 2, files
    episodes = _episodes_table(out)
    where = list(zip(episodes["videos/observation.cam/chunk_index"],
                     episodes["videos/observation.cam/file_index"], strict=True))  # fmt: skip
    assert sorted(set(where)) == list(files)  # episodes fill the files in order
    for (chunk, file), path in files.items():
        held = [e for e, w in enumerate(where) if w == (chunk, file)]
        decoded = _decode(path)
        assert len(decoded) == sum(LENGTHS_NOISE[e] for e in held)  # whole episodes
        starts = [episodes["videos/observation.cam/from_timestamp"][e] for e in held]
        assert starts[0] == 0.0  # each file's timeline starts at 0
    # the importer reads each episode's frames as PyAV decodes the files, one after another
    again, _ = import_dataset("lerobot", out, final_observation="missing")
    ours = np.concatenate([again.episode(e).read().all_obs["cam"][:-1] for e in range(6)])
    np.testing.assert_array_equal(ours, np.concatenate([_decode(p) for p in files.values()]))
