"""An edited manifest whose schema disagrees with the stored arrays is refused, never used.

The oracle is the arrays' own ``zarr.json`` files and the schema the dataset was
created with; each case edits ``manifest.json`` by hand as a user or a stranger might.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from episodata_core.cli import main
from episodata_core.dataset import Dataset
from episodata_core.errors import SchemaError
from episodata_core.testing import example_rows, example_schema
from episodata_zarr import ZarrBackend, ZarrOptions

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

Fields = list[dict[str, Any]]


def _dataset(folder: Path) -> dict[str, Any]:
    schema = example_schema()
    dataset = Dataset.create(schema, path=folder, backend="zarr")
    rows = example_rows(schema, 4, seed=3)
    dataset.backend.add_episode(rows, terminated=True, truncated=False)
    dataset.close()
    return rows


def _edit(folder: Path, change: Callable[[Fields], None]) -> None:
    path = folder / "manifest.json"
    document = json.loads(path.read_text())
    change(document["schema"]["fields"])
    path.write_text(json.dumps(document, indent=2))


def _field(fields: Fields, role: str, key: str) -> dict[str, Any]:
    return next(f for f in fields if f["role"] == role and f["key"] == key)


def _set(role: str, key: str, name: str, value: Any) -> Callable[[Fields], None]:
    def change(fields: Fields) -> None:
        _field(fields, role, key)[name] = value

    return change


def _drop(fields: Fields) -> None:
    fields.remove(_field(fields, "info", "step_idx"))


def _add(fields: Fields) -> None:
    fields.append({"key": "extra", "shape": [2], "dtype": "float32", "role": "observation"})


def _swap(fields: Fields) -> None:
    fields[0], fields[1] = fields[1], fields[0]


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


CASES = [
    pytest.param(
        _set("observation", "state", "dtype", "float64"),
        r"field 'observation/state': manifest.json says dtype float64, but "
        r"data/observation/state/zarr.json stores float32",
        id="dtype",
    ),
    pytest.param(
        _set("observation", "camera", "shape", [2, 4, 5]),
        r"field 'observation/camera': manifest.json says per-row shape \[2, 4, 5\], but "
        r"data/observation/camera/zarr.json stores \[2, 4, 4\]",
        id="shape",
    ),
    pytest.param(
        _set("observation", "depth", "optional", False),
        r"field 'observation/depth': manifest.json says optional=False, but the schema "
        r"stored in zarr.json says True",
        id="optional",
    ),
    pytest.param(
        _drop,
        r"field 'info/step_idx': the dataset stores it \(data/info/step_idx\), but "
        r"manifest.json does not declare it",
        id="field-removed",
    ),
    pytest.param(
        _add,
        r"field 'observation/extra': manifest.json declares it, but the dataset stores no "
        r"such field",
        id="field-added",
    ),
    pytest.param(_swap, r"manifest.json lists the fields in the order", id="order"),
]


@pytest.mark.parametrize(("change", "message"), CASES)
def test_open_refuses_a_manifest_that_disagrees(
    tmp_path: Path, change: Callable[[Fields], None], message: str
) -> None:
    folder = tmp_path / "ds"
    _dataset(folder)
    _edit(folder, change)
    before = _snapshot(folder)
    with pytest.raises(SchemaError, match=message) as caught:
        Dataset.open(folder)
    assert "restore it from a copy" in str(caught.value)
    with pytest.raises(SchemaError, match=message):  # the backend alone refuses it too
        ZarrBackend.open(str(folder), ZarrOptions(), writable=True)
    assert _snapshot(folder) == before  # nothing was recovered, trimmed or rewritten


def test_cli_verify_reports_the_disagreement_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "ds"
    _dataset(folder)
    _edit(folder, _set("observation", "state", "shape", [4]))
    assert main(["verify", str(folder)]) == 1
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1
    assert "manifest.json says per-row shape [4], but data/observation/state/zarr.json" in out[0]


def test_verify_of_an_open_dataset_reports_a_manifest_edited_since(tmp_path: Path) -> None:
    folder = tmp_path / "ds"
    rows = _dataset(folder)
    dataset = Dataset.open(folder, read_only=True)
    assert dataset.backend.verify() == []  # type: ignore[attr-defined]
    _edit(folder, _set("reward", "reward", "dtype", "int64"))
    _edit(folder, _set("observation", "camera", "layout", "HWC"))
    problems = dataset.backend.verify()  # type: ignore[attr-defined]
    assert len(problems) == 2, problems
    assert problems[0].startswith(
        "manifest.json: field 'observation/camera': manifest.json says layout='HWC', but the "
        "schema stored in zarr.json says 'CHW'"
    )
    assert "field 'reward/reward': manifest.json says dtype int64, but" in problems[1]
    # the open dataset still reads by the stored schema: the rows as written
    stored = dataset.backend.read_rows(0, 0, 4, ["reward/reward"])["reward/reward"]
    np.testing.assert_array_equal(stored, rows["reward/reward"])
    dataset.close()


def test_an_untouched_manifest_opens_and_verifies(tmp_path: Path) -> None:
    folder = tmp_path / "ds"
    rows = _dataset(folder)
    dataset = Dataset.open(folder)
    assert dataset.manifest.schema == dataset.schema
    assert dataset.backend.verify() == []  # type: ignore[attr-defined]
    got = dataset.backend.read_rows(0, 0, 4, list(rows))
    for key, values in rows.items():
        np.testing.assert_array_equal(got[key], values)
    dataset.close()
