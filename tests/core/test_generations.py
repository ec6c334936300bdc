"""Manifests name their format generation; newer ones are refused, older ones recognized."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import numpy as np
import pytest

from episodata import Dataset
from episodata_core.errors import SchemaError
from episodata_core.generations import FORMAT_GENERATION, detect_generation
from episodata_core.manifest import read_manifest_document

if TYPE_CHECKING:
    from pathlib import Path


def _episode() -> dict[str, object]:
    return {
        "initial_observation": np.zeros(3, np.float32),
        "observations": np.arange(12, dtype=np.float32).reshape(4, 3),
        "actions": np.arange(4, dtype=np.int64),
        "rewards": np.ones(4, np.float32),
        "terminated": True,
    }


@pytest.fixture(params=["zarr", "npz_directory"])
def stored(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    path = tmp_path / "ds"
    Dataset.from_episodes([_episode()], path=str(path), backend=request.param).close()
    return path


def test_new_manifests_name_the_generation_they_are(stored: Path) -> None:
    document = json.loads((stored / "manifest.json").read_text())
    assert document["format_generation"] == FORMAT_GENERATION == "0.3"
    assert detect_generation(str(stored), document) == "0.3"
    assert Dataset.open(stored).manifest.format_generation == "0.3"


@pytest.mark.parametrize("newer", ["0.4", "1.0", "0.3.1"])
def test_a_newer_generation_is_refused_with_a_message_to_upgrade(stored: Path, newer: str) -> None:
    manifest = stored / "manifest.json"
    document = json.loads(manifest.read_text())
    document["format_generation"] = newer
    manifest.write_text(json.dumps(document))
    before = {p: p.read_bytes() for p in stored.rglob("*") if p.is_file()}
    with pytest.raises(SchemaError, match=rf"format generation {newer}, newer.*upgrade episodata"):
        Dataset.open(stored)
    assert {p: p.read_bytes() for p in stored.rglob("*") if p.is_file()} == before


@pytest.mark.parametrize("bad", ["three", "", 3, None, "0..3"])
def test_a_malformed_generation_is_a_damaged_manifest(stored: Path, bad: object) -> None:
    manifest = stored / "manifest.json"
    document = json.loads(manifest.read_text())
    document["format_generation"] = bad
    manifest.write_text(json.dumps(document))
    with pytest.raises(SchemaError, match="format_generation"):
        Dataset.open(stored)


def test_a_manifest_from_before_generations_were_named_reads_as_today(stored: Path) -> None:
    manifest = stored / "manifest.json"
    document = json.loads(manifest.read_text())
    del document["format_generation"]
    manifest.write_text(json.dumps(document))
    assert detect_generation(str(stored), read_manifest_document(str(stored))) == "0.3"
    dataset = Dataset.open(stored)
    assert dataset.manifest.format_generation == "0.3"
    np.testing.assert_array_equal(dataset.episode(0).read().reward, np.ones(4, np.float32))
