"""The episode log in front of the arrays: what waits there, when it folds, who sees it.

Every expectation is read from the files with SQLite and zarr-python themselves, or
rebuilt from the episode ids (``rows_of``), never from the backend's own bookkeeping.
"""

from __future__ import annotations

import itertools
import json
import sqlite3
from typing import TYPE_CHECKING

import pytest
import zarr
from _zarr_helpers import check_episode, make_backend, open_backend, rows_of

from episodata_core.errors import EpisodataError
from episodata_core.testing import example_schema

if TYPE_CHECKING:
    from pathlib import Path


def _logged(folder: Path) -> list[tuple[int, int]]:
    """``(id, ongoing)`` of every episode in the log, read with SQLite alone."""
    if not (folder / "log.sqlite").exists():
        return []
    with sqlite3.connect(f"file:{folder / 'log.sqlite'}?mode=ro", uri=True) as log:
        return list(log.execute("SELECT id, ongoing FROM episodes ORDER BY id"))


def _committed(folder: Path) -> tuple[int, int]:
    record = json.loads((folder / "commit.json").read_bytes())
    return record["episodes"], record["generation"]


def test_finalized_episodes_wait_in_the_log_until_a_fold(tmp_path: Path) -> None:
    schema = example_schema()
    folder = tmp_path / "ds"
    writer = make_backend(folder)  # fold_bytes 32 MiB: nothing folds by itself here
    for episode in range(3):
        writer.add_episode(rows_of(schema, episode), terminated=True, truncated=False)
    assert _committed(folder) == (0, 0)  # the arrays hold nothing yet
    assert _logged(folder) == [(0, 0), (1, 0), (2, 0)]
    reader = open_backend(folder)  # another handle sees them at once, from the log
    for episode in range(3):
        check_episode(reader, episode)
    writer.flush()  # a sync point: folds
    assert _committed(folder) == (3, 1)
    assert _logged(folder) == []
    reader.refresh()
    for episode in range(3):
        check_episode(reader, episode)
    reader.close()
    writer.close()
    assert not (folder / "log.sqlite").exists()  # closed, nothing left: plain Zarr v3
    state = zarr.open_array(str(folder / "data" / "observation" / "state"), mode="r")
    rows = sum(len(rows_of(schema, e)["observation/state"]) for e in range(3))
    assert state.shape[0] == rows


def test_the_log_folds_by_itself_at_fold_bytes(tmp_path: Path) -> None:
    schema = example_schema()
    folder = tmp_path / "ds"
    episode_bytes = sum(v.nbytes for v in rows_of(schema, 0).values())
    writer = make_backend(folder, fold_bytes=3 * episode_bytes)
    generations = []
    for episode in range(10):
        writer.add_episode(rows_of(schema, episode), terminated=True, truncated=False)
        generations.append(_committed(folder)[1])
    assert generations[-1] >= 2  # folded several times without a flush
    assert all(b - a in (0, 1) for a, b in itertools.pairwise(generations))
    assert len(_logged(folder)) < 4  # never more than a fold's worth waits
    writer.close()
    reader = open_backend(folder)
    for episode in range(10):
        check_episode(reader, episode)
    assert reader.verify() == []
    reader.close()


def test_an_ongoing_episode_below_folded_ones_stays_in_the_log(tmp_path: Path) -> None:
    # ids stay contiguous: the index row of the ongoing episode sends readers to the log
    schema = example_schema()
    folder = tmp_path / "ds"
    writer = make_backend(folder)
    waiting = writer.start_episode({k: v[:2] for k, v in rows_of(schema, 0).items()})
    for episode in (1, 2):
        writer.add_episode(rows_of(schema, episode), terminated=True, truncated=False)
    writer.flush()
    assert _committed(folder)[0] == 3
    assert _logged(folder) == [(0, 1)]
    assert writer.verify() == []  # the writer's memory holds more than the disk: no matter
    reader = open_backend(folder)
    assert reader.episode_table().ongoing.tolist() == [True, False, False]
    for episode in range(3):
        check_episode(reader, episode)
    writer.append_rows(waiting, {k: v[2:] for k, v in rows_of(schema, 0).items()})
    writer.finalize_episode(waiting, terminated=True, truncated=False)
    assert writer.verify() == []  # finalized in the log, ongoing in the index on disk
    reader.refresh()  # finalized in the log; the arrays still call it ongoing
    assert reader.episode_table().ongoing.tolist() == [False, False, False]
    check_episode(reader, 0)
    writer.close()
    reader.refresh()
    check_episode(reader, 0)
    assert reader.verify() == []
    reader.close()


def test_a_log_a_writer_is_still_creating_reads_as_empty(tmp_path: Path) -> None:
    # a writer reopening a closed dataset creates log.sqlite, then its tables in one
    # commit: a reader looking in between finds an empty file, which is no episode yet
    schema = example_schema()
    folder = tmp_path / "ds"
    writer = make_backend(folder)
    for episode in range(2):
        writer.add_episode(rows_of(schema, episode), terminated=True, truncated=False)
    writer.close()
    (folder / "log.sqlite").write_bytes(b"")
    reader = open_backend(folder)
    assert len(reader.episode_table()) == 2
    for episode in range(2):
        check_episode(reader, episode)
    reader.refresh()
    reader.close()


def test_a_log_that_is_not_sqlite_is_a_clear_error(tmp_path: Path) -> None:
    schema = example_schema()
    folder = tmp_path / "ds"
    writer = make_backend(folder)
    writer.add_episode(rows_of(schema, 0), terminated=True, truncated=False)
    writer.close()
    (folder / "log.sqlite").write_bytes(b"not a database, but 100 bytes of something " * 3)
    for writable in (False, True):
        with pytest.raises(EpisodataError, match=r"log\.sqlite: the episode log cannot be"):
            open_backend(folder, writable=writable)
