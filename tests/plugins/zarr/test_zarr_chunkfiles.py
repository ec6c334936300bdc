"""The chunk-file reader of fork() children against TensorStore on the same arrays.

TensorStore is the oracle: every codec and layout option the backend writes (Blosc LZ4,
Blosc zstd, zstd, none; sharded or not; raw-byte dtypes) is read both
ways, by ranges and by rows, and must agree exactly. Damaged bytes and missing chunk
files raise naming the file, as they do through TensorStore.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
import tensorstore as ts
from _zarr_helpers import make_backend, rows_of

from episodata_core.errors import EpisodataError, IntegrityError
from episodata_core.schema import DatasetSchema, FieldSpec
from episodata_zarr._chunkfiles import ChunkCache, UnsupportedLayout, open_file_array

if TYPE_CHECKING:
    from pathlib import Path

SCHEMA = DatasetSchema(
    [
        FieldSpec("state", shape=(5,), dtype="float32"),
        FieldSpec("camera", shape=(3, 4, 4), dtype="uint8"),
        FieldSpec("name", shape=(), dtype="<U3", role="info"),
        FieldSpec("action", shape=(2,), dtype="float32", role="action"),
        FieldSpec("reward", shape=(), dtype="float32", role="reward"),
    ]
)

OPTIONS = {
    "blosc-lz4": {"chunk_bytes": 200},
    "blosc-zstd": {"codec": "blosc-zstd", "chunk_bytes": 200},
    "zstd": {"codec": "zstd", "chunk_bytes": 200},
    "none": {"codec": "none", "chunk_bytes": 200},
    "sharded": {"shard_chunks": 3, "chunk_bytes": 100},
}


def _dataset(folder: Path, **options: Any) -> list[str]:
    backend = make_backend(folder, SCHEMA, **options)
    for episode in range(6):
        backend.add_episode(rows_of(SCHEMA, episode), terminated=True, truncated=False)
    paths = [layout.path for layout in backend._store.layouts.values()]
    backend.close()
    return [*paths, "index/episodes"]


def _tensorstore(folder: Path) -> Any:
    spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(folder)}}
    return ts.open(spec).result()


@pytest.mark.parametrize("cache", [0, 1 << 20], ids=["uncached", "cached"])
@pytest.mark.parametrize("layout", sorted(OPTIONS))
def test_reads_equal_tensorstore(tmp_path: Path, layout: str, cache: int) -> None:
    rng = np.random.default_rng(5)
    for path in _dataset(tmp_path / "ds", **OPTIONS[layout]):
        mine = open_file_array(tmp_path / "ds" / path, ChunkCache(cache))
        oracle = _tensorstore(tmp_path / "ds" / path)
        assert mine.shape == tuple(oracle.shape), path
        assert mine.dtype.numpy_dtype == oracle.dtype.numpy_dtype, path
        for ours, theirs in (
            (mine.chunk_layout.read_chunk, oracle.chunk_layout.read_chunk),
            (mine.chunk_layout.write_chunk, oracle.chunk_layout.write_chunk),
        ):
            assert ours.shape == tuple(theirs.shape), path
        rows = mine.shape[0]
        ranges = [(0, rows), (rows - 1, rows), (0, 0)]
        ranges += [tuple(sorted(rng.integers(0, rows + 1, 2).tolist())) for _ in range(12)]
        for lo, hi in ranges:
            np.testing.assert_array_equal(
                mine[lo:hi].read().result(), oracle[lo:hi].read().result(), err_msg=path
            )
        for _ in range(6):
            picked = np.unique(rng.integers(0, rows, int(rng.integers(1, 9))))
            np.testing.assert_array_equal(
                mine.oindex[picked].read().result(),
                oracle.oindex[picked].read().result(),
                err_msg=path,
            )


@pytest.mark.parametrize("layout", ["blosc-lz4", "zstd", "none", "sharded"])
def test_a_flipped_bit_raises_naming_the_chunk(tmp_path: Path, layout: str) -> None:
    folder = tmp_path / "ds"
    _dataset(folder, **OPTIONS[layout])
    array = folder / "data" / "observation" / "state"
    chunk = array / "c" / "0" / "0"
    data = bytearray(chunk.read_bytes())
    data[5] ^= 0x04  # inside the first (inner) chunk, which holds row 0
    chunk.write_bytes(bytes(data))
    reader = open_file_array(array, ChunkCache(1 << 20))
    with pytest.raises(IntegrityError, match=rf"chunk {chunk} .*is damaged"):
        reader[0:1].read().result()
    with pytest.raises(IntegrityError, match=rf"chunk {chunk} .*is damaged"):
        reader.oindex[np.array([0])].read().result()


@pytest.mark.parametrize("layout", ["blosc-lz4", "sharded"])
def test_a_missing_chunk_raises_and_never_reads_as_zeros(tmp_path: Path, layout: str) -> None:
    folder = tmp_path / "ds"
    _dataset(folder, **OPTIONS[layout])
    array = folder / "data" / "observation" / "state"
    chunk = array / "c" / "0" / "0"
    chunk.unlink()
    reader = open_file_array(array, ChunkCache(1 << 20))
    with pytest.raises(EpisodataError, match=rf"chunk {chunk} is missing"):
        reader[0:2].read().result()


def test_metadata_of_another_layout_is_refused_at_open(tmp_path: Path) -> None:
    folder = tmp_path / "other"
    spec = {
        "driver": "zarr3",
        "kvstore": {"driver": "file", "path": str(folder)},
        "metadata": {
            "shape": [10, 4],
            "data_type": "float32",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [5, 2]}},
            "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
        },
        "create": True,
    }
    ts.open(spec).result()
    with pytest.raises(UnsupportedLayout, match="split an axis other than the rows"):
        open_file_array(folder, ChunkCache(0))
