"""The sample file of the README imports exactly: every episode, flag and value."""

from __future__ import annotations

import subprocess
import sys

import h5py
import numpy as np

from episodata import Dataset
from episodata_core.cli import main


def test_sample_module_writes_a_file_that_imports_exactly(tmp_path):
    path = tmp_path / "hopper-sample.hdf5"
    done = subprocess.run(
        [sys.executable, "-m", "episodata_d4rl.sample", str(path), "--episodes", "6"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "6 episodes" in done.stdout
    with h5py.File(path, "r") as file:
        raw = {name: file[name][()] for name in ("observations", "next_observations", "actions")}
        raw["rewards"] = file["rewards"][()]
        ends = np.flatnonzero(file["terminals"][()] | file["timeouts"][()])
        terminals = file["terminals"][()]
    assert raw["observations"].shape[1] == 11
    assert raw["actions"].shape[1] == 3
    assert main(["import", "d4rl", str(path), str(tmp_path / "hopper"), "--quiet"]) == 0
    dataset = Dataset.open(tmp_path / "hopper", read_only=True)
    assert dataset.num_episodes == len(ends) == 6
    start = 0
    for episode, end in zip(dataset, ends, strict=True):
        rows = slice(start, end + 1)
        segment = episode.read()
        np.testing.assert_array_equal(segment.obs, raw["observations"][rows])
        np.testing.assert_array_equal(segment.next_obs, raw["next_observations"][rows])
        np.testing.assert_array_equal(segment.action, raw["actions"][rows])
        np.testing.assert_array_equal(segment.reward, raw["rewards"][rows])
        assert bool(segment.terminated[-1]) == bool(terminals[end])
        assert bool(segment.truncated[-1]) == (not terminals[end])
        start = end + 1
    dataset.close()


def test_the_same_seed_writes_the_same_file(tmp_path):
    from episodata_d4rl.sample import write_sample

    first = write_sample(tmp_path / "a.hdf5", episodes=3, seed=7)
    second = write_sample(tmp_path / "b.hdf5", episodes=3, seed=7)
    with h5py.File(first, "r") as a, h5py.File(second, "r") as b:
        for name in ("observations", "actions", "rewards", "terminals", "timeouts"):
            np.testing.assert_array_equal(a[name][()], b[name][()])
