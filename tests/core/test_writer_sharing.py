"""One writer per folder per process: handles share it, and a dropped handle releases it.

Every check of the lock is made by a real child process that tries to write: it
succeeds exactly when no handle of this process still holds the folder. The values read
back are compared with the id-built episodes of ``_oracle``.
"""

from __future__ import annotations

import contextlib
import gc
import os
from typing import TYPE_CHECKING

import pytest
from _oracle import SCHEMA, assert_dataset, assert_episode, episode, run_child

from episodata import Dataset
from episodata_core.errors import DatasetStateError
from episodata_core.location import WriterLock

if TYPE_CHECKING:
    from pathlib import Path

BACKENDS = ["zarr", "npz_directory"]

# writes episode argv[2] and exits 0, or prints the refusal and exits 3
CHILD_WRITES = """
import sys
from _oracle import episode
from episodata import Dataset
from episodata_core.errors import DatasetStateError

dataset = Dataset.open(sys.argv[1])
try:
    dataset.add_episode(episode(int(sys.argv[2])))
except DatasetStateError as err:
    print(err)
    sys.exit(3)
dataset.close()
"""


def _child_writes(path: str, episode_id: int) -> tuple[int, str]:
    done = run_child(CHILD_WRITES, path, str(episode_id))
    assert done.returncode in (0, 3), done.stderr
    return done.returncode, done.stdout


@pytest.fixture(params=BACKENDS)
def stored(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    path = str(tmp_path / "ds")
    Dataset.from_episodes([episode(0)], SCHEMA, path, backend=request.param).close()
    return path


def test_rebinding_a_handle_and_writing_again_works(stored: str) -> None:
    # a notebook cell run twice: the first handle is dropped while holding the writer
    ds = Dataset.open(stored)
    ds.add_episode(episode(1))
    ds = Dataset.open(stored)
    ds.add_episode(episode(2))
    ds = Dataset.open(stored)
    ds.add_episode(episode(3))
    assert_dataset(ds, 4)
    ds.close()
    assert_dataset(Dataset.open(stored, read_only=True), 4)


def test_a_collected_handle_releases_the_lock(stored: str) -> None:
    ds = Dataset.open(stored)
    ds.add_episode(episode(1))
    code, message = _child_writes(stored, 2)
    assert code == 3, "the child wrote while this process held the writer"
    assert f"another process (pid {os.getpid()})" in message
    del ds
    gc.collect()
    code, message = _child_writes(stored, 2)
    assert code == 0, message
    assert_dataset(Dataset.open(stored, read_only=True), 3)


def test_an_exception_path_releases_the_lock(stored: str) -> None:
    def fails_after_writing() -> None:
        handle = Dataset.open(stored)
        handle.add_episode(episode(1))
        raise RuntimeError("the user's code fails")

    with contextlib.suppress(RuntimeError):
        fails_after_writing()
    gc.collect()
    assert _child_writes(stored, 2)[0] == 0

    def fails_inside_with() -> None:
        with Dataset.open(stored) as ds:
            ds.add_episode(episode(3))
            raise RuntimeError("inside with")

    with pytest.raises(RuntimeError, match="inside with"):
        fails_inside_with()
    assert _child_writes(stored, 4)[0] == 0
    assert_dataset(Dataset.open(stored, read_only=True), 5)


def test_two_handles_in_one_process_both_write_and_read_everything(stored: str) -> None:
    a = Dataset.open(stored)
    b = Dataset.open(stored)
    a.add_episode(episode(1))
    b.add_episode(episode(2))
    three = episode(3)
    last = len(three["actions"]) - 1

    def step(t: int) -> dict[str, object]:
        return {
            "observations": {"state": three["observations"]["state"][t]},
            "actions": three["actions"][t],
            "rewards": three["rewards"][t],
            "terminated": t == last,
        }

    writer = a.new_episode({"state": three["initial_observation"]["state"]})
    for t in range(last):
        writer.add_step(step(t))
    b.add_episode(episode(4))  # while a's episode 3 is ongoing: ids stay in one sequence
    # b sees a's ongoing episode, and resumes it
    assert b.episode(3).ongoing
    b.resume_episode(3).add_step(step(last))
    for handle in (a, b):
        assert_dataset(handle, 5)
    a.update_metadata({"from": "a"})
    b.update_metadata({"also": "b"})
    assert a.manifest.metadata == b.manifest.metadata == {"from": "a", "also": "b"}
    a.close()
    b.add_episode(episode(5))  # the lock stays while one handle is left
    assert _child_writes(stored, 9)[0] == 3
    b.close()
    assert _child_writes(stored, 6)[0] == 0
    reader = Dataset.open(stored, read_only=True)
    assert_dataset(reader, 7)
    assert reader.manifest.metadata == {"from": "a", "also": "b"}


def test_a_handle_opened_while_one_writes_sees_its_ongoing_episode(stored: str) -> None:
    a = Dataset.open(stored)
    a.new_episode({"state": episode(1)["initial_observation"]["state"]})
    b = Dataset.open(stored)
    assert b.num_episodes == 2
    assert b.episode(1).ongoing
    del a
    gc.collect()
    # b still holds the writer: the ongoing episode is neither flushed away nor lost
    assert _child_writes(stored, 5)[0] == 3
    b.close()
    reopened = Dataset.open(stored, read_only=True)
    assert reopened.num_episodes == 2
    assert reopened.episode(1).ongoing


def test_another_process_is_refused_and_named(stored: str) -> None:
    holder = Dataset.open(stored)
    holder.add_episode(episode(1))
    code, message = _child_writes(stored, 2)
    assert code == 3
    assert f"being written by another process (pid {os.getpid()})" in message
    holder.close()
    assert _child_writes(stored, 2)[0] == 0
    assert_dataset(Dataset.open(stored, read_only=True), 3)


def test_a_refusal_never_calls_this_process_another(stored: str) -> None:
    # a lock taken outside the shared writer (here a WriterLock of its own) still refuses,
    # but says that this process holds it
    with WriterLock(stored):
        handle = Dataset.open(stored)
        with pytest.raises(DatasetStateError, match=r"this process \(pid \d+\)") as caught:
            handle.add_episode(episode(1))
        assert "another process" not in str(caught.value)
        assert handle.num_episodes == 1
        handle.close()
    handle = Dataset.open(stored)
    handle.add_episode(episode(1))
    assert_episode(handle, 1)
    handle.close()


def test_read_only_handles_keep_their_own_snapshot(stored: str) -> None:
    writer = Dataset.open(stored)
    reader = Dataset.open(stored, read_only=True)
    writer.add_episode(episode(1))
    assert reader.num_episodes == 1  # a snapshot, as in another process
    reader.refresh()
    assert_dataset(reader, 2)
    with pytest.raises(DatasetStateError, match="read_only=True"):
        reader.add_episode(episode(2))
    writer.close()
    reader.close()
