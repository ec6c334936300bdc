"""A Lance dataset takes the HDF5 path's options, roles and validation (issue 21, part 1).

The oracle is each recording's expected file (rows read by a separate script), never the
importer.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from tests.plugins.lewm.swm_recordings import recording, rewrite

import episodata
from episodata_core.errors import FormatError

MAIN = "pusht-swmmain.lance"
_OPTIONS = {
    "episodes": [1, 3],
    "exclude": ["goal", "render_time"],
    "roles": {"block_pose": "observation", "proprio": "info"},
}


@pytest.mark.parametrize("name", [MAIN, "pusht-swmmain.h5"])
def test_episodes_exclude_and_roles_select_the_same_rows_in_both_formats(name):
    rec = recording(name)
    dataset, report = episodata.import_dataset("lewm", str(rec.path), **_OPTIONS)
    keys = set(dataset.schema.qualified_keys)
    assert {"observation/block_pose", "info/proprio", "observation/pixels"} <= keys
    assert not {k for k in keys if k.endswith(("/goal", "/render_time"))}
    assert report.episodes_imported == 2
    assert report.episodes_skipped == {"not_selected": 2}
    for position, e in enumerate(_OPTIONS["episodes"]):
        segment = dataset.episode(position).read()
        for key, column in (("observation/block_pose", "block_pose"), ("info/proprio", "proprio")):
            want = rec.rows(e, column)
            np.testing.assert_array_equal(segment.buffers[key], want, err_msg=key)
        np.testing.assert_array_equal(segment.action, rec.expected[f"ep{e}/action"])
    record = dataset.manifest.metadata["imports"][0]
    assert record["episodes"]["source_episode"] == _OPTIONS["episodes"]


def test_columns_keeps_the_named_ones_and_the_action():
    rec = recording(MAIN)
    dataset, _ = episodata.import_dataset("lewm", str(rec.path), columns=["state", "reward"])
    assert set(dataset.schema.qualified_keys) == {
        "observation/state",
        "action/action",
        "reward/reward",
    }
    np.testing.assert_array_equal(dataset.episode(2).read().reward, rec.expected["ep2/reward"])


def _nan_action(row):
    def change(table):
        values = table.column("action").combine_chunks().flatten().to_numpy().copy()
        values[2 * row : 2 * row + 2] = np.nan
        array = pa.FixedSizeListArray.from_arrays(pa.array(values), 2)
        return table.set_column(table.schema.get_field_index("action"), "action", array)

    return change


def test_a_nan_action_inside_an_episode_is_refused_as_in_hdf5_files(tmp_path):
    """Rule 8 of the HDF5 path: only the row the alignment leaves out may be NaN."""
    path = rewrite(MAIN, tmp_path, "nan-action.lance", _nan_action(25))  # episode 2, row 5
    target = tmp_path / "out"
    with pytest.raises(FormatError, match=r"NaN action at row 25 inside episode 2"):
        episodata.import_dataset("lewm", str(path), target)
    assert not target.exists()
    # validate='structure' imports it unchecked, as it does an HDF5 file
    dataset, _ = episodata.import_dataset("lewm", str(path), validate="structure")
    assert np.isnan(dataset.episode(2).read().action[5]).all()
