"""Malformed swm files: error type, message (file, column, rows, fix), nothing written."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap

import h5py
import numpy as np
import pytest
from tests.fixtures.hdf5_sources import BAD_SWM, check_dataset, swm_bad, swm_tiny, write_swm

import episodata
from episodata_core.errors import (
    EpisodataError,
    FormatError,
    MissingFilterError,
    PartialFileError,
)
from episodata_core.registry import get_backend


def _persistent_backend():
    for name in ("zarr", "npz_directory"):
        try:
            get_backend(name)
        except EpisodataError:
            continue
        return name
    pytest.skip("no persistent backend is usable here")


@pytest.mark.parametrize("case", BAD_SWM)
def test_bad_file_raises_and_leaves_no_destination(sources, tmp_path, case):
    path, error, fragment = swm_bad(sources, case)
    destination = tmp_path / "out"
    with pytest.raises(error, match=re.escape(fragment)) as caught:
        episodata.import_dataset("lewm", path, destination, backend=_persistent_backend())
    assert str(path) in str(caught.value)
    assert not destination.exists()


@pytest.mark.parametrize("case", ["nan_action_inside", "first_chunk_only", "mixed_nan"])
def test_bad_file_leaves_an_appended_dataset_unchanged(sources, case):
    good, _ = swm_tiny(sources)
    dataset, _ = episodata.import_dataset("lewm", good)
    path, error, fragment = swm_bad(sources, case)
    with pytest.raises(error, match=re.escape(fragment)):
        episodata.import_dataset("lewm", path, dataset)
    assert len(dataset) == 3
    assert len(dataset.manifest.metadata["imports"]) == 1


def test_a_populated_prefix_of_a_partial_file_imports(sources):
    path, _, _ = swm_bad(sources, "first_chunk_only")
    dataset, _ = episodata.import_dataset("lewm", path, episodes=1)  # rows 0..3
    assert len(dataset) == 1
    assert dataset.episode(0).read().buffers["observation/pixels"][:, 0, 0, 0].tolist() == [
        0,
        1,
        2,
        3,
    ]
    unchecked, _ = episodata.import_dataset("lewm", path, check_chunks=False)
    pixels = unchecked.episode(2).read().buffers["observation/pixels"]
    assert not pixels.any()  # what check_chunks prevents: unallocated chunks read as zeros


def test_populated_bytes_bounds_the_chunks(sources):
    path, oracle = swm_tiny(sources, form="blosc")
    ends = []
    with h5py.File(path) as handle:
        handle["pixels"].id.chunk_iter(lambda info: ends.append(info.byte_offset + info.size))
    cut = max(ends) - 1  # as if the download stopped inside the last pixel chunk
    with pytest.raises(PartialFileError, match=rf"chunk\(s\) not within {cut} bytes"):
        episodata.import_dataset("lewm", path, populated_bytes=cut)
    dataset, report = episodata.import_dataset("lewm", path, populated_bytes=path.stat().st_size)
    check_dataset(dataset, report, oracle)


def test_a_cut_off_file_is_a_partial_file(sources, tmp_path):
    path, _ = swm_tiny(sources, form="gzip")
    cut = tmp_path / "cut.h5"
    cut.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(FormatError, match=str(cut)):
        episodata.import_dataset("lewm", cut)


def test_an_unknown_filter_is_reported_before_any_read(tmp_path):
    arrays = {
        "ep_len": np.array([3], dtype=np.int32),
        "ep_offset": np.array([0], dtype=np.int64),
        "action": np.array([[0.0], [1.0], [np.nan]], dtype=np.float32),
    }
    path = write_swm(tmp_path / "unknown-filter.h5", arrays)
    with h5py.File(path, "a") as handle:
        handle.create_dataset(
            "state",
            data=np.zeros((3, 2), np.float32),
            chunks=(1, 2),
            compression=32099,
            allow_unknown_filter=True,  # optional: chunks are stored unfiltered
        )
    with pytest.raises(MissingFilterError, match=r"column 'state' .* filter 32099"):
        episodata.import_dataset("lewm", path)
    dataset, _ = episodata.import_dataset("lewm", path, exclude=["state"])
    assert len(dataset) == 1


WITHOUT_HDF5PLUGIN = textwrap.dedent(
    """
    import json, os, sys
    sys.modules["hdf5plugin"] = None  # makes `import hdf5plugin` fail as if it were absent
    import h5py
    import episodata
    from episodata_core.errors import MissingFilterError
    path, destination, backend = sys.argv[1:4]
    with h5py.File(path) as handle:
        try:
            handle["pixels"][()]
            raw = "read"
        except OSError:
            raw = "OSError"
    try:
        episodata.import_dataset("lewm", path, destination, backend=backend)
        outcome = {"error": None}
    except MissingFilterError as err:
        outcome = {"error": str(err)}
    outcome |= {"raw": raw, "destination": os.path.exists(destination)}
    print(json.dumps(outcome))
    """
)


def test_blosc_without_hdf5plugin_is_a_missing_filter_error(sources, tmp_path):
    path, _ = swm_tiny(sources, form="blosc")  # constant frames: the chunks compress
    destination = tmp_path / "out"
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            WITHOUT_HDF5PLUGIN,
            str(path),
            str(destination),
            _persistent_backend(),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    outcome = json.loads(result.stdout.splitlines()[-1])
    assert outcome["raw"] == "OSError"  # what a plain h5py read does
    assert "filter 32001 (blosc)" in outcome["error"]
    assert 'pip install "episodata[lewm]"' in outcome["error"]
    assert "hdf5plugin" in outcome["error"]
    assert not outcome["destination"]


WITHOUT_H5PY = """
import json, sys
sys.modules["h5py"] = None
import episodata
from episodata_core.errors import MissingDependencyError
try:
    episodata.import_dataset("lewm", "whatever.h5")
except MissingDependencyError as err:
    print(json.dumps({"message": str(err)}))
"""


def test_missing_h5py_names_the_install_command():
    result = subprocess.run(
        [sys.executable, "-c", WITHOUT_H5PY], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert 'pip install "episodata[lewm]"' in json.loads(result.stdout)["message"]


def test_appending_a_different_schema_is_refused(sources):
    path, _ = swm_tiny(sources)
    dataset, _ = episodata.import_dataset("lewm", path)
    with pytest.raises(FormatError, match="does not fit the destination's schema"):
        episodata.import_dataset("lewm", path, dataset, exclude=["pixels"])
    assert len(dataset) == 3


def test_unsupported_dtypes_name_the_fix(tmp_path):
    arrays = {
        "ep_len": np.array([2], dtype=np.int32),
        "ep_offset": np.array([0], dtype=np.int64),
        "action": np.array([[0.0], [np.nan]], dtype=np.float32),
    }
    path = write_swm(tmp_path / "compound.h5", arrays)
    with h5py.File(path, "a") as handle:
        handle["pair"] = np.zeros(2, dtype=[("a", "i4"), ("b", "f4")])
    with pytest.raises(FormatError, match=r"column 'pair' .* exclude=\['pair'\]"):
        episodata.import_dataset("lewm", path)
