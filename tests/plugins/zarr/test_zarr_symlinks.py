"""Symbolic links that leave the dataset folder are refused: at open, on reads, by verify.

Every link here points at a real file or folder outside the dataset that TensorStore
would decode without complaint: the same array of another dataset with the same schema.
So a read that follows the link returns that dataset's rows, silently.
"""

from __future__ import annotations

import os
import shutil
from typing import TYPE_CHECKING

import numpy as np
import pytest
from _zarr_helpers import make_backend, open_backend, rows_of

from episodata_core.errors import EpisodataError
from episodata_core.testing import example_schema

if TYPE_CHECKING:
    from pathlib import Path

_STATE = "data/observation/state"


def _two_datasets(tmp_path: Path) -> tuple[Path, Path]:
    """Dataset ``mine`` and, outside it, ``foreign``: same schema and lengths, other rows."""
    schema = example_schema()
    folders = []
    for name, seed in (("mine", 1), ("foreign", 7)):
        backend = make_backend(tmp_path / name, fsync=False)  # durability is not at stake
        for episode in range(2):
            rows = rows_of(schema, episode * 6 + seed)  # same length, different values
            backend.add_episode(rows, terminated=True, truncated=False)
        backend.close()
        folders.append(tmp_path / name)
    return folders[0], folders[1]


def _link(path: Path, target: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink()
    os.symlink(target, path)


def test_chunk_file_linking_outside_is_refused_on_read_and_reported(tmp_path: Path) -> None:
    mine, foreign = _two_datasets(tmp_path)
    _link(mine / _STATE / "c/0/0", foreign / _STATE / "c/0/0")
    backend = open_backend(mine)  # chunk files are not listed at open: that would cost O(chunks)
    with pytest.raises(EpisodataError, match=r"'data/observation/state/c/0/0' points outside"):
        backend.read_rows(0, 0, 2, ["observation/state"])
    with pytest.raises(EpisodataError, match=r"'data/observation/state/c/0/0' points outside"):
        backend.read_rows(1, 0, 1, ["observation/state"])  # a second read is refused too
    # fields whose chunks stay inside still read
    camera = backend.read_rows(0, 0, 2, ["observation/camera"])["observation/camera"]
    np.testing.assert_array_equal(camera, rows_of(example_schema(), 1)["observation/camera"][:2])
    problems = backend.verify()
    links = [p for p in problems if "symbolic link" in p]
    assert len(links) == 1, problems
    assert links[0].startswith("data/observation/state/c/0/0: a symbolic link to ")
    assert str(foreign / _STATE / "c/0/0") in links[0]
    backend.close()


def test_batch_reads_refuse_a_chunk_linking_outside(tmp_path: Path) -> None:
    from episodata_core.protocols import GatherRequest

    mine, foreign = _two_datasets(tmp_path)
    _link(mine / _STATE / "c/0/0", foreign / _STATE / "c/0/0")
    backend = open_backend(mine)
    request = GatherRequest(
        episodes=np.array([0, 1]),
        starts=np.array([0, 0]),
        counts=np.array([2, 2]),
        offsets=np.array([0, 0]),
        num_rows=2,
        fields=("observation/state",),
    )
    with pytest.raises(EpisodataError, match=r"'data/observation/state/c/0/0' points outside"):
        backend.gather_rows(request)
    backend.close()


@pytest.mark.parametrize(
    ("link", "target"),
    [
        (f"{_STATE}/c", f"{_STATE}/c"),  # an array's chunk folder
        (_STATE, _STATE),  # a whole array folder
        (f"{_STATE}/zarr.json", f"{_STATE}/zarr.json"),  # an array's metadata
        ("commit.json", "commit.json"),
        ("zarr.json", "zarr.json"),
    ],
)
def test_open_refuses_folders_and_metadata_linking_outside(
    tmp_path: Path, link: str, target: str
) -> None:
    mine, foreign = _two_datasets(tmp_path)
    shutil.copyfile(mine / "zarr.json", foreign / "zarr.json")  # the same bytes, elsewhere
    shutil.copyfile(mine / "commit.json", foreign / "commit.json")
    _link(mine / link, foreign / target)
    for writable in (False, True):
        with pytest.raises(EpisodataError, match=f"path '{link}' points outside the dataset"):
            open_backend(mine, writable=writable)


def test_links_that_stay_inside_are_followed(tmp_path: Path) -> None:
    mine, _ = _two_datasets(tmp_path)
    chunk = mine / _STATE / "c/0/0"
    kept = mine / _STATE / "c/0/kept"
    chunk.rename(kept)
    os.symlink(kept, chunk)
    backend = open_backend(mine)
    rows = backend.read_rows(0, 0, 2, ["observation/state"])["observation/state"]
    np.testing.assert_array_equal(rows, rows_of(example_schema(), 1)["observation/state"][:2])
    assert [p for p in backend.verify() if "symbolic link" in p] == []
    backend.close()


def test_appending_never_writes_through_a_link_out_of_the_folder(tmp_path: Path) -> None:
    mine, foreign = _two_datasets(tmp_path)
    # a chunk folder of this array that is the other dataset's: a write into chunk 0
    # would replace the other dataset's file
    _link(mine / _STATE / "c/0", foreign / _STATE / "c/0")
    theirs = (foreign / _STATE / "c/0/0").read_bytes()
    backend = open_backend(mine, writable=True, fold_bytes=0)  # every finalize folds
    with pytest.raises(EpisodataError, match=r"'data/observation/state/c/0/0' points outside"):
        backend.add_episode(rows_of(example_schema(), 2), terminated=True, truncated=False)
    # the fold was refused before anything was written; the episode waits in the log
    assert len(backend.episode_table()) == 3
    with pytest.raises(EpisodataError, match=r"points outside"):
        backend.close()  # the close-time fold is refused as well
    assert (foreign / _STATE / "c/0/0").read_bytes() == theirs
    assert sorted(p.name for p in (foreign / _STATE / "c/0").iterdir()) == ["0"]


@pytest.mark.parametrize("suffix", ["", "-wal", "-shm"])
def test_an_episode_log_linking_outside_is_refused_before_sqlite_opens_it(
    tmp_path: Path, suffix: str
) -> None:
    # SQLite would read the log's files and write its -wal and -shm: a link out of the
    # folder would make it read (or write) another dataset's log
    schema = example_schema()
    mine, outside = tmp_path / "mine", tmp_path / "outside"
    backend = make_backend(mine, fsync=False)
    backend.start_episode({k: v[:2] for k, v in rows_of(schema, 0).items()})
    backend.close()  # the ongoing episode keeps the log
    outside.mkdir()
    target = outside / f"log.sqlite{suffix}"
    target.write_bytes(b"")
    link = mine / f"log.sqlite{suffix}"
    if link.exists():
        shutil.copy(link, target)
        link.unlink()
    os.symlink(target, link)
    before = target.read_bytes()
    for writable in (False, True):
        with pytest.raises(EpisodataError, match=rf"log\.sqlite{suffix}.*outside"):
            open_backend(mine, writable=writable)
    assert target.read_bytes() == before
