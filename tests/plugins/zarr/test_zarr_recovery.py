"""Crashes, torn commits, damaged files, and what readers and recovery make of them."""

from __future__ import annotations

import json
import os
import pickle
import shutil
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
import tensorstore as ts
from _zarr_helpers import check_episode, make_backend, open_backend, rows_of

from episodata_core.dataset import Dataset
from episodata_core.errors import DatasetStateError, EpisodataError
from episodata_core.protocols import GatherRequest
from episodata_core.testing import example_rows, example_schema

if TYPE_CHECKING:
    from pathlib import Path


def _snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    return {
        str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def test_ids_stay_contiguous_without_a_flush(tmp_path: Path) -> None:
    schema = example_schema()
    writer = make_backend(tmp_path / "ds")
    waiting = writer.start_episode({k: v[:2] for k, v in rows_of(schema, 0).items()})
    writer.add_episode(rows_of(schema, 1), terminated=True, truncated=False)
    # episode 1 is durable, so episode 0 must be too: at least its first rows, still ongoing
    reader = open_backend(tmp_path / "ds")
    table = reader.episode_table()
    assert table.ongoing.tolist() == [True, False]
    assert table.length.tolist() == [1, 2]
    check_episode(reader, 0)
    check_episode(reader, 1)
    reader.close()
    writer.append_rows(waiting, {k: v[2:] for k, v in rows_of(schema, 0).items()})
    writer.finalize_episode(waiting, terminated=True, truncated=False)
    writer.close()
    reopened = open_backend(tmp_path / "ds")
    assert reopened.episode_table().ongoing.tolist() == [False, False]
    check_episode(reopened, 0)
    assert not (tmp_path / "ds" / "log.sqlite").exists()  # everything folded: no log left
    reopened.close()


def test_torn_fold_is_ignored_then_trimmed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from episodata_zarr import _fold

    schema = example_schema()
    folder = tmp_path / "ds"
    writer = make_backend(folder, fold_bytes=0)  # every finalize folds
    writer.add_episode(rows_of(schema, 0), terminated=True, truncated=False)

    def crash(*_: Any, **__: Any) -> None:
        raise KeyboardInterrupt  # the process dies right before the commit record

    # everything of the second fold lands (its chunks, the index) except commit.json
    monkeypatch.setattr(_fold, "write_commit", crash)
    with pytest.raises(KeyboardInterrupt):
        writer.add_episode(rows_of(schema, 1), terminated=True, truncated=False)
    writer._store.closed = True
    monkeypatch.undo()
    state = json.loads((folder / "data" / "observation" / "state" / "zarr.json").read_text())
    assert state["shape"][0] > 2  # the torn fold grew the array past the 2 committed rows
    reader = open_backend(folder)  # episode 1 is in the log, not in the torn arrays
    assert reader.episode_table().ongoing.tolist() == [False, False]
    check_episode(reader, 0)
    check_episode(reader, 1)
    reader.close()
    backend = open_backend(folder, writable=True)
    state = json.loads((folder / "data" / "observation" / "state" / "zarr.json").read_text())
    assert state["shape"][0] == 2  # trimmed to the committed rows
    assert len(backend.episode_table()) == 2
    # the stale rows beyond the commit are overwritten by the next fold
    assert backend.add_episode(rows_of(schema, 2), terminated=True, truncated=False) == 2
    backend.close()
    reopened = open_backend(folder)
    for episode in range(3):
        check_episode(reopened, episode)
    assert reopened.verify() == []
    reopened.close()


def test_failed_opens_change_no_file(tmp_path: Path) -> None:
    schema = example_schema()
    folder = tmp_path / "ds"
    writer = make_backend(folder)
    writer.add_episode(rows_of(schema, 0), terminated=True, truncated=False)
    writer.start_episode(rows_of(schema, 1))
    writer.flush()
    # leave torn state behind, as a crashed writer would
    writer.add_episode(rows_of(schema, 2), terminated=True, truncated=False)
    (folder / "commit.json").write_bytes(b"")
    writer._store.closed = True  # a crash: no close-time trimming or cleanup
    folder_copy = tmp_path / "copy"
    shutil.copytree(folder, folder_copy)
    with pytest.raises(EpisodataError, match=r"commit\.json"):
        open_backend(folder_copy)
    before = _snapshot(folder_copy)
    with pytest.raises(EpisodataError):
        open_backend(folder_copy, writable=True)
    assert _snapshot(folder_copy) == before


def test_reader_leaves_files_alone_after_a_crash(tmp_path: Path) -> None:
    schema = example_schema()
    folder = tmp_path / "ds"
    writer = make_backend(folder)
    writer.add_episode(rows_of(schema, 0), terminated=True, truncated=False)
    writer.start_episode(rows_of(schema, 1))
    writer.flush()  # episode 0 folded, 1 logged
    writer.add_episode(rows_of(schema, 2), terminated=True, truncated=False)  # logged
    writer._store.closed = True  # a crash: the log holds episodes 1 and 2
    # SQLite's shared-memory index (-shm) is where readers take their read marks: it is
    # SQLite's to change, and holds no data
    before = {k: v for k, v in _snapshot(folder).items() if not k.endswith("-shm")}
    reader = open_backend(folder)
    reader.refresh()
    for episode in range(3):
        check_episode(reader, episode)
    assert reader.verify() == []
    reader.close()
    assert {k: v for k, v in _snapshot(folder).items() if not k.endswith("-shm")} == before


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda data: data[: len(data) // 2], "not valid JSON"),
        (lambda data: b"", "not valid JSON"),
        (lambda data: data.replace(b'"rows": ', b'"rows": 1'), "checksum does not match"),
        (lambda data: b"[1, 2]", "no 'crc32' member"),
    ],
    ids=["truncated", "empty", "edited", "not-a-record"],
)
def test_damaged_commit_record_is_a_clear_error(tmp_path: Path, damage: Any, message: str) -> None:
    schema = example_schema()
    dataset = Dataset.create(schema, tmp_path / "ds", backend="zarr")
    dataset.add_episode(
        {
            "initial_observation": {
                "state": np.zeros(3, np.float32),
                "camera": np.zeros((2, 4, 4), np.uint8),
            },
            "observations": {
                "state": np.ones((2, 3), np.float32),
                "camera": np.ones((2, 2, 4, 4), np.uint8),
            },
            "actions": {
                "camera": np.ones((2, 2), np.float32),
                "keyboard/jump": np.array([True, False]),
            },
            "rewards": np.ones(2, np.float32),
            "initial_info": {"step_idx": np.int64(0)},
            "infos": {"step_idx": np.array([1, 2])},
        }
    )
    dataset.close()
    record = tmp_path / "ds" / "commit.json"
    record.write_bytes(damage(record.read_bytes()))
    with pytest.raises(EpisodataError, match=message) as caught:
        Dataset.open(tmp_path / "ds")
    assert "commit.json" in str(caught.value)


