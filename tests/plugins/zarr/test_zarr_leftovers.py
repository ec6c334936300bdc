"""What a killed writer leaves behind (TensorStore's ``*.__lock`` files) is never trusted.

TensorStore's file kvstore writes a key through a temporary file that it renames over
the key. In its default locking mode the temporary is ``<key>.__lock``, which a killed
writer leaves behind and the next writer used to fill without truncating it (issue 12).
Two defences, each tested alone here: TensorStore's locking is off in our contexts (the
temporary is then unique per write), and a writable open removes the leftovers
wherever a writer writes. Either alone passes the reproduction and the kill chains.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import numpy as np
import tensorstore as ts
from _zarr_helpers import check_episode, make_backend, open_backend, rows_of

from episodata_core.testing import example_schema

if TYPE_CHECKING:
    from pathlib import Path


def _stale_locks(folder: Path) -> list[Path]:
    """A file of zeros larger than the key at ``<key>.__lock``, for every key TensorStore wrote.

    Those are the chunks and the arrays' zarr.json (groups' are written without it).
    """
    planted = []
    for file in sorted(folder.rglob("*")):
        chunk = "c" in file.relative_to(folder).parts
        if file.is_file() and (
            chunk or (file.name == "zarr.json" and b'"array"' in file.read_bytes())
        ):
            lock = file.with_name(file.name + ".__lock")
            lock.write_bytes(bytes(4 * file.stat().st_size + 4096))
            planted.append(lock)
    return planted


def test_a_stale_lock_file_does_not_damage_the_next_commit(tmp_path: Path) -> None:
    # the reproduction of issue 12, without any kill
    schema = example_schema()
    folder = tmp_path / "ds"
    writer = make_backend(folder)
    writer.add_episode(rows_of(schema, 0), terminated=True, truncated=False)
    writer.close()
    assert (folder / "data" / "observation" / "state" / "c" / "0" / "0.__lock") in _stale_locks(
        folder
    )
    backend = open_backend(folder, writable=True)
    backend.add_episode(rows_of(schema, 1), terminated=True, truncated=False)
    backend.close()
    reader = open_backend(folder)
    check_episode(reader, 0)
    check_episode(reader, 1)
    assert reader.verify() == []
    reader.close()


def test_our_tensorstore_context_alone_ignores_a_stale_lock(tmp_path: Path) -> None:
    # defence (a) without (b): an array written through the backend's own context, with
    # no writable open (which would remove the stale file) in between
    backend = make_backend(tmp_path / "ds")
    store = backend._store
    path = "data/observation/state"
    array = ts.open(store.arrays.spec(path), context=store.arrays.new_context()).result()
    values = np.arange(12, dtype=np.float32).reshape(4, 3)
    array = array.resize(exclusive_max=[4, None], resize_metadata_only=True).result()
    array[:4].write(values).result()
    chunk = tmp_path / "ds" / path / "c" / "0" / "0"
    stale = chunk.with_name("0.__lock")
    stale.write_bytes(bytes(4 * chunk.stat().st_size))
    array[:2].write(values[:2] + 1).result()
    fresh = ts.open(store.arrays.spec(path), context=ts.Context()).result()
    np.testing.assert_array_equal(
        fresh[:4].read().result(), np.vstack([values[:2] + 1, values[2:]])
    )
    assert stale.read_bytes() == bytes(len(stale.read_bytes()))  # not even opened for writing
    backend.close()


def test_a_writable_open_removes_the_leftovers_of_a_dead_writer(tmp_path: Path) -> None:
    # defence (b): whatever the locking mode that left them (<key>.__lock, and the
    # <key>_<hex>.__lock of locking mode "none"), wherever a writer writes: array
    # metadata, chunks from the last committed row on, the index (fold_bytes=0: every
    # add_episode folds, so the arrays hold every episode)
    schema = example_schema()
    folder = tmp_path / "ds"
    writer = make_backend(folder, chunk_bytes=48, fold_bytes=0)
    for episode in range(3):
        writer.add_episode(rows_of(schema, episode), terminated=True, truncated=False)
    writer.start_episode(rows_of(schema, 3))
    writer.flush()
    committed = (folder / "commit.json").read_bytes()
    writer.add_episode(rows_of(schema, 4), terminated=True, truncated=False)
    writer._store.closed = True  # a crash before the last commit record landed
    (folder / "commit.json").write_bytes(committed)  # (the log forgot episode 4: it is gone)
    planted = _stale_locks(folder)
    chunk = folder / "index" / "episodes" / "c" / "0" / "0"
    planted.append(chunk.with_name("0_3f9a0c21b7e4d615.__lock"))
    planted[-1].write_bytes(b"half a chunk")
    reader = open_backend(folder)  # a reader changes no file
    reader.close()
    assert all(p.exists() for p in planted)
    backend = open_backend(folder, writable=True)
    rows = sum(len(rows_of(schema, e)["observation/state"]) for e in range(3))
    for lock in folder.rglob("*.__lock"):
        # left only in chunks that hold committed rows alone: no writer writes them again
        parts = lock.relative_to(folder).parts
        array = folder.joinpath(*parts[: parts.index("c")])
        width = json.loads((array / "zarr.json").read_bytes())["chunk_grid"]["configuration"]
        chunk_rows = width["chunk_shape"][0]
        assert parts[0] == "data"
        assert (int(parts[parts.index("c") + 1]) + 1) * chunk_rows <= rows, lock
    assert backend.add_episode(rows_of(schema, 4), terminated=True, truncated=False) == 4
    backend.close()
    reader = open_backend(folder)
    for episode in range(5):
        check_episode(reader, episode)
    assert reader.verify() == []
    reader.close()
