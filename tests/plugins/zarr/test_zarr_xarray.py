"""xarray.open_zarr and zarr-python open the role groups of a dataset and read its rows.

The oracle is the rows the test wrote, concatenated episode after episode (an absent
optional field reads as zero rows); the readers are xarray and zarr-python, never the
backend.
"""

from __future__ import annotations

import json
import warnings
import zlib
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
import xarray as xr
import zarr
from _zarr_helpers import episodes, make_backend, open_backend

from episodata_core.schema import DatasetSchema, FieldSpec
from episodata_core.testing import example_rows

if TYPE_CHECKING:
    from pathlib import Path

# two vector fields of different widths in one group, an image, a nested key in a
# subgroup, an optional field, a string field stored as raw bytes, a scalar
SCHEMA = DatasetSchema(
    [
        FieldSpec("camera", shape=(3, 4, 5), dtype="uint8", layout="CHW"),
        FieldSpec("state", shape=(2,), dtype="float32"),
        FieldSpec("goal", shape=(5,), dtype="float64"),
        FieldSpec("arm/joints", shape=(7,), dtype="float32"),
        FieldSpec("depth", shape=(4, 5), dtype="float32", optional=True),
        FieldSpec("action", shape=(3,), dtype="float32", role="action"),
        FieldSpec("reward", shape=(), dtype="float32", role="reward"),
        FieldSpec("level", shape=(), dtype="<U6", role="info"),
        FieldSpec("tag", shape=(2,), dtype="<U3", role="info"),
    ]
)
LENGTHS = [4, 1, 6]


def _written(folder: Path) -> dict[str, np.ndarray]:
    """Write three episodes and return every field's rows back to back (the oracle)."""
    stored = episodes(SCHEMA, LENGTHS)
    backend = make_backend(folder, SCHEMA)
    for i, rows in enumerate(stored):
        backend.add_episode(rows, terminated=i == 0, truncated=i == 2)
    backend.close()
    truth = {}
    for spec in SCHEMA:
        parts = [
            rows.get(spec.qualified_key, np.zeros((len(rows["observation/state"]), *spec.shape),
                                                  spec.np_dtype))
            for rows in stored
        ]  # fmt: skip
        truth[spec.qualified_key] = np.concatenate(parts)
    return truth


def _groups() -> dict[str, list[str]]:
    """``{group path: [qualified keys of the arrays directly in it]}``."""
    groups: dict[str, list[str]] = {}
    for key in SCHEMA.qualified_keys:
        parent = "data/" + key.rsplit("/", 1)[0]
        groups.setdefault(parent, []).append(key)
    return groups


def _as_field(values: np.ndarray, key: str) -> np.ndarray:
    """Raw-byte string rows viewed as the field's dtype (formats.md, Data arrays)."""
    spec = SCHEMA[key]
    if spec.np_dtype.kind != "U":
        return values
    return np.ascontiguousarray(values).view(spec.np_dtype)[..., 0]


def test_xarray_opens_every_group_and_reads_the_rows(tmp_path: Path) -> None:
    truth = _written(tmp_path / "ds")
    rows = sum(n for n in LENGTHS)
    for group, keys in _groups().items():
        # the failure this guards against: two unnamed axes of different sizes
        opened = xr.open_zarr(str(tmp_path / "ds"), group=group, consolidated=False)
        assert sorted(opened.data_vars) == sorted(k.rsplit("/", 1)[-1] for k in keys)
        assert opened.sizes["time"] == rows
        for key in keys:
            variable = opened[key.rsplit("/", 1)[-1]]
            assert variable.dims[0] == "time"
            assert len(set(variable.dims)) == variable.ndim
            values = _as_field(variable.values, key)
            np.testing.assert_array_equal(values, truth[key], err_msg=key, strict=True)
        opened.close()
    camera = xr.open_zarr(str(tmp_path / "ds"), group="data/observation", consolidated=False)
    assert camera["camera"].dims == ("time", "camera_C", "camera_H", "camera_W")
    assert camera["goal"].dims == ("time", "goal_dim_0")
    assert camera["depth"].dims == ("time", "depth_dim_0", "depth_dim_1")
    camera.close()
    info = xr.open_zarr(str(tmp_path / "ds"), group="data/info", consolidated=False)
    assert info["tag"].dims == ("time", "tag_dim_0", "tag_byte")
    info.close()


def test_zarr_python_reads_the_same_rows(tmp_path: Path) -> None:
    truth = _written(tmp_path / "ds")
    for group, keys in _groups().items():
        opened = zarr.open_group(str(tmp_path / "ds" / group), mode="r")
        for key in keys:
            array = opened[key.rsplit("/", 1)[-1]]
            assert isinstance(array, zarr.Array)
            names = array.metadata.dimension_names  # type: ignore[union-attr]
            assert names is not None
            assert None not in names
            assert names[0] == "time"
            values = _as_field(np.asarray(array[:]), key)
            np.testing.assert_array_equal(values, truth[key], err_msg=key, strict=True)


# what formats.md says zarr-python warns about when it lists the root group's members
DOCUMENTED_AT_ROOT = {
    "manifest.json",
    "commit.json",
    ".episodata-writer.lock",
    "log.sqlite",
    "log.sqlite-wal",
    "log.sqlite-shm",
}


