"""compat.md "Selection": Selection, read_fields and episode_length on every backend."""

from __future__ import annotations

import numpy as np
import pytest

from episodata import Dataset, Selection


def test_selection_length():
    assert Selection(3, 2, 7).length == 5
    with pytest.raises(ValueError, match="before start"):
        Selection(0, 4, 2)


@pytest.mark.parametrize("backend", ["memory", "npz_directory", "zarr"])
def test_read_fields_and_episode_length(backend, tmp_path):
    path = None if backend == "memory" else tmp_path / "ds"
    eps = [
        {"initial_observation": np.float32(0), "observations": np.arange(1, n + 1, dtype=np.float32),
         "actions": np.arange(n) + 10 * i, "terminated": True}
        for i, n in enumerate((4, 2))
    ]  # fmt: skip
    ds = Dataset.from_episodes(eps, path=path, backend=backend)
    assert ds.backend.episode_length(0) == 5
    assert ds.backend.episode_length(1) == 3
    out = ds.backend.read_fields(
        ["action", "observation"], [Selection(1, 0, 3), Selection(0, 2, 5)]
    )
    np.testing.assert_array_equal(out[0]["observation"], [0, 1, 2])
    np.testing.assert_array_equal(out[0]["action"], [0, 10, 11])  # row 0 is the placeholder
    np.testing.assert_array_equal(out[1]["observation"], [2, 3, 4])


def test_zarr_accepts_shard_bytes(tmp_path):
    ep = {"initial_observation": np.float32(0), "observations": np.ones(3, np.float32),
          "actions": np.zeros(3, np.int64)}  # fmt: skip
    ds = Dataset.from_episodes([ep], path=tmp_path / "ds", backend="zarr", shard_bytes=1 << 20)
    assert ds.manifest.backend_options["shard_bytes"] == 1 << 20
    assert Dataset.open(tmp_path / "ds").episode(0).length == 3


def test_gym_unsupported_space_is_schema_and_not_implemented_error():
    from gymnasium import spaces

    from episodata import SchemaError
    from episodata.utils import schema_from_gym_spaces

    with pytest.raises(SchemaError, match="Text") as raised:
        schema_from_gym_spaces(spaces.Text(5), spaces.Discrete(2))
    assert isinstance(raised.value, NotImplementedError)


def test_gym_missing_dependency_names_the_extra():
    import subprocess
    import sys

    probe = (
        "import sys; sys.modules['gymnasium'] = None\n"
        "from episodata.utils import schema_from_gym_spaces\n"
        "try:\n    schema_from_gym_spaces(None, None)\n"
        "except ImportError as err:\n    print(err)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=False)
    assert "episodata[gym]" in out.stdout, out.stderr
