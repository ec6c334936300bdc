"""What a killed writer leaves behind, and how reads and the next writer deal with it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import h5py
from episodata import Dataset
from episodata_core.testing import example_schema

from _helpers import assert_episode, episode_rows, run_python, sha256
from episodata_plugin_example._format import writer_flags

if TYPE_CHECKING:
    from pathlib import Path

# Commits two episodes, leaves an ongoing one in the spill, then dies in the middle of a
# third commit: rows appended and flushed, record and counter not written yet.
KILLED_MID_COMMIT = """
import os, signal, sys
from _helpers import episode_rows
from episodata import Dataset
from episodata_core.testing import example_schema

dataset = Dataset.create(example_schema(), sys.argv[1], backend="hdf5")
backend = dataset.backend
for episode in range(2):
    backend.add_episode(episode_rows(dataset.schema, episode), terminated=True, truncated=False)
backend.start_episode(episode_rows(dataset.schema, 2))
dataset.flush()
store = backend._store
for rows in store._rows.values():
    rows.resize(rows.shape[0] + 5, axis=0)
    rows[-5:] = 1
store._file.flush()
os.kill(os.getpid(), signal.SIGKILL)
"""

# Recovery that dies just before its rebuilt file would replace data.h5.
KILLED_DURING_RECOVERY = """
import os, signal, sys
from episodata import Dataset

os.replace = lambda *args: os.kill(os.getpid(), signal.SIGKILL)
Dataset.open(sys.argv[1]).update_metadata({"recovered": True})
"""


def _episode_rows(episode: int) -> dict[str, Any]:
    return episode_rows(example_schema(), episode)


def _crash(tmp_path: Path) -> Path:
    location = tmp_path / "ds"
    result = run_python(KILLED_MID_COMMIT, str(location))
    assert result.returncode == -9, result.stderr
    return location


def test_readers_open_a_crashed_file_without_changing_it(tmp_path: Path) -> None:
    location = _crash(tmp_path)
    data = location / "data.h5"
    assert writer_flags(data)  # HDF5 still says a writer has it open
    before = sha256(data)
    reader = Dataset.open(location, read_only=True)
    table = reader.backend.episode_table()
    assert table.ongoing.tolist() == [False, False, True]
    for episode in range(2):
        assert_episode(reader.backend, episode, _episode_rows(episode))
    assert_episode(reader.backend, 2, _episode_rows(2))
    reader.close()
    assert sha256(data) == before


def test_the_next_writer_rebuilds_the_committed_part(tmp_path: Path) -> None:
    location = _crash(tmp_path)
    data = location / "data.h5"
    with h5py.File(data, "r", swmr=True) as file:
        garbage_rows = file["rows/observation/state"].shape[0]
    writer = Dataset.open(location)
    writer.update_metadata({"recovered": True})  # the first write reopens for writing
    assert writer.backend.verify() == []  # type: ignore[attr-defined]
    writer.close()
    assert writer_flags(data) == 0
    committed = sum(len(_episode_rows(e)["observation/state"]) for e in range(2))
    with h5py.File(data, "r") as file:
        assert file["rows/observation/state"].shape[0] == committed < garbage_rows
    reopened = Dataset.open(location, read_only=True)
    assert reopened.backend.episode_table().ongoing.tolist() == [False, False, True]
    for episode in range(3):
        assert_episode(reopened.backend, episode, _episode_rows(episode))
    reopened.close()


def test_a_recovery_killed_midway_leaves_the_original(tmp_path: Path) -> None:
    location = _crash(tmp_path)
    data = location / "data.h5"
    before = sha256(data)
    result = run_python(KILLED_DURING_RECOVERY, str(location))
    assert result.returncode == -9, result.stderr
    assert sha256(data) == before
    assert (location / ".data.h5.rebuild.tmp").exists()
    writer = Dataset.open(location)
    writer.update_metadata({"recovered": True})
    writer.close()
    assert not (location / ".data.h5.rebuild.tmp").exists()
    assert writer_flags(data) == 0
    reopened = Dataset.open(location, read_only=True)
    for episode in range(3):
        assert_episode(reopened.backend, episode, _episode_rows(episode))
    reopened.close()


def test_a_reader_follows_a_rebuilt_file(tmp_path: Path) -> None:
    location = _crash(tmp_path)
    reader = Dataset.open(location, read_only=True)
    writer = Dataset.open(location)
    writer.resume_episode(2).end(terminated=True)  # rebuilds data.h5, then commits
    reader.refresh()  # the old handle still reads the replaced file: refresh reopens
    assert reader.backend.episode_table().ongoing.tolist() == [False, False, False]
    for episode in range(3):
        assert_episode(reader.backend, episode, _episode_rows(episode))
    reader.close()
    writer.close()


def test_episode_ids_stay_contiguous_across_a_crash(tmp_path: Path) -> None:
    # episode 0 is ongoing and was never flushed when episode 1 is committed: the commit
    # spills it first, so the dataset never has an id that nothing describes
    code = """
import os, signal, sys
from _helpers import episode_rows
from episodata import Dataset
from episodata_core.testing import example_schema

dataset = Dataset.create(example_schema(), sys.argv[1], backend="hdf5")
dataset.backend.start_episode(episode_rows(dataset.schema, 0))
dataset.backend.add_episode(episode_rows(dataset.schema, 1), terminated=True, truncated=False)
os.kill(os.getpid(), signal.SIGKILL)
"""
    location = tmp_path / "ds"
    assert run_python(code, str(location)).returncode == -9
    reopened = Dataset.open(location, read_only=True)
    assert reopened.backend.episode_table().ongoing.tolist() == [True, False]
    for episode in range(2):
        assert_episode(reopened.backend, episode, _episode_rows(episode))
    reopened.close()