def test_the_documented_files_are_all_zarr_python_warns_about(tmp_path: Path) -> None:
    from episodata import Dataset

    dataset = Dataset.create(SCHEMA.select(["observation/state", "action", "reward"]),
                             path=tmp_path / "ds")  # fmt: skip
    writer = dataset.new_episode({"state": np.zeros(2, np.float32)})
    writer.add_step({"observations": {"state": np.ones(2, np.float32)},
                     "actions": np.ones(3, np.float32), "rewards": np.float32(1)})  # fmt: skip
    dataset.flush()  # the ongoing episode keeps log.sqlite at the root
    root = zarr.open_group(str(tmp_path / "ds"), mode="r")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        members = sorted(name for name, _ in root.members())
    dataset.close()
    assert members == ["data", "index"]
    warned = {str(w.message).split("Object at ")[1].split(" is not")[0] for w in caught}
    assert all(issubclass(w.category, zarr.errors.ZarrUserWarning) for w in caught)
    assert {"manifest.json", "commit.json", "log.sqlite"} <= warned <= DOCUMENTED_AT_ROOT
    # and the filter formats.md gives silences them
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.filterwarnings(
            "ignore", "Object at .* is not recognized", category=zarr.errors.ZarrUserWarning
        )
        assert sorted(name for name, _ in zarr.open_group(str(tmp_path / "ds")).members()) == [
            "data",
            "index",
        ]


def _old_names(document: dict[str, Any]) -> list[str | None]:
    """The dimension names earlier releases wrote: "row", layout letters or null, "byte"."""
    field = document["attributes"]["episodata"]
    spec = SCHEMA[field["field"]]
    names: list[str | None] = ["row"]
    names += list(spec.layout) if spec.layout else [None] * len(spec.shape)
    if np.dtype(field["dtype"]).kind == "U":
        names.append("byte")
    return names


def _rewrite_as_an_earlier_release(folder: Path) -> None:
    """Give every data array the names an earlier release wrote, and re-sign commit.json.

    The commit record's ``metadata`` digests follow formats.md (CRC-32 of the document
    without ``shape``, sorted keys, compact separators), so the folder is exactly what
    that release left, not a damaged one.
    """
    commit_path = folder / "commit.json"
    commit = json.loads(commit_path.read_text())
    for key in SCHEMA.qualified_keys:
        path = f"data/{key}"
        document_path = folder / path / "zarr.json"
        document = json.loads(document_path.read_text())
        document["dimension_names"] = _old_names(document)
        document_path.write_text(json.dumps(document, indent=2))
        fixed = {k: v for k, v in document.items() if k != "shape"}
        text = json.dumps(fixed, sort_keys=True, separators=(",", ":"))
        commit["metadata"][path] = zlib.crc32(text.encode())
    body = {k: v for k, v in commit.items() if k != "crc32"}
    commit["crc32"] = zlib.crc32(json.dumps(body, sort_keys=True, separators=(",", ":")).encode())
    commit_path.write_text(json.dumps(commit, indent=2))


def test_datasets_without_dimension_names_still_open_append_and_verify(tmp_path: Path) -> None:
    folder = tmp_path / "ds"
    truth = _written(folder)
    _rewrite_as_an_earlier_release(folder)
    camera = zarr.open_array(str(folder / "data" / "observation" / "camera"), mode="r")
    assert camera.metadata.dimension_names == ("row", "C", "H", "W")  # type: ignore[union-attr]
    backend = open_backend(folder)
    assert backend.verify() == []
    first = backend.read_rows(0, 0, LENGTHS[0], ["observation/goal", "info/tag"])
    np.testing.assert_array_equal(first["observation/goal"], truth["observation/goal"][:4])
    np.testing.assert_array_equal(first["info/tag"], truth["info/tag"][:4])
    backend.close()
    # a writer appends to the old arrays and leaves their names as they were
    more = example_rows(SCHEMA, 3, seed=77)
    backend = open_backend(folder, writable=True)
    backend.add_episode(more, terminated=True, truncated=False)
    backend.close()
    backend = open_backend(folder)
    assert backend.verify() == []
    again = backend.read_rows(3, 0, 3, list(more))
    for key, values in more.items():
        np.testing.assert_array_equal(again[key], values, err_msg=key)
    backend.close()
    camera = zarr.open_array(str(folder / "data" / "observation" / "camera"), mode="r")
    assert camera.metadata.dimension_names == ("row", "C", "H", "W")  # type: ignore[union-attr]
    assert camera.shape[0] == sum(LENGTHS) + 3


def test_unnamed_axes_are_what_broke_xarray(tmp_path: Path) -> None:
    # the same folder with the earlier names: xarray refuses the observation group, which
    # is why new arrays name every axis
    _written(tmp_path / "ds")
    _rewrite_as_an_earlier_release(tmp_path / "ds")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "Duplicate dimension names" comes first
        with pytest.raises(ValueError, match="conflicting sizes for dimension"):
            xr.open_zarr(str(tmp_path / "ds"), group="data/observation", consolidated=False)
