"""V7 against a real swm ``.h5`` file, and ``build_episodes.py`` reproducing an archive."""

from __future__ import annotations

import subprocess
import sys
from typing import TYPE_CHECKING

import numpy as np
import pytest
from segments_fixtures import K_TINY, dataset_from_swm, native_case, swm_source

import episodata
from episodata_core.errors import IntegrityError

if TYPE_CHECKING:
    from pathlib import Path

    from segments_fixtures import SwmSource


def _write_swm(path: Path, source: SwmSource) -> Path:
    h5py = pytest.importorskip("h5py")
    with h5py.File(path, "w") as handle:
        handle["ep_len"] = np.asarray(source.ep_len, dtype=np.int32)
        handle["ep_offset"] = np.asarray(source.ep_offset, dtype=np.int64)
        for name, values in source.columns.items():
            if values.dtype.kind == "U":
                handle.create_dataset(name, data=values.astype(object), dtype=h5py.string_dtype())
            else:
                handle[name] = values
    return path


def test_v7_compares_segments_with_the_source_file(tmp_path):
    source = swm_source()
    h5 = _write_swm(tmp_path / "tiny.h5", source)
    dataset = dataset_from_swm(source)
    options = {"offset": K_TINY, "episodes_per_env": 2, "source_files": {"toy": str(h5)}}
    report = episodata.export_datasets(
        "offset-segments", {"toy": dataset}, tmp_path / "out", **options
    )
    assert report.validated
    manifest = (tmp_path / "out/manifest.json").read_text()
    assert str(tmp_path) not in manifest  # the source path is never recorded


def test_v7_catches_a_dataset_that_differs_from_its_source(tmp_path):
    source = swm_source()
    h5 = _write_swm(tmp_path / "tiny.h5", source)
    source.columns["state"] = source.columns["state"] + 0.5  # the dataset no longer matches
    dataset = dataset_from_swm(source)
    options = {"offset": K_TINY, "episodes_per_env": 2, "source_files": {"toy": str(h5)}}
    with pytest.raises(IntegrityError, match=r"validation V7 failed .*toy/000.*'state'"):
        episodata.export_datasets("offset-segments", {"toy": dataset}, tmp_path / "out", **options)
    assert not (tmp_path / "out").exists()
    assert not (tmp_path / "out.partial").exists()


def test_build_script_rebuilds_the_same_archive(tmp_path):
    datasets, _ = native_case()
    stored = datasets["native"].copy_to(tmp_path / "stored", backend="npz_directory")
    stored.close()
    reopened = episodata.Dataset.open(tmp_path / "stored", read_only=True)
    options = {"offset": 2, "episodes_per_env": 3, "seed": 5}
    episodata.export_datasets("offset-segments", {"native": reopened}, tmp_path / "a", **options)
    reopened.close()
    subprocess.run(
        [sys.executable, "build_episodes.py", str(tmp_path / "b"), f"native={tmp_path / 'stored'}"],
        cwd=tmp_path / "a",
        check=True,
        capture_output=True,
    )
    for name in (
        "manifest.json",
        "manifest.jsonl",
        "SHA256SUMS",
        "episodes/native/episode_002.npz",
    ):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