def test_missing_commit_record(tmp_path: Path) -> None:
    make_backend(tmp_path / "ds").close()
    (tmp_path / "ds" / "commit.json").unlink()
    with pytest.raises(EpisodataError, match=r"commit\.json' is missing: the folder is not a Zarr"):
        open_backend(tmp_path / "ds")


def test_damaged_index_entry_is_refused(tmp_path: Path) -> None:
    schema = example_schema()
    backend = make_backend(tmp_path / "ds")
    for episode in range(3):
        backend.add_episode(rows_of(schema, episode), terminated=True, truncated=False)
    backend.close()
    # a well-formed chunk (its CRC-32C is right) that says something else
    index = ts.open(
        {"driver": "zarr3", "kvstore": {"driver": "file", "path": f"{tmp_path}/ds/index/episodes/"}}
    ).result()
    entry = index[1].read().result()
    entry[1] += 1
    index[1].write(entry).result()
    with pytest.raises(
        EpisodataError, match=r"index/episodes: the index entries of episodes \[1\]"
    ):
        open_backend(tmp_path / "ds")


def test_verify_names_the_episode_whose_rows_changed(tmp_path: Path) -> None:
    schema = example_schema()
    backend = make_backend(tmp_path / "ds")
    for episode in range(3):
        backend.add_episode(rows_of(schema, episode), terminated=True, truncated=False)
    backend.close()
    # valid chunks with other values: only the per-episode CRC-32 can tell
    state = ts.open(
        {
            "driver": "zarr3",
            "kvstore": {"driver": "file", "path": f"{tmp_path}/ds/data/observation/state/"},
        }
    ).result()
    state[3].write(np.array([9, 9, 9], dtype=np.float32)).result()
    reader = open_backend(tmp_path / "ds")
    problems = reader.verify()
    reader.close()
    assert len(problems) == 1
    assert problems[0].startswith("episode 1, field 'observation/state': rows 2-5 of")
    assert "differ from the checksum recorded when it was written" in problems[0]


