"""Malformed D4RL files: the error type, a message naming the key, nothing written."""

from __future__ import annotations

import json
import subprocess
import sys

import h5py
import numpy as np
import pytest
from tests.fixtures.hdf5_sources import BAD_D4RL, d4rl_bad, d4rl_tiny

import episodata
from episodata_core.errors import EpisodataError, FormatError
from episodata_core.registry import get_backend


def _persistent_backend():
    for name in ("zarr", "npz_directory"):
        try:
            get_backend(name)
        except EpisodataError:
            continue
        return name
    pytest.skip("no persistent backend is usable here")


@pytest.mark.parametrize("case", BAD_D4RL)
def test_bad_file_raises_and_leaves_no_destination(sources, tmp_path, case):
    path, fragment = d4rl_bad(sources, case)
    destination = tmp_path / "out"
    with pytest.raises(FormatError, match=fragment) as caught:
        episodata.import_dataset("d4rl", path, destination, backend=_persistent_backend())
    assert str(path) in str(caught.value)  # the message names the file
    assert not destination.exists()


@pytest.mark.parametrize("case", ["terminals_value_2", "actions_11_rows"])
def test_bad_file_leaves_an_appended_dataset_unchanged(sources, case):
    good, _ = d4rl_tiny(sources, case="B")
    dataset, _ = episodata.import_dataset("d4rl", good)
    path, fragment = d4rl_bad(sources, case)
    with pytest.raises(FormatError, match=fragment):
        episodata.import_dataset("d4rl", path, dataset)
    assert len(dataset) == 3
    assert len(dataset.manifest.metadata["imports"]) == 1


def test_flag_values_name_the_offending_rows(sources):
    path, _ = d4rl_bad(sources, "terminals_value_2")
    with pytest.raises(FormatError, match=r"'terminals' must hold bool or 0/1.*row 4: 2"):
        episodata.import_dataset("d4rl", path)


def test_row_count_error_lists_every_key(sources):
    path, _ = d4rl_bad(sources, "actions_11_rows")
    with pytest.raises(FormatError, match=r"observations: 12, actions: 11, rewards: 12"):
        episodata.import_dataset("d4rl", path)


def test_selected_infos_need_n_rows(tmp_path):
    path, _ = d4rl_tiny(tmp_path)
    with h5py.File(path, "a") as handle:
        del handle["infos/qpos"]
        handle["infos/qpos"] = np.zeros((11, 1), np.float32)
    with pytest.raises(FormatError, match=r"infos/qpos: 11"):
        episodata.import_dataset("d4rl", path)
    dataset, _ = episodata.import_dataset("d4rl", path, infos=["action_log_probs"])
    assert "info/qpos" not in dataset.schema


def test_next_observations_must_match_the_observations_shape(tmp_path):
    path, _ = d4rl_tiny(tmp_path)
    with h5py.File(path, "a") as handle:
        del handle["next_observations"]
        handle["next_observations"] = np.zeros((12, 3), np.float32)
    with pytest.raises(FormatError, match=r"'next_observations' has shape \(12, 3\)"):
        episodata.import_dataset("d4rl", path)
    dataset, _ = episodata.import_dataset("d4rl", path, use_next_observations=False)
    assert len(dataset) == 3


def test_a_timeouts_group_is_rejected(tmp_path):
    path, _ = d4rl_tiny(tmp_path)
    with h5py.File(path, "a") as handle:
        del handle["timeouts"]
        handle.create_group("timeouts")
    with pytest.raises(FormatError, match=r"'timeouts' is a group"):
        episodata.import_dataset("d4rl", path)


def test_a_missing_file_is_a_file_not_found_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such file"):
        episodata.import_dataset("d4rl", tmp_path / "absent.hdf5")


def test_appending_a_different_schema_is_refused(sources):
    path, _ = d4rl_tiny(sources)
    dataset, _ = episodata.import_dataset("d4rl", path)
    with pytest.raises(FormatError, match="does not fit the destination's schema"):
        episodata.import_dataset("d4rl", path, dataset, infos=False)
    assert len(dataset) == 3


WITHOUT_H5PY = """
import json, sys
sys.modules["h5py"] = None  # makes `import h5py` fail as if it were absent
import episodata
from episodata_core.errors import MissingDependencyError
try:
    episodata.import_dataset("d4rl", "whatever.hdf5")
except MissingDependencyError as err:
    print(json.dumps({"message": str(err), "import_error": isinstance(err, ImportError)}))
"""


def test_missing_h5py_names_the_install_command():
    result = subprocess.run(
        [sys.executable, "-c", WITHOUT_H5PY], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert 'pip install "episodata[d4rl]"' in report["message"]
    assert report["import_error"]


def test_importing_the_plugin_does_not_import_h5py():
    code = (
        "import sys, episodata_d4rl, episodata_lewm; "
        "print(sorted(m for m in ('h5py', 'hdf5plugin') if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"
