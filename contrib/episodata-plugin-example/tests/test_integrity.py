"""Damage is found: a flipped byte anywhere is refused at open or reported by verify()."""

from __future__ import annotations

import shutil
import time
from typing import TYPE_CHECKING, Any

import h5py
import numpy as np
import pytest
from episodata import Dataset
from episodata_core.errors import EpisodataError, IntegrityError
from episodata_core.testing import example_rows, example_schema

if TYPE_CHECKING:
    from pathlib import Path


def _dataset(tmp_path: Path, **options: Any) -> Path:
    """Three finalized episodes and one flushed ongoing episode, closed."""
    location = tmp_path / "ds"
    dataset = Dataset.create(example_schema(), location, backend="hdf5", **options)
    for seed in range(3):
        rows = example_rows(dataset.schema, 21, seed=seed)
        dataset.backend.add_episode(rows, terminated=True, truncated=False)
    dataset.backend.start_episode(example_rows(dataset.schema, 5, seed=9))
    dataset.close()
    return location


def _flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


def _offset(location: Path, name: str, row: int = 0) -> int:
    """Byte offset in data.h5 of ``row`` of dataset ``name``."""
    with h5py.File(location / "data.h5", "r") as file:
        dataset = file[name]
        row_bytes = dataset.dtype.itemsize * int(np.prod(dataset.shape[1:]))
        if dataset.chunks is None:
            return int(dataset.id.get_offset()) + row * row_bytes
        info = dataset.id.get_chunk_info_by_coord((0,) * dataset.ndim)
        return int(info.byte_offset) + row * row_bytes


def _verify(location: Path) -> list[str]:
    dataset = Dataset.open(location, read_only=True)
    try:
        problems: list[str] = dataset.backend.verify()  # type: ignore[attr-defined]
    finally:
        dataset.close()
    return problems


def test_a_clean_dataset_verifies(tmp_path: Path) -> None:
    assert _verify(_dataset(tmp_path)) == []


def test_a_flipped_row_names_the_episode_and_field(tmp_path: Path) -> None:
    location = _dataset(tmp_path)
    _flip(location / "data.h5", _offset(location, "rows/observation/state", row=30))
    (problem,) = _verify(location)
    assert "episode 1, field 'observation/state'" in problem
    assert "rows 21..41" in problem


def test_a_flipped_byte_after_the_last_row_is_found(tmp_path: Path) -> None:
    location = _dataset(tmp_path)
    _flip(location / "data.h5", _offset(location, "rows/reward/reward", row=100))
    (problem,) = _verify(location)
    assert "/rows/reward/reward" in problem
    assert "last chunk" in problem


@pytest.mark.parametrize(
    ("name", "message"),
    [("commit", "commit counter"), ("episodes", "commit record 0")],
)
def test_a_damaged_index_is_refused_at_open(tmp_path: Path, name: str, message: str) -> None:
    location = _dataset(tmp_path)
    _flip(location / "data.h5", _offset(location, name))
    with pytest.raises(IntegrityError, match=message):
        Dataset.open(location, read_only=True)


def test_a_damaged_spill_is_named(tmp_path: Path) -> None:
    location = _dataset(tmp_path)
    dataset = Dataset.open(location, read_only=True)
    _flip(location / "ongoing.bin", 40)
    (problem,) = _verify_open(dataset)
    assert problem.startswith("ongoing.bin: checksum mismatch")
    dataset.close()
    with pytest.raises(IntegrityError, match=r"ongoing\.bin: checksum mismatch"):
        Dataset.open(location, read_only=True)


def _verify_open(dataset: Dataset) -> list[str]:
    problems: list[str] = dataset.backend.verify()  # type: ignore[attr-defined]
    return problems


def test_a_damaged_superblock_fails_fast(tmp_path: Path) -> None:
    # byte 11 holds HDF5's "open for writing" flags; trusting a damaged one would send the
    # reader down HDF5's SWMR path, which retries checksum failures for a very long time
    location = _dataset(tmp_path)
    _flip(location / "data.h5", 11)
    started = time.monotonic()
    with pytest.raises(IntegrityError, match="superblock does not match its checksum"):
        Dataset.open(location, read_only=True)
    assert time.monotonic() - started < 5


@pytest.mark.slow
def test_every_flipped_byte_is_found(tmp_path: Path) -> None:
    """All bytes outside chunks (HDF5 metadata, records, counter) and a sample inside."""
    location = _dataset(tmp_path, chunk_bytes=2048)
    data = (location / "data.h5").read_bytes()
    in_chunks = np.zeros(len(data), dtype=bool)

    def mark(info: Any) -> None:
        in_chunks[info.byte_offset : info.byte_offset + info.size] = True

    with h5py.File(location / "data.h5", "r") as file:
        file.visititems(
            lambda _, item: item.id.chunk_iter(mark) if getattr(item, "chunks", None) else None
        )
    positions = [p for p in range(len(data)) if not in_chunks[p] or p % 101 == 0]
    missed, unnamed = [], []
    for position in positions:
        copy = tmp_path / "copy"
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(location, copy)
        _flip(copy / "data.h5", position)
        try:
            problems = _verify(copy)
        except EpisodataError as err:
            # refusing to open is a fine report when it names the file
            if "data.h5" not in str(err):
                unnamed.append((position, str(err)))
            continue
        if not problems:
            missed.append(position)
    assert not missed, f"flipped bytes at {missed[:20]} went unnoticed ({len(missed)} in all)"
    assert not unnamed, f"errors that do not name data.h5: {unnamed[:5]}"
