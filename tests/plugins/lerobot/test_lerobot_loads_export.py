"""LeRobot 0.6.1 itself loads what the lerobot exporter writes (slow: its own environment).

LeRobot needs Python >= 3.12, numpy < 2.3 and torch < 2.12, so it runs in a venv of its
own: ``EPISODATA_LEROBOT_PYTHON`` names that venv's python, or the test makes one with uv::

    uv venv --python 3.12 /tmp/lerobot-0.6.1-venv
    VIRTUAL_ENV=/tmp/lerobot-0.6.1-venv uv pip install "lerobot[dataset]==0.6.1"
    EPISODATA_LEROBOT_PYTHON=/tmp/lerobot-0.6.1-venv/bin/python uv run pytest -m slow \\
        tests/plugins/lerobot/test_lerobot_loads_export.py
"""

from __future__ import annotations

import subprocess
import textwrap
from typing import TYPE_CHECKING, Any

import av
import numpy as np
import pytest
from lerobot_fixtures import DATA, truth

from episodata_core.dataset import Dataset
from episodata_core.schema import DatasetSchema, FieldSpec
from episodata_core.transfer import export_datasets, import_dataset

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.slow

LOADER = textwrap.dedent(
    """
    import sys
    import numpy as np
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    dataset = LeRobotDataset("local/episodata-export", root=sys.argv[1])
    items = [dataset[i] for i in range(len(dataset))]
    arrays = {k: np.stack([np.asarray(item[k]) for item in items]) for k in items[0] if k != "task"}
    arrays["task"] = np.asarray([item["task"] for item in items])
    np.savez(sys.argv[2], **arrays)
    """
)


def _load(python: str, root: Path, tmp_path: Path) -> dict[str, np.ndarray]:
    out = tmp_path / f"{root.name}.npz"
    result = subprocess.run(
        [python, "-c", LOADER, str(root), str(out)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr[-4000:]
    with np.load(out) as loaded:
        return {key: loaded[key] for key in loaded.files}


def _mp4_frames(root: Path, key: str) -> np.ndarray:
    """Every frame of every file of a video feature, file after file."""
    frames = []
    for path in sorted((root / "videos" / key).glob("chunk-*/file-*.mp4")):
        with av.open(str(path)) as container:
            frames += [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
    return np.stack(frames)


@pytest.mark.parametrize(("name", "options"), [
    ("pendulum-images", {}), ("pendulum-video", {}), ("pendulum-video", {"video_codec": "h264"}),
    # every episode in a data file of its own, two files per chunk folder
    ("pendulum-images", {"data_files_size_in_mb": 0.002, "chunks_size": 2}),
    ("pendulum-video", {"data_files_size_in_mb": 0.001, "chunks_size": 2}),
])  # fmt: skip
def test_lerobot_loads_a_round_trip(
    lerobot_python: str, name: str, options: dict[str, Any], tmp_path: Path
) -> None:
    dataset, _ = import_dataset("lerobot", DATA / name, final_observation="missing")
    root = tmp_path / "export"
    export_datasets("lerobot", dataset, root, **options)
    loaded = _load(lerobot_python, root, tmp_path)
    expected = truth(name)  # what LeRobot returned for the original dataset
    for key in ("observation.state", "action", "next.reward", "next.done", "episode_index",
                "frame_index", "index", "timestamp"):  # fmt: skip
        np.testing.assert_array_equal(loaded[key].reshape(expected[f"lerobot/{key}"].shape),
                                      expected[f"lerobot/{key}"], err_msg=key)  # fmt: skip
    assert set(loaded["task"].tolist()) == {"swing up"}
    if name == "pendulum-images":
        np.testing.assert_array_equal(
            loaded["observation.image"], expected["lerobot/observation.image"]
        )
    else:  # re-encoded: LeRobot decodes our file exactly as PyAV does
        frames = _mp4_frames(root, "observation.image").transpose(0, 3, 1, 2)
        np.testing.assert_array_equal(loaded["observation.image"] * 255, frames.astype(np.float32))


def test_lerobot_loads_episodes_that_never_were_lerobot(
    lerobot_python: str, tmp_path: Path
) -> None:
    rng = np.random.default_rng(3)
    schema = DatasetSchema([
        FieldSpec("pos", shape=(2,), dtype="float32"),
        FieldSpec("cam", shape=(3, 8, 8), dtype="uint8", layout="CHW"),
        FieldSpec("action", shape=(2,), dtype="float32", role="action"),
        FieldSpec("reward", shape=(), dtype="float32", role="reward"),
    ])  # fmt: skip
    dataset = Dataset.create(schema)
    pos = rng.normal(size=(6, 2)).astype(np.float32)
    cam = rng.integers(0, 256, size=(6, 3, 8, 8), dtype=np.uint8)
    action = rng.normal(size=(5, 2)).astype(np.float32)
    reward = rng.normal(size=5).astype(np.float32)
    dataset.add_episode({
        "initial_observation": {"pos": pos[0], "cam": cam[0]},
        "observations": {"pos": pos[1:], "cam": cam[1:]},
        "actions": action, "rewards": reward, "terminated": True,
    })  # fmt: skip
    root = tmp_path / "synthetic"
    export_datasets("lerobot", dataset, root, fps=20, task="reach", robot_type="arm")
    loaded = _load(lerobot_python, root, tmp_path)
    np.testing.assert_array_equal(loaded["observation.pos"], pos[:5])
    np.testing.assert_array_equal(loaded["observation.cam"], cam[:5].astype(np.float32) / 255)
    np.testing.assert_array_equal(loaded["action"], action)
    np.testing.assert_array_equal(loaded["next.reward"].reshape(5), reward)
    np.testing.assert_array_equal(loaded["next.done"].reshape(5), [False] * 4 + [True])
    assert loaded["task"].tolist() == ["reach"] * 5


def test_lerobot_loads_videos_split_into_several_files(lerobot_python: str, tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    dataset = Dataset.create(DatasetSchema([
        FieldSpec("cam", shape=(48, 48, 3), dtype="uint8", layout="HWC"),
        FieldSpec("action", shape=(2,), dtype="float32", role="action"),
    ]))  # fmt: skip
    actions = []
    for n in (30, 20, 40, 25, 35, 30):
        cam = rng.integers(0, 256, size=(n + 1, 48, 48, 3), dtype=np.uint8)
        actions.append(rng.normal(size=(n, 2)).astype(np.float32))
        dataset.add_episode({"initial_observation": {"cam": cam[0]},
                             "observations": {"cam": cam[1:]}, "actions": actions[-1],
                             "terminated": True})  # fmt: skip
    root = tmp_path / "split"
    export_datasets("lerobot", dataset, root, fps=10, task="look", images="video",
                    video_files_size_in_mb=0.1, chunks_size=3)  # fmt: skip
    assert len(list(root.glob("videos/observation.cam/chunk-*/file-*.mp4"))) >= 2
    loaded = _load(lerobot_python, root, tmp_path)
    frames = _mp4_frames(root, "observation.cam").transpose(0, 3, 1, 2)
    np.testing.assert_array_equal(loaded["observation.cam"] * 255, frames.astype(np.float32))
    np.testing.assert_array_equal(loaded["action"], np.concatenate(actions))
