"""A committed chunk that is missing or damaged: reads raise, folds into it are refused.

A fold merges its rows into the last, partly filled chunk. TensorStore reads that chunk
first, and a missing one reads as fill values there: the committed rows used to become
zeros inside a valid chunk, silently (issue 12, item 3). ``fold_bytes=0`` folds at every
finalize, so each append is a fold here. Damaged bytes of the episode log raise too.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _zarr_helpers import check_episode, make_backend, open_backend, rows_of

from episodata_core.errors import EpisodataError, IntegrityError
from episodata_core.protocols import GatherRequest
from episodata_core.testing import example_schema

_STATE = Path("data", "observation", "state")


def _snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    return {
        str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not p.name.startswith(".") and not p.name.startswith("log.sqlite")
    }


def _damage(file: Path, how: str) -> None:
    if how == "deleted":
        file.unlink()
    else:
        data = bytearray(file.read_bytes())
        data[len(data) // 2] ^= 0x01
        file.write_bytes(bytes(data))


_CHUNKS = {
    # (array, its first chunk file, layout options)
    "data": (_STATE, _STATE / "c" / "0" / "0", {}),
    "sharded": (_STATE, _STATE / "c" / "0" / "0", {"shard_chunks": 4, "chunk_bytes": 24}),
    "index": (Path("index/episodes"), Path("index/episodes/c/0/0"), {}),
}


@pytest.mark.parametrize("how", ["deleted", "flipped"])
@pytest.mark.parametrize("where", sorted(_CHUNKS))
@pytest.mark.parametrize("reopened", [True, False], ids=["reopened", "same-writer"])
def test_a_write_into_a_damaged_committed_chunk_is_refused(
    tmp_path: Path, how: str, where: str, reopened: bool
) -> None:
    schema = example_schema()
    folder = tmp_path / "ds"
    array, chunk, options = _CHUNKS[where]
    backend = make_backend(folder, fold_bytes=0, **options)
    for episode in range(2):
        backend.add_episode(rows_of(schema, episode), terminated=True, truncated=False)
    if reopened:
        backend.close()
        backend = open_backend(folder, writable=True, fold_bytes=0)
    _damage(folder / chunk, how)
    before = _snapshot(folder)
    problem = "is missing" if how == "deleted" else "is damaged"
    with pytest.raises(IntegrityError, match=rf"chunk {folder / chunk} holds the committed rows"):
        backend.add_episode(rows_of(schema, 2), terminated=True, truncated=False)
    with pytest.raises(IntegrityError, match=rf"of {array} but {problem}; the fold was refused"):
        backend.add_episode(rows_of(schema, 3), terminated=True, truncated=False)
    # nothing written to the arrays, not even other fields' chunks; the two episodes
    # whose fold was refused are safe in the episode log and read back from it
    assert _snapshot(folder) == before
    assert len(backend.episode_table()) == 4
    for episode in (2, 3):
        check_episode(backend, episode)
    backend._store.closed = True  # no close-time fold: the folder stays as damaged
    reader = open_backend(folder) if where != "index" else None
    if reader is not None:
        # the rows that chunk held raise rather than read as anything; verify names it
        errors = []
        for episode in range(2):
            try:
                check_episode(reader, episode)  # asserts the rows it reads are the right ones
            except EpisodataError as err:
                errors.append(str(err))
        assert errors
        assert all(str(folder / chunk) in error for error in errors)
        assert any(str(folder / chunk) in problem for problem in reader.verify())
        reader.close()
    else:
        with pytest.raises(EpisodataError, match=r"index/episodes"):
            open_backend(folder)  # an unreadable index refuses the open, loudly


def test_a_damaged_block_of_the_episode_log_raises_naming_it(tmp_path: Path) -> None:
    schema = example_schema()
    folder = tmp_path / "ds"
    rows = rows_of(schema, 5)  # 7 rows
    backend = make_backend(folder)
    backend.start_episode({k: v[:5] for k, v in rows.items()})
    backend.close()  # the ongoing episode stays in the log
    log = folder / "log.sqlite"
    data = bytearray(log.read_bytes())
    where = data.find(rows["observation/state"][:5].tobytes())
    assert where > 0
    data[where + 3] ^= 0x10
    log.write_bytes(bytes(data))
    for writable in (False, True):
        with pytest.raises(EpisodataError, match=r"log.sqlite.*episode 0.*differ from their"):
            open_backend(folder, writable=writable)


def test_an_intact_dataset_still_accepts_writes_after_reopening(tmp_path: Path) -> None:
    # the check at the first commit after an open reads the chunk from disk and passes
    schema = example_schema()
    folder = tmp_path / "ds"
    backend = make_backend(folder, chunk_bytes=48)
    for episode in range(3):
        backend.add_episode(rows_of(schema, episode), terminated=True, truncated=False)
        backend.close()
        backend = open_backend(folder, writable=True)
    rows = rows_of(schema, 3)
    backend.start_episode({k: v[:2] for k, v in rows.items()})
    backend.flush()
    backend.close()
    backend = open_backend(folder, writable=True)
    backend.append_rows(3, {k: v[2:] for k, v in rows.items()})
    backend.flush()  # into the recovered spill: checked from disk first
    backend.finalize_episode(3, terminated=True, truncated=False)
    backend.close()
    reader = open_backend(folder)
    for episode in range(4):
        check_episode(reader, episode)
    assert reader.verify() == []
    reader.close()


def _gather(backend: Any, episodes: list[int], fields: tuple[str, ...]) -> Any:
    n = len(episodes)
    return backend.gather_rows(
        GatherRequest(
            np.asarray(episodes, dtype=np.int64),
            np.zeros(n, np.int64),
            np.ones(n, np.int64),
            np.zeros(n, np.int64),
            1,
            fields,
        )
    )


@pytest.fixture(params=["ranges", "index"])
def strategy(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Force one of the two read strategies of gather_rows (it picks by cost otherwise)."""
    from episodata_zarr import _reads

    monkeypatch.setattr(_reads, "_RANGE_NS", 0 if request.param == "ranges" else 10**12)
    return str(request.param)


