"""What the hdf5 backend promises beyond the kit: its file layout, batched reads, options."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import h5py
import numpy as np
import numpy.typing as npt
import pytest
from episodata import Dataset
from episodata_core.errors import DatasetStateError, FieldNotFoundError, SchemaError
from episodata_core.protocols import GatherRequest
from episodata_core.schema import DatasetSchema, FieldSpec
from episodata_core.testing import example_rows, example_schema
from pydantic import ValidationError

from episodata_plugin_example import HDF5Backend, HDF5Options, _impl, _reads

if TYPE_CHECKING:
    from pathlib import Path


def _create(tmp_path: Path, schema: DatasetSchema | None = None, **options: Any) -> Dataset:
    return Dataset.create(schema or example_schema(), tmp_path / "ds", backend="hdf5", **options)


def _fill(dataset: Dataset, lengths: list[int]) -> list[dict[str, npt.NDArray[Any]]]:
    episodes = []
    for seed, n in enumerate(lengths):
        absent = ("observation/depth",) if seed % 3 == 1 else ()
        rows = example_rows(dataset.schema, n, seed=seed, absent=absent)
        dataset.backend.add_episode(rows, terminated=seed % 2 == 0, truncated=False)
        episodes.append(rows)
    return episodes


def test_the_file_is_plain_hdf5(tmp_path: Path) -> None:
    dataset = _create(tmp_path)
    episodes = _fill(dataset, [4, 7, 1])
    dataset.close()
    with h5py.File(tmp_path / "ds" / "data.h5", "r") as file:
        assert file.attrs["format"] == b"episodata-plugin-example/hdf5"
        state = file["rows/observation/state"][()]
        np.testing.assert_array_equal(
            state, np.concatenate([rows["observation/state"] for rows in episodes])
        )
        # the two `camera` fields of the kit schema live apart, under their roles
        assert file["rows/observation/camera"].shape == (12, 2, 4, 4)
        assert file["rows/action/camera"].shape == (12, 2)
        records = file["episodes"][()]
        assert records["episode"].tolist() == [0, 1, 2]
        assert records["row_start"].tolist() == [0, 4, 11]
        assert records["num_rows"].tolist() == [4, 7, 1]
        assert records["present"][:, 0].tolist() == [1, 0, 1]
        assert file["commit"][:2].tolist() == [3, 12]


def test_absent_optional_rows_are_zero_and_not_readable(tmp_path: Path) -> None:
    dataset = _create(tmp_path)
    _fill(dataset, [3, 5])
    assert dataset.backend.episode_table().present["observation/depth"].tolist() == [True, False]
    with pytest.raises(FieldNotFoundError, match="does not store the optional field"):
        dataset.backend.read_rows(1, 0, 2, ["observation/depth"])
    dataset.close()
    with h5py.File(tmp_path / "ds" / "data.h5", "r") as file:
        assert not file["rows/observation/depth"][3:].any()


def test_options_are_validated(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="chunk_bytes"):
        HDF5Options(chunk_bytes=100)
    # the core reports a backend's option errors with their location
    with pytest.raises((SchemaError, ValidationError), match="chunk_size"):
        _create(tmp_path, chunk_size=4096)
    assert HDF5Options().durable


def test_needs_a_folder() -> None:
    with pytest.raises(SchemaError, match="needs a folder"):
        Dataset.create(example_schema(), backend="hdf5")


def test_refuses_fields_hdf5_cannot_name_or_chunk(tmp_path: Path) -> None:
    dotted = DatasetSchema([FieldSpec("a/../b", shape=(), dtype="float32")])
    with pytest.raises(SchemaError, match="cannot be part of an HDF5 path"):
        Dataset.create(dotted, tmp_path / "dotted", backend="hdf5")
    empty = DatasetSchema([FieldSpec("nothing", shape=(0,), dtype="float32")])
    with pytest.raises(SchemaError, match="no elements"):
        Dataset.create(empty, tmp_path / "empty", backend="hdf5")


def test_chunks_hold_at_least_2048_bytes(tmp_path: Path) -> None:
    dataset = _create(tmp_path, chunk_bytes=4096)
    dataset.close()
    with h5py.File(tmp_path / "ds" / "data.h5", "r") as file:
        assert file["rows/action/keyboard/jump"].chunks == (4096,)  # 1 byte a row
        assert file["rows/observation/state"].chunks == (341, 3)  # 12 bytes a row
        for name in ("rows/observation/camera", "episodes"):
            dataset_ = file[name]
            row_bytes = dataset_.dtype.itemsize * int(np.prod(dataset_.shape[1:]))
            assert dataset_.chunks[0] * row_bytes >= 2048


def test_reads_are_read_only_and_stay_inside_the_episode(tmp_path: Path) -> None:
    dataset = _create(tmp_path)
    _fill(dataset, [5, 5])
    rows = dataset.backend.read_rows(0, 1, 4, ["observation/state"])
    assert not rows["observation/state"].flags.writeable
    with pytest.raises(DatasetStateError, match=r"outside episode 0, which has 5"):
        dataset.backend.read_rows(0, 2, 7, ["observation/state"])
    with pytest.raises(DatasetStateError, match="episode 2 does not exist"):
        dataset.backend.read_rows(2, 0, 1, ["observation/state"])
    dataset.close()


@pytest.mark.parametrize(
    "chosen",
    [
        np.random.default_rng(1).integers(0, 41, size=64),  # dense: one covering read
        np.array([0, 20, 39, 40, 0]),  # far apart: one read per cluster of rows
    ],
    ids=["dense", "sparse"],
)
def test_gather_reads_each_field_once_per_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chosen: npt.NDArray[np.int64]
) -> None:
    dataset = _create(tmp_path, chunk_bytes=2048)
    episodes = _fill(dataset, [30] * 40)
    ongoing = example_rows(dataset.schema, 9, seed=99)
    dataset.backend.start_episode(ongoing)
    episodes.append(ongoing)
    reads: list[str] = []
    read_sorted = _reads.read_sorted

    def counting(
        dataset_: h5py.Dataset, rows: npt.NDArray[np.int64], join: int
    ) -> npt.NDArray[Any]:
        reads.append(dataset_.name)
        return read_sorted(dataset_, rows, join)

    monkeypatch.setattr(_impl, "read_sorted", counting)
    rng = np.random.default_rng(0)
    counts = rng.integers(1, 6, size=len(chosen))
    lengths = np.array([len(episodes[e]["observation/state"]) for e in chosen])
    starts = rng.integers(0, lengths - counts + 1)
    request = GatherRequest(
        episodes=chosen.astype(np.int64),
        starts=starts.astype(np.int64),
        counts=counts.astype(np.int64),
        offsets=(5 - counts).astype(np.int64),  # prefix padding
        num_rows=5,
        fields=dataset.schema.qualified_keys,
    )
    out = dataset.backend.gather_rows(request)
    assert len(reads) == len(request.fields)
    for b, episode in enumerate(chosen):
        for key in request.fields:
            expected = np.zeros_like(out[key][b])
            source = episodes[episode].get(key)
            if source is not None:
                expected[5 - counts[b] :] = source[starts[b] : starts[b] + counts[b]]
            np.testing.assert_array_equal(out[key][b], expected, err_msg=f"{b} {key}")
    dataset.close()


def test_sampling_matches_the_memory_backend(tmp_path: Path) -> None:
    dataset = _create(tmp_path, chunk_bytes=2048)
    _fill(dataset, [12, 3, 30, 1, 8])
    in_memory = dataset.copy_to(None, backend="memory")
    for view in (dataset, in_memory):
        assert len(view.segments(4)) == len(in_memory.segments(4))
    windows = list(range(len(in_memory.segments(4))))
    ours = dataset.segments(4).__getitems__(windows)
    theirs = in_memory.segments(4).__getitems__(windows)
    assert sorted(ours.buffers) == sorted(theirs.buffers)
    for key, buffer in theirs.buffers.items():
        np.testing.assert_array_equal(ours.buffers[key], buffer, err_msg=key)
    np.testing.assert_array_equal(ours.mask, theirs.mask)
    np.testing.assert_array_equal(ours.terminated, theirs.terminated)
    dataset.close()


def test_copy_to_hdf5_and_back(tmp_path: Path) -> None:
    source = Dataset.create(example_schema())
    episodes = _fill(source, [6, 2, 9])
    copy = source.copy_to(tmp_path / "copy", backend="hdf5")
    copy.close()
    reopened = Dataset.open(tmp_path / "copy", read_only=True)
    assert isinstance(reopened.backend, HDF5Backend)
    for episode, rows in enumerate(episodes):
        stored = reopened.backend.read_rows(episode, 0, len(rows["observation/state"]), list(rows))
        for key, values in rows.items():
            np.testing.assert_array_equal(stored[key], values, err_msg=key)
    reopened.close()


def test_flush_writes_the_spill_only_when_something_changed(tmp_path: Path) -> None:
    dataset = _create(tmp_path)
    spill = tmp_path / "ds" / "ongoing.bin"
    rows = example_rows(dataset.schema, 3, seed=0)
    episode = dataset.backend.start_episode(rows)
    dataset.flush()
    first = spill.stat().st_mtime_ns, spill.stat().st_ino
    dataset.flush()
    assert (spill.stat().st_mtime_ns, spill.stat().st_ino) == first
    dataset.backend.finalize_episode(episode, terminated=True, truncated=False)
    dataset.flush()
    assert not spill.exists()  # no ongoing episode is left to keep
    dataset.close()


def test_string_and_complex_fields_round_trip(tmp_path: Path) -> None:
    schema = DatasetSchema(
        [
            FieldSpec("state", shape=(2,), dtype="complex64"),
            FieldSpec("level", shape=(), dtype="<U8", role="info"),
            FieldSpec("tags", shape=(2,), dtype="S4", role="info"),
        ]
    )
    rows = {
        "observation/state": (np.arange(8).reshape(4, 2) * (1 + 2j)).astype(np.complex64),
        "info/level": np.array(["a", "bé", "ünïcødé", ""], dtype="<U8"),
        "info/tags": np.array([[b"x", b"yy"]] * 4, dtype="S4"),
    }
    dataset = _create(tmp_path, schema)
    dataset.backend.add_episode(rows, terminated=True, truncated=False)
    stored = dataset.backend.read_rows(0, 0, 4, list(rows))
    request = GatherRequest(
        episodes=np.array([0, 0]),
        starts=np.array([1, 0]),
        counts=np.array([3, 2]),
        offsets=np.array([0, 1]),
        num_rows=3,
        fields=tuple(rows),
    )
    gathered = dataset.backend.gather_rows(request)
    for key, values in rows.items():
        assert stored[key].dtype == values.dtype
        np.testing.assert_array_equal(stored[key], values)
        np.testing.assert_array_equal(gathered[key][0], values[1:4])
        np.testing.assert_array_equal(gathered[key][1, 1:], values[0:2])
    assert dataset.backend.verify() == []  # type: ignore[attr-defined]
    dataset.close()
    with h5py.File(tmp_path / "ds" / "data.h5", "r") as file:
        # HDF5 has no UCS-4 string type: the exact bytes, one more axis
        assert file["rows/info/level"].dtype == np.uint8
        assert file["rows/info/level"].shape == (4, 32)
        assert file["rows/info/tags"][0].tolist() == [b"x", b"yy"]


@pytest.mark.parametrize("join", [1, 3, 1000])
def test_sorted_reads_join_close_rows(tmp_path: Path, join: int) -> None:
    values = np.arange(200 * 3, dtype=np.float32).reshape(200, 3)
    with h5py.File(tmp_path / "plain.h5", "w") as file:
        dataset = file.create_dataset("x", data=values, chunks=(16, 3), maxshape=(None, 3))
        rows = np.array([0, 1, 2, 5, 6, 40, 41, 150, 199], dtype=np.int64)
        np.testing.assert_array_equal(_reads.read_sorted(dataset, rows, join), values[rows])
