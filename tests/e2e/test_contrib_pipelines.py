"""The example pipelines of contrib/pipelines run end to end on a synthetic D4RL file."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from tests.fixtures.hdf5_sources import write_h5

from episodata import Dataset, Pipeline
from episodata_core.cli import main

PIPELINES = Path(__file__).resolve().parents[2] / "contrib" / "pipelines"
EPISODES, STEPS = 8, 40


def _d4rl_file(path: Path) -> dict[str, np.ndarray]:
    """Action-out D4RL rows: EPISODES episodes of STEPS steps ending in timeouts."""
    rows = EPISODES * STEPS
    t = np.arange(rows)
    arrays = {
        "observations": np.stack([t, t % STEPS, t // STEPS], axis=1).astype(np.float32),
        "actions": (t % 3).astype(np.float32)[:, None].repeat(2, axis=1),
        "rewards": (t / 10).astype(np.float32),
        "terminals": np.zeros(rows, dtype=bool),
        "timeouts": (t % STEPS) == STEPS - 1,
    }
    write_h5(path, arrays)
    return arrays


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    for name in ("d4rl-to-segments.toml", "copy-to-npz.toml"):
        shutil.copy(PIPELINES / name, tmp_path / name)
    return tmp_path


def test_d4rl_to_zarr_to_segments_then_to_npz(workdir: Path, capsys: pytest.CaptureFixture[str]):
    arrays = _d4rl_file(workdir / "hopper-medium-v2.hdf5")
    toml = workdir / "d4rl-to-segments.toml"
    assert main(["pipeline", "validate", str(toml)]) == 0
    assert not (workdir / "hopper").exists()  # validate writes nothing
    assert main(["pipeline", "run", str(toml), "--quiet"]) == 0

    dataset = Dataset.open(workdir / "hopper", read_only=True)
    assert dataset.manifest.backend == "zarr"
    # no next_observations: each episode's last step has no successor and is dropped
    assert dataset.num_episodes == EPISODES
    first = dataset.episode(0).read()
    assert len(first) == STEPS - 1
    np.testing.assert_array_equal(first.obs, arrays["observations"][: STEPS - 1])
    np.testing.assert_array_equal(first.next_obs, arrays["observations"][1:STEPS])
    np.testing.assert_array_equal(first.action, arrays["actions"][: STEPS - 1])
    assert dataset.manifest.metadata["pipeline"]["config"]["source"]["importer"] == "d4rl"
    dataset.close()

    segments = workdir / "hopper-segments"
    assert (segments / "SHA256SUMS").is_file()
    archives = sorted((segments / "episodes" / "hopper").glob("episode_*.npz"))
    assert len(archives) == 5
    with np.load(archives[0], allow_pickle=False) as member:
        assert member["observation"].shape == (26, 3)  # K + 1 observations
        assert member["action"].shape == (25, 2)  # K actions

    copy = workdir / "copy-to-npz.toml"
    assert main(["pipeline", "run", str(copy), "--quiet"]) == 0
    migrated = Dataset.open(workdir / "hopper-npz", read_only=True)
    original = Dataset.open(workdir / "hopper", read_only=True)
    assert migrated.manifest.backend == "npz_directory"
    for a, b in zip(original, migrated, strict=True):
        for key, value in a.read().buffers.items():
            np.testing.assert_array_equal(b.read().buffers[key], value)


def test_same_pipeline_from_python(workdir: Path):
    _d4rl_file(workdir / "hopper-medium-v2.hdf5")
    pipeline = Pipeline.from_toml(workdir / "d4rl-to-segments.toml")
    result = pipeline.run(progress=False)
    assert result.import_report.episodes_imported == EPISODES
    assert result.import_report.final_transitions_dropped == EPISODES
    result.dataset.close()