@pytest.mark.parametrize("options", [{}, {"shard_chunks": 2}], ids=["chunks", "shards"])
def test_no_read_turns_a_missing_committed_chunk_into_zeros(
    tmp_path: Path, strategy: str, options: dict[str, Any]
) -> None:
    schema = example_schema()
    folder = tmp_path / "ds"
    backend = make_backend(folder, chunk_bytes=48, **options)  # 4 rows per chunk
    for episode in range(4):
        backend.add_episode(rows_of(schema, episode), terminated=True, truncated=False)
    backend.close()
    # episode 0 (rows 0-1) is in the first chunk or shard; episode 3 (rows 9-13) beyond it
    (folder / _STATE / "c" / "0" / "0").unlink()
    shutil.rmtree(folder / "data" / "observation" / "camera" / "c" / "0")
    reader = open_backend(folder, cache_pool_bytes=0)
    fields = ("observation/state", "observation/camera")
    for field in fields:
        with pytest.raises(EpisodataError, match="is missing"):
            reader.read_rows(0, 0, 1, [field])
        with pytest.raises(EpisodataError, match="is missing"):
            _gather(reader, [3, 0, 2], (field,))
    check_episode(reader, 3)  # the chunks that are there still read
    reader.close()


@pytest.mark.parametrize("how", ["deleted", "flipped"])
@pytest.mark.parametrize(
    "chunk",
    [_STATE / "c/0/0", Path("index/episodes/c/0/0")],
    ids=["data", "index"],
)
def test_verify_in_the_writing_process_reads_the_disk(
    tmp_path: Path, how: str, chunk: Path
) -> None:
    # issue 12, item 11: the writer's TensorStore cache holds every chunk as written
    schema = example_schema()
    folder = tmp_path / "ds"
    backend = make_backend(folder)
    for episode in range(3):
        backend.add_episode(rows_of(schema, episode), terminated=True, truncated=False)
    backend.start_episode(rows_of(schema, 3))
    backend.flush()  # folds episodes 0-2 into the arrays
    for episode in range(4):
        check_episode(backend, episode)
    assert backend.verify() == []
    _damage(folder / chunk, how)
    problems = backend.verify()
    assert len(problems) == 1, problems
    assert str(folder / chunk) in problems[0]
    backend._store.closed = True
