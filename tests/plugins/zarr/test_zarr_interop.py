"""zarr-python opens every array of a dataset directly and reads the same values."""

from __future__ import annotations

import json
import sqlite3
import zlib
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
import zarr
from _zarr_helpers import episodes, make_backend

from episodata_core.schema import DatasetSchema, FieldSpec
from episodata_core.testing import example_rows, example_schema

if TYPE_CHECKING:
    from pathlib import Path


def _expected_data(schema: DatasetSchema, stored: list[dict[str, Any]]) -> dict[str, Any]:
    """Every field's rows back to back; absent optional fields are zero rows."""
    out = {}
    for spec in schema:
        parts = []
        for rows in stored:
            count = len(next(iter(rows.values())))
            part = rows.get(spec.qualified_key)
            parts.append(
                part if part is not None else np.zeros((count, *spec.shape), spec.np_dtype)
            )
        out[spec.qualified_key] = np.concatenate(parts)
    return out


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"chunk_bytes": 100, "codec": "blosc-zstd"},
        {"chunk_rows": {"reward/reward": 3}, "shard_chunks": 2},
    ],
    ids=["default", "small-chunks-blosc-zstd", "sharded"],
)
def test_zarr_python_reads_every_array(tmp_path: Path, options: dict[str, Any]) -> None:
    schema = example_schema()
    stored = episodes(schema, [6, 1, 9, 4])
    backend = make_backend(tmp_path / "ds", schema, **options)
    for i, rows in enumerate(stored):
        backend.add_episode(rows, terminated=i == 0, truncated=i == 2)
    ongoing = example_rows(schema, 3, seed=99)
    backend.start_episode(ongoing)
    backend.flush()
    backend.close()

    root = zarr.open_group(str(tmp_path / "ds"), mode="r")
    assert root.attrs["episodata"]["format"] == "episodata-zarr"
    assert DatasetSchema.model_validate(root.attrs["episodata"]["schema"]) == schema
    expected = _expected_data(schema, stored)
    for key, values in expected.items():
        # through the group hierarchy and as a standalone array: both plain Zarr v3
        array = root[f"data/{key}"]
        assert isinstance(array, zarr.Array)
        assert array.dtype == values.dtype
        np.testing.assert_array_equal(array[:], values, err_msg=key)
        direct = zarr.open_array(str(tmp_path / "ds" / "data" / key), mode="r")
        np.testing.assert_array_equal(direct[:], values, err_msg=key)

    index = zarr.open_array(str(tmp_path / "ds" / "index" / "episodes"), mode="r")
    columns = index.attrs["episodata"]["columns"]
    table = {name: index[:, i] for i, name in enumerate(columns)}
    assert table["length"].tolist() == [5, 0, 8, 3]
    assert table["row_start"].tolist() == [0, 6, 7, 16]
    assert table["terminated"].tolist() == [1, 0, 0, 0]
    assert table["truncated"].tolist() == [0, 0, 1, 0]
    assert table["ongoing"].tolist() == [0, 0, 0, 0]
    assert table["present:observation/depth"].tolist() == [1, 0, 1, 0]

    # the ongoing episode's flushed rows are in the episode log, which SQLite and NumPy
    # read as docs/formats.md says, without episodata
    with sqlite3.connect(f"file:{tmp_path / 'ds' / 'log.sqlite'}?mode=ro", uri=True) as log:
        episodes_table = log.execute(
            "SELECT id, row_start, rows, ongoing, fields FROM episodes"
        ).fetchall()
        assert [row[:4] for row in episodes_table] == [(4, -1, 3, 1)]
        assert sorted(json.loads(episodes_table[0][4])) == sorted(ongoing)
        blocks = log.execute(
            "SELECT first, count, crc32, data FROM blocks WHERE episode = 4 ORDER BY key"
        ).fetchall()
        assert all(zlib.crc32(block[3]) == block[2] for block in blocks)
        assert [block[:2] for block in blocks] == [(0, 3)]
        data, offset = blocks[0][3], 0
        for key in json.loads(episodes_table[0][4]):  # each field's rows, in this order
            values = ongoing[key]
            dtype = root[f"data/{key}"].dtype
            size = values.size * dtype.itemsize
            rows = np.frombuffer(data[offset : offset + size], dtype=dtype).reshape(values.shape)
            offset += size
            np.testing.assert_array_equal(rows, values, err_msg=key)


def test_every_array_has_exact_shape_after_close(tmp_path: Path) -> None:
    # arrays grow with spare capacity while writing; closing trims them to the commit
    backend = make_backend(tmp_path / "ds")
    for rows in episodes(backend.schema, [3, 4]):
        backend.add_episode(rows, terminated=True, truncated=False)
    backend.close()
    root = zarr.open_group(str(tmp_path / "ds"), mode="r")
    for key in example_schema().qualified_keys:
        array = root[f"data/{key}"]
        assert isinstance(array, zarr.Array)
        assert array.shape[0] == 7
    index = root["index/episodes"]
    assert isinstance(index, zarr.Array)
    assert index.shape[0] == 2


def test_dimension_names_and_attributes(tmp_path: Path) -> None:
    backend = make_backend(tmp_path / "ds")
    backend.close()
    camera = zarr.open_array(str(tmp_path / "ds" / "data" / "observation" / "camera"), mode="r")
    assert camera.metadata.dimension_names == ("time", "camera_C", "camera_H", "camera_W")
    assert camera.attrs["episodata"] == {"field": "observation/camera", "dtype": "|u1"}


def test_fixed_width_strings_are_raw_bytes(tmp_path: Path) -> None:
    schema = DatasetSchema(
        [
            FieldSpec("state", shape=(2,), dtype="float32"),
            FieldSpec("label", shape=(2,), dtype="<U5", role="info"),
        ]
    )
    labels = np.array([["reset", "a"], ["move", "bb"], ["jump", "ccc"]], dtype="<U5")
    rows = {"observation/state": np.zeros((3, 2), np.float32), "info/label": labels}
    backend = make_backend(tmp_path / "ds", schema)
    backend.add_episode(rows, terminated=True, truncated=False)
    np.testing.assert_array_equal(backend.read_rows(0, 0, 3, ["info/label"])["info/label"], labels)
    backend.close()
    raw = zarr.open_array(str(tmp_path / "ds" / "data" / "info" / "label"), mode="r")
    assert raw.dtype == np.uint8
    assert raw.shape == (3, 2, 20)
    assert raw.metadata.dimension_names == ("time", "label_dim_0", "label_byte")
    np.testing.assert_array_equal(raw[:].view("<U5")[..., 0], labels)


def test_odd_key_parts_stay_inside_their_group(tmp_path: Path) -> None:
    schema = DatasetSchema(
        [
            FieldSpec("..", shape=(), dtype="float32"),
            FieldSpec("zarr.json/x", shape=(), dtype="float32"),
            FieldSpec("__c y", shape=(), dtype="float32"),
        ]
    )
    rows = example_rows(schema, 4, seed=0)
    backend = make_backend(tmp_path / "ds", schema)
    backend.add_episode(rows, terminated=True, truncated=False)
    backend.close()
    names = sorted(p.name for p in (tmp_path / "ds" / "data" / "observation").iterdir())
    assert names == ["%2E.", "%5F_c%20y", "zarr%2Ejson", "zarr.json"]
    root = zarr.open_group(str(tmp_path / "ds"), mode="r")
    array = root["data/observation/%2E."]
    assert isinstance(array, zarr.Array)
    np.testing.assert_array_equal(array[:], rows["observation/.."])
