"""stable-worldmodel's own HDF5 recordings (0.1.1 and the fixed upstream) import by default.

Issue 18 item 11: 0.1.1 files lack the reset frame (``step_idx`` starts at 1); they import
with the alignment of the rows they hold and a warning that names the release and the
missing frame; files of the fixed upstream import exactly. The oracle is each file's
``expected.npz`` (rows read with h5py by a separate script) and the env's own log.
"""

from __future__ import annotations

import subprocess
import sys
import warnings

import numpy as np
import pytest
from tests.plugins.lewm.swm_recordings import HDF5, MISSING_RESET, OBSERVATIONS, recording

import episodata

_CONSUMED = ("action", "reward", "terminated", "truncated")


def _import(path, destination=None, **options):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dataset, report = episodata.import_dataset("lewm", path, destination, **options)
    return dataset, report, [str(w.message) for w in caught]


def _check_rows(dataset, rec):
    """Every column of every episode against the expected rows, dtypes included."""
    assert len(dataset) == len(rec.episodes)
    for e, facts in enumerate(rec.episodes):
        episode = dataset.episode(e)
        segment = episode.read()
        assert len(episode) == facts["transitions"] == facts["rows"] - 1
        for column in rec.columns(e):
            if column in _CONSUMED:
                continue
            role = "observation" if column in OBSERVATIONS else "info"
            want = rec.rows(e, column)
            got = segment.buffers[f"{role}/{column}"]
            np.testing.assert_array_equal(got, want, err_msg=f"ep{e}/{column}", strict=True)
        np.testing.assert_array_equal(segment.action, rec.expected[f"ep{e}/action"], strict=True)
        np.testing.assert_array_equal(segment.reward, rec.expected[f"ep{e}/reward"], strict=True)
        assert (episode.terminated, episode.truncated) == (facts["terminated"], facts["truncated"])


@pytest.mark.parametrize("name", HDF5)
def test_hdf5_recording_imports_its_expected_rows_by_default(name):
    rec = recording(name)
    dataset, report, messages = _import(str(rec.path))
    _check_rows(dataset, rec)
    source = dataset.manifest.metadata["imports"][0]["source"]
    if rec.release == "0.1.1":
        # the file's own numbering starts at the first step: no reset row was recorded
        assert [f["first_step_idx"] for f in rec.episodes] == [1] * 4
        (message,) = messages
        assert "stable-worldmodel 0.1.1" in message
        assert "reset frame" in message
        assert [w.code for w in report.warnings] == [MISSING_RESET]
    else:
        assert messages == []
        assert report.warnings == []
    assert source["swm_release"] == rec.release
    assert report.dangling_actions == 0


@pytest.mark.parametrize("name", HDF5)
def test_image_columns_such_as_goal_become_observations(name):
    dataset, _, _ = _import(str(recording(name).path))
    for column in ("goal", "pixels"):
        spec = dataset.schema[f"observation/{column}"]
        assert (spec.shape, spec.dtype, spec.layout) == ((32, 32, 3), "uint8", "HWC")
        assert (spec.low, spec.high) == (0, 255)
    assert "info/goal" not in dataset.schema


def test_0_1_1_hdf5_loses_exactly_the_reset_the_first_action_and_reward():
    """The env's log from the reset: the file starts one step later, and nothing else."""
    rec = recording("pusht-swm0.1.1.h5")
    dataset, _, _ = _import(str(rec.path))
    for e, facts in enumerate(rec.episodes):
        segment = dataset.episode(e).read()
        state, action = rec.truth[f"ep{e}/state"], rec.truth[f"ep{e}/action"]
        lost = facts["lost_in_file"]
        np.testing.assert_allclose(state[0], lost["reset_state"])
        np.testing.assert_allclose(action[0], lost["first_action"])
        np.testing.assert_array_equal(segment.buffers["observation/state"], state[1:])
        np.testing.assert_array_equal(segment.action, action[1:], strict=True)


def test_cli_imports_a_0_1_1_hdf5_file_with_the_warning(tmp_path):
    rec = recording("pusht-swm0.1.1.h5")
    destination = tmp_path / "from-cli"
    command = [sys.executable, "-m", "episodata_core.cli", "import", "lewm", str(rec.path)]
    result = subprocess.run(
        [*command, str(destination)], capture_output=True, text=True, check=False, timeout=300
    )
    assert result.returncode == 0, result.stderr
    # the import summary names the release once (and it is not repeated as a warning)
    output = result.stdout + result.stderr
    assert output.count("stable-worldmodel 0.1.1") == 1
    assert "reset frame" in output
    with episodata.Dataset.open(destination, read_only=True) as dataset:
        _check_rows(dataset, rec)
