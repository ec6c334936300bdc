"""Chunking from the byte budget, codecs and their options, sharding, lazy imports."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
from _zarr_helpers import make_backend, open_backend

from episodata_core.dataset import Dataset
from episodata_core.errors import SchemaError
from episodata_core.schema import DatasetSchema, FieldSpec
from episodata_core.testing import example_rows
from episodata_zarr import ZarrOptions

if TYPE_CHECKING:
    from pathlib import Path


def _metadata(folder: Path, key: str) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((folder / "data" / key / "zarr.json").read_text())
    return document


def _chunk_rows(folder: Path, key: str) -> int:
    grid = _metadata(folder, key)["chunk_grid"]["configuration"]["chunk_shape"]
    return int(grid[0])


def _compressor(folder: Path, key: str) -> dict[str, Any]:
    codecs = _metadata(folder, key)["codecs"]
    assert codecs[0]["name"] == "bytes"
    assert codecs[-1] == {"name": "crc32c"}
    return dict(codecs[1]) if len(codecs) == 3 else {}


def test_chunk_rows_come_from_the_byte_budget(tmp_path: Path, image_schema: DatasetSchema) -> None:
    make_backend(tmp_path / "ds", image_schema, chunk_bytes=10_000).close()
    folder = tmp_path / "ds"
    # 192-byte frames, 20-byte states, 8-byte actions, 4-byte rewards: whole rows per chunk
    assert _chunk_rows(folder, "observation/camera") == 10_000 // 192
    assert _chunk_rows(folder, "observation/state") == 10_000 // 20
    assert _chunk_rows(folder, "action/action") == 10_000 // 8
    assert _chunk_rows(folder, "reward/reward") == 10_000 // 4
    camera = _metadata(folder, "observation/camera")["chunk_grid"]["configuration"]
    assert camera["chunk_shape"] == [52, 3, 8, 8]  # only the row axis is split


def test_default_budget_and_rows_larger_than_it(tmp_path: Path) -> None:
    schema = DatasetSchema(
        [
            FieldSpec("frame", shape=(3, 64, 64), dtype="uint8"),
            FieldSpec("huge", shape=(300, 300), dtype="float64"),
        ]
    )
    make_backend(tmp_path / "ds", schema).close()
    assert _chunk_rows(tmp_path / "ds", "observation/frame") == (256 << 10) // (3 * 64 * 64)
    assert _chunk_rows(tmp_path / "ds", "observation/huge") == 1  # never less than a row


def test_chunk_rows_option_overrides_the_budget(
    tmp_path: Path, image_schema: DatasetSchema
) -> None:
    make_backend(tmp_path / "ds", image_schema, chunk_rows={"observation/camera": 7}).close()
    assert _chunk_rows(tmp_path / "ds", "observation/camera") == 7


def test_default_codec_is_blosc_lz4_with_byte_shuffle(tmp_path: Path) -> None:
    schema = DatasetSchema(
        [
            FieldSpec("camera", shape=(3, 4, 4), dtype="uint8"),
            FieldSpec("state", shape=(5,), dtype="float32"),
            FieldSpec("flag", shape=(), dtype="bool", role="info"),
        ]
    )
    make_backend(tmp_path / "ds", schema).close()
    folder = tmp_path / "ds"
    camera = _compressor(folder, "observation/camera")
    assert camera == {
        "name": "blosc",
        "configuration": {
            "cname": "lz4",
            "clevel": 5,
            "shuffle": "noshuffle",  # one-byte values: nothing to shuffle
            "blocksize": 0,
        },
    }
    assert _compressor(folder, "info/flag")["configuration"]["shuffle"] == "noshuffle"
    state = _compressor(folder, "observation/state")
    assert state["configuration"]["cname"] == "lz4"
    assert state["configuration"]["shuffle"] == "shuffle"
    assert state["configuration"]["typesize"] == 4


def test_codec_options_and_per_field_overrides(tmp_path: Path, image_schema: DatasetSchema) -> None:
    make_backend(
        tmp_path / "ds",
        image_schema,
        codec="blosc-zstd",
        codec_level=7,
        field_codecs={"observation/camera": "none", "reward/reward": "zstd"},
    ).close()
    folder = tmp_path / "ds"
    assert _compressor(folder, "observation/camera") == {}
    assert _compressor(folder, "reward/reward")["configuration"]["level"] == 7
    state = _compressor(folder, "observation/state")
    assert state["configuration"]["cname"] == "zstd"
    assert state["configuration"]["clevel"] == 7


@pytest.mark.parametrize("codec", ["none", "zstd", "blosc-lz4", "blosc-zstd"])
def test_every_codec_round_trips(tmp_path: Path, image_schema: DatasetSchema, codec: str) -> None:
    rows = example_rows(image_schema, 30, seed=1)
    backend = make_backend(tmp_path / "ds", image_schema, codec=codec, chunk_bytes=500)
    backend.add_episode(rows, terminated=True, truncated=False)
    backend.close()
    reopened = open_backend(tmp_path / "ds")
    stored = reopened.read_rows(0, 0, 30, list(rows))
    for key, values in rows.items():
        np.testing.assert_array_equal(stored[key], values, err_msg=key)
    reopened.close()


def test_sharding_groups_chunks_into_one_file(tmp_path: Path, image_schema: DatasetSchema) -> None:
    rows = example_rows(image_schema, 40, seed=2)
    backend = make_backend(
        tmp_path / "ds", image_schema, chunk_rows={"observation/camera": 4}, shard_chunks=5
    )
    backend.add_episode(rows, terminated=True, truncated=False)
    backend.close()
    folder = tmp_path / "ds" / "data" / "observation" / "camera"
    codec = _metadata(tmp_path / "ds", "observation/camera")["codecs"][0]
    assert codec["name"] == "sharding_indexed"
    assert codec["configuration"]["chunk_shape"] == [4, 3, 8, 8]
    shards = sorted(
        p.relative_to(folder).as_posix() for p in (folder / "c").rglob("*") if p.is_file()
    )
    assert shards == ["c/0/0/0/0", "c/1/0/0/0"]  # 40 rows: two shards of 20 rows, 5 chunks each
    reopened = open_backend(tmp_path / "ds")
    assert reopened.verify() == []
    np.testing.assert_array_equal(
        reopened.read_rows(0, 3, 27, ["observation/camera"])["observation/camera"],
        rows["observation/camera"][3:27],
    )
    reopened.close()


def test_layout_options_for_unknown_fields_are_refused(
    tmp_path: Path, image_schema: DatasetSchema
) -> None:
    with pytest.raises(SchemaError, match=r"field_codecs names \['observation/nope'\]"):
        make_backend(tmp_path / "a", image_schema, field_codecs={"observation/nope": "zstd"})
    with pytest.raises(SchemaError, match=r"chunk_rows\['observation/camera'\] must be at least 1"):
        make_backend(tmp_path / "b", image_schema, chunk_rows={"observation/camera": 0})
    with pytest.raises(ValueError, match="codec"):
        ZarrOptions(codec="gzip")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="extra"):
        ZarrOptions(chunk_size=3)  # type: ignore[call-arg]


def test_options_reach_the_backend_through_dataset_create(
    tmp_path: Path, image_schema: DatasetSchema
) -> None:
    dataset = Dataset.create(
        image_schema, tmp_path / "ds", backend="zarr", chunk_bytes=1000, codec="none"
    )
    dataset.close()
    assert _chunk_rows(tmp_path / "ds", "observation/camera") == 1000 // 192
    assert _compressor(tmp_path / "ds", "observation/state") == {}
    # layout options are fixed at creation; opening with others changes nothing stored
    reopened = Dataset.open(tmp_path / "ds", chunk_bytes=5, cache_pool_bytes=0)
    assert reopened.num_episodes == 0
    reopened.close()
    assert _chunk_rows(tmp_path / "ds", "observation/camera") == 1000 // 192


def test_import_does_not_load_tensorstore() -> None:
    code = (
        "import sys, episodata_zarr\n"
        "assert 'tensorstore' not in sys.modules, 'tensorstore was imported'\n"
        "assert 'zarr' not in sys.modules\n"
        "print('light')"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.stdout.strip() == "light", done.stderr
