"""A hand-edited manifest or log line is refused before anything is sized by it."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from episodata_core.dataset import Dataset
from episodata_core.errors import SchemaError
from episodata_core.testing import example_rows, example_schema
from episodata_npz import NpzDirectoryBackend, NpzDirectoryOptions

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path


def _dataset(tmp_path: Path, *, ongoing_only: bool = False) -> Path:
    folder = tmp_path / "ds"
    dataset = Dataset.create(example_schema(), folder, backend="npz_directory")
    backend = dataset.backend
    if ongoing_only:
        backend.start_episode(example_rows(dataset.schema, 6, seed=9))
    else:
        for i in range(3):
            rows = example_rows(dataset.schema, 5 + i, seed=i)
            backend.add_episode(rows, terminated=True, truncated=False)
    dataset.close()
    return folder


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def _edit_manifest(folder: Path, edit: Callable[[list[dict[str, Any]]], None]) -> None:
    path = folder / "manifest.json"
    manifest = json.loads(path.read_text())
    edit(manifest["schema"]["fields"])
    path.write_text(json.dumps(manifest, indent=2))


def _state(fields: list[dict[str, Any]]) -> dict[str, Any]:
    return next(f for f in fields if f["key"] == "state")


def _set_shape(fields: list[dict[str, Any]]) -> None:
    _state(fields)["shape"] = [10**12]


def _set_dtype(fields: list[dict[str, Any]]) -> None:
    _state(fields)["dtype"] = "float64"


def _add_field(fields: list[dict[str, Any]]) -> None:
    fields.append({**_state(fields), "key": "extra"})


def _drop_field(fields: list[dict[str, Any]]) -> None:
    fields.remove(_state(fields))


EDITS = {
    "shape": (
        _set_shape,
        (
            r"field 'observation/state': manifest\.json says shape \[1000000000000\] per row, but "
            r"(episodes|ongoing)/episode_00000000[02]\.npz holds \[3\] per row .* back to \[3\]"
        ),
    ),
    "dtype": (
        _set_dtype,
        (
            r"field 'observation/state': manifest\.json says dtype float64, but .* holds float32\. "
            r"Set the field's dtype in manifest\.json back to 'float32'"
        ),
    ),
    "added field": (
        _add_field,
        (
            r"manifest\.json lists the required fields \['observation/extra'\], but .* does not "
            r"store them"
        ),
    ),
    "dropped field": (
        _drop_field,
        (
            r"stores the fields 'observation/state' \(float32, \[3\]\), which the schema in "
            r"manifest\.json does not list"
        ),
    ),
}


@pytest.mark.parametrize("ongoing_only", [False, True], ids=["finalized", "ongoing only"])
@pytest.mark.parametrize("edit", list(EDITS))
@pytest.mark.parametrize("writable", [False, True], ids=["read-only", "writable"])
def test_edited_manifest_is_refused_at_open_and_nothing_changes(
    tmp_path: Path, edit: str, ongoing_only: bool, writable: bool
) -> None:
    folder = _dataset(tmp_path, ongoing_only=ongoing_only)
    change, message = EDITS[edit]
    _edit_manifest(folder, change)
    before = _snapshot(folder)
    with pytest.raises(SchemaError, match=message):
        NpzDirectoryBackend.open(str(folder), NpzDirectoryOptions(), writable=writable)
    assert _snapshot(folder) == before


def test_huge_shape_never_reaches_sampling(tmp_path: Path) -> None:
    folder = _dataset(tmp_path)
    _edit_manifest(folder, _set_shape)
    # before the fix this opened, and sampling asked NumPy for 29 TiB
    with pytest.raises(SchemaError, match=r"says shape \[1000000000000\]"):
        Dataset.open(folder, read_only=True).sample_transitions(4, seed=0)


def _edit_log_length(folder: Path, episode: int, length: int) -> None:
    path = folder / "episodes.jsonl"
    lines = path.read_text().splitlines()
    entry = json.loads(lines[episode])
    entry["length"] = length
    lines[episode] = json.dumps(entry, separators=(",", ":"))
    path.write_text("\n".join(lines) + "\n")


def test_log_length_that_no_archive_of_its_size_can_hold_is_refused_at_open(
    tmp_path: Path,
) -> None:
    folder = _dataset(tmp_path)
    _edit_log_length(folder, 1, 10**12)
    before = _snapshot(folder)
    with pytest.raises(
        SchemaError,
        match=r"episodes\.jsonl line 2 records length 1000000000000 for "
        r"episodes/episode_000000001\.npz, but \d+ bytes cannot hold",
    ):
        Dataset.open(folder, read_only=True)
    assert _snapshot(folder) == before


def test_log_length_that_disagrees_with_its_archive_is_named(tmp_path: Path) -> None:
    folder = _dataset(tmp_path)
    _edit_log_length(folder, 0, 9)  # episode 0 has 4 transitions
    message = (
        r"episodes/episode_000000000\.npz: episodes\.jsonl records length 9 \(10 rows\), but "
        r"field '.*' holds 5 rows \(length 4\); .* Set \"length\" back to 4 in episodes\.jsonl"
    )
    dataset = Dataset.open(folder, read_only=True)
    with pytest.raises(SchemaError, match=message):
        dataset.episode(0).read()
    problems = dataset.backend.verify()  # type: ignore[attr-defined]
    assert len(problems) == 1
    assert "records length 9" in problems[0]
    # the other episodes are intact and still read
    stored = dataset.backend.read_rows(2, 0, 7, ["observation/state"])["observation/state"]
    np.testing.assert_array_equal(
        stored, example_rows(dataset.schema, 7, seed=2)["observation/state"]
    )
    dataset.close()


def test_newest_log_line_that_disagrees_with_its_archive_is_refused_at_open(
    tmp_path: Path,
) -> None:
    folder = _dataset(tmp_path)
    _edit_log_length(folder, 2, 3)  # episode 2 has 6 transitions
    with pytest.raises(SchemaError, match=r"records length 3 \(4 rows\), but .* holds 7 rows"):
        Dataset.open(folder, read_only=True)


def test_optional_field_made_required_is_refused_at_open(tmp_path: Path) -> None:
    folder = tmp_path / "ds"
    dataset = Dataset.create(example_schema(), folder, backend="npz_directory")
    without = example_rows(dataset.schema, 4, seed=1, absent=("observation/depth",))
    dataset.backend.add_episode(without, terminated=True, truncated=False)
    dataset.backend.add_episode(
        example_rows(dataset.schema, 4, seed=2), terminated=True, truncated=False
    )
    dataset.close()

    def required(fields: list[dict[str, Any]]) -> None:
        next(f for f in fields if f["key"] == "depth")["optional"] = False

    _edit_manifest(folder, required)
    with pytest.raises(
        SchemaError,
        match=r"episodes\.jsonl line 1 records that episodes/episode_000000000\.npz does not "
        r"store \['observation/depth'\], which the schema in manifest\.json says are required",
    ):
        Dataset.open(folder, read_only=True)
