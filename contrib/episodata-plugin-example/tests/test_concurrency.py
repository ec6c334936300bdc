"""A reader in another process follows a writer: whole episodes only, new ones on refresh."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import pytest
from episodata import Dataset
from episodata_core.testing import example_schema

from _helpers import episode_rows, start_python

if TYPE_CHECKING:
    from pathlib import Path

# Polls with refresh() until it has checked `target` finalized episodes row by row;
# ongoing episodes must always be a prefix of what the writer is writing.
READER = """
import sys, time
from _helpers import assert_episode, episode_rows
from episodata import Dataset

reader = Dataset.open(sys.argv[1], read_only=True)
target = int(sys.argv[2])
print("ready", flush=True)
checked, seen, refreshes = set(), 0, 0
deadline = time.monotonic() + 60
while len(checked) < target and time.monotonic() < deadline:
    reader.refresh()
    refreshes += 1
    table = reader.backend.episode_table()
    assert len(table) >= seen, "episodes disappeared"
    seen = len(table)
    for episode in range(len(table)):
        rows = episode_rows(reader.schema, episode)
        if table.ongoing[episode]:
            count = int(table.length[episode]) + 1
            assert_episode(reader.backend, episode, {k: v[:count] for k, v in rows.items()})
        elif episode not in checked:
            assert_episode(reader.backend, episode, rows)
            checked.add(episode)
print("checked", len(checked), "refreshes", refreshes, flush=True)
"""

TARGET = 12


@pytest.mark.parametrize("reader_first", [True, False], ids=["reader-first", "writer-first"])
def test_a_reader_process_follows_the_writer(tmp_path: Path, reader_first: bool) -> None:
    location = tmp_path / "ds"
    Dataset.create(example_schema(), location, backend="hdf5").close()
    reader = None
    if reader_first:  # opens the closed file with a plain handle, reopened in SWMR later
        reader = start_python(READER, str(location), str(TARGET))
        assert reader.stdout is not None
        assert reader.stdout.readline().strip() == "ready"
    writer = Dataset.open(location)
    writer.update_metadata({"writer": "test"})  # the first write reopens data.h5 for writing
    backend = writer.backend
    for episode in range(TARGET):
        rows = episode_rows(writer.schema, episode)
        if episode % 3 == 0:  # step by step: visible as a growing prefix after each flush
            backend.start_episode({k: v[:1] for k, v in rows.items()})
            writer.flush()
            for t in range(1, len(rows["observation/state"])):
                backend.append_rows(episode, {k: v[t : t + 1] for k, v in rows.items()})
                writer.flush()
                time.sleep(0.01)
            backend.finalize_episode(episode, terminated=True, truncated=False)
        else:
            backend.add_episode(rows, terminated=False, truncated=True)
        if reader is None and episode == 2:  # opens while the writer holds the file
            reader = start_python(READER, str(location), str(TARGET))
        time.sleep(0.02)
    assert reader is not None
    out, err = reader.communicate(timeout=90)
    writer.close()
    assert reader.returncode == 0, err
    assert f"checked {TARGET}" in out, out + err


def test_a_second_writer_is_refused_by_the_lock(tmp_path: Path) -> None:
    location = tmp_path / "ds"
    writer = Dataset.create(example_schema(), location, backend="hdf5")
    code = """
import sys
from episodata import Dataset
from episodata_core.errors import DatasetStateError
try:
    Dataset.open(sys.argv[1]).update_metadata({"second": True})
except DatasetStateError as err:
    print("refused:", err)
"""
    second = start_python(code, str(location))
    out, err = second.communicate(timeout=60)
    writer.close()
    assert second.returncode == 0, err
    assert "refused:" in out
    assert "another process" in out