def test_reads_of_a_damaged_chunk_raise(tmp_path: Path) -> None:
    schema = example_schema()
    backend = make_backend(tmp_path / "ds")
    backend.add_episode(rows_of(schema, 1), terminated=True, truncated=False)
    backend.close()
    chunk = tmp_path / "ds" / "data" / "observation" / "camera" / "c" / "0" / "0" / "0" / "0"
    data = bytearray(chunk.read_bytes())
    data[len(data) // 2] ^= 0x01
    chunk.write_bytes(bytes(data))
    reader = open_backend(tmp_path / "ds")
    with pytest.raises(EpisodataError, match=r"episode 0, field 'observation/camera'.*c/0/0/0/0"):
        reader.read_rows(0, 0, 2, ["observation/camera"])
    problems = reader.verify()
    assert len(problems) == 1
    assert "field 'observation/camera': chunk" in problems[0]
    assert "cannot be decoded" in problems[0]
    reader.close()


def test_reader_reads_its_snapshot_until_it_refreshes(tmp_path: Path) -> None:
    schema = example_schema()
    writer = make_backend(tmp_path / "ds")
    rows = rows_of(schema, 1)
    episode = writer.start_episode({k: v[:3] for k, v in rows.items()})
    writer.flush()
    reader = open_backend(tmp_path / "ds")
    assert reader.episode_table().ongoing.tolist() == [True]
    writer.append_rows(episode, {k: v[3:] for k, v in rows.items()})
    writer.finalize_episode(episode, terminated=True, truncated=False)
    writer.close()  # folds it and removes the log the reader read
    window = reader.read_rows(0, 0, 3, ["observation/state"])  # from its snapshot
    np.testing.assert_array_equal(window["observation/state"], rows["observation/state"][:3])
    assert reader.episode_table().ongoing.tolist() == [True]
    reader.refresh()
    assert reader.episode_table().ongoing.tolist() == [False]
    count = len(rows["observation/state"])
    np.testing.assert_array_equal(
        reader.read_rows(0, 0, count, ["observation/state"])["observation/state"],
        rows["observation/state"],
    )
    reader.close()


def test_pickled_backend_reopens_read_only(tmp_path: Path) -> None:
    schema = example_schema()
    writer = make_backend(tmp_path / "ds")
    writer.add_episode(rows_of(schema, 0), terminated=True, truncated=False)
    copy = pickle.loads(pickle.dumps(writer))
    check_episode(copy, 0)
    with pytest.raises(DatasetStateError, match="opened read-only"):
        copy.add_episode(rows_of(schema, 1), terminated=True, truncated=False)
    copy.close()
    writer.close()


def test_use_after_close_is_refused(tmp_path: Path) -> None:
    backend = make_backend(tmp_path / "ds")
    backend.close()
    with pytest.raises(DatasetStateError, match="is closed"):
        backend.read_rows(0, 0, 1, ["observation/state"])
    rows = example_rows(example_schema(), 2, seed=0)
    with pytest.raises(DatasetStateError, match="is closed"):
        backend.add_episode(rows, terminated=True, truncated=False)


def _in_fork_child(work: Any) -> Any:
    """Run ``work()`` in a fork() child (as a DataLoader worker would); return its result."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        os.close(read_end)
        try:
            answer = {"ok": work()}
        except Exception as err:  # noqa: BLE001 - everything goes back to the parent
            answer = {"error": f"{type(err).__name__}: {err}"}
        os.write(write_end, json.dumps(answer).encode())
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        answer = json.loads(pipe.read() or b'{"error": "the child died"}')
    _, status = os.waitpid(pid, 0)
    assert status == 0, "the child crashed (TensorStore aborts forked processes that use it)"
    return answer


@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_forked_child_reads_through_a_helper(tmp_path: Path) -> None:
    schema = example_schema()
    writer = make_backend(tmp_path / "ds")
    for episode in range(3):
        writer.add_episode(rows_of(schema, episode), terminated=True, truncated=False)
    writer.start_episode(rows_of(schema, 3))
    expected = {e: rows_of(schema, e)["observation/state"].tolist() for e in range(4)}

    def inherited() -> Any:
        # the parent's own backend: stored rows via the helper, unflushed ones from memory
        rows = [writer.read_rows(e, 0, len(expected[e]), ["observation/state"]) for e in range(4)]
        request = GatherRequest(
            np.array([0, 2, 3]),
            np.zeros(3, np.int64),
            np.array([2, 2, 2]),
            np.zeros(3, np.int64),
            2,
            ("observation/state",),
        )
        batch = writer.gather_rows(request)["observation/state"].tolist()
        return [r["observation/state"].tolist() for r in rows], batch

    state, batch = _in_fork_child(inherited)["ok"]
    assert state == [expected[e] for e in range(4)]
    assert batch == [expected[0][:2], expected[2][:2], expected[3][:2]]

    def reopened() -> Any:
        # what a DataLoader worker does: open the folder again, read-only
        backend = open_backend(tmp_path / "ds")
        table = backend.episode_table()
        rows = backend.read_rows(1, 0, 3, ["observation/state"])["observation/state"].tolist()
        problems = backend.verify()
        backend.close()
        return len(table), rows, problems

    count, rows, problems = _in_fork_child(reopened)["ok"]
    assert count == 3  # the unflushed episode is not durable, so not visible
    assert rows == expected[1][:3]
    assert problems == []
    refused = _in_fork_child(
        lambda: writer.add_episode(rows_of(schema, 4), terminated=True, truncated=False)
    )
    assert "inherited through fork()" in refused["error"]
    refused = _in_fork_child(lambda: open_backend(tmp_path / "ds", writable=True))
    assert "cannot open for writing a Zarr dataset in a fork() child" in refused["error"]
    writer.close()
