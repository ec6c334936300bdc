"""The plugin is found the way every plugin is found: its entry point, by name."""

from __future__ import annotations

from importlib import metadata
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
from episodata import Dataset, Pipeline
from episodata_core.errors import SchemaError
from episodata_core.registry import get_backend, list_plugins

import episodata_plugin_example
from _helpers import run_python
from episodata_plugin_example import HDF5Backend

if TYPE_CHECKING:
    from pathlib import Path

EPISODE: dict[str, Any] = {
    "initial_observation": {"state": np.array([1, 2], dtype=np.float32)},
    "observations": {"state": np.array([[3, 4], [5, 6], [7, 8]], dtype=np.float32)},
    "actions": np.array([1, 0, 1], dtype=np.int64),
    "rewards": np.array([0.5, 1.5, 2.5], dtype=np.float32),
    "terminated": True,
}


def test_the_entry_point_is_in_the_installed_metadata() -> None:
    (entry,) = metadata.entry_points(group="episodata.backends", name="hdf5")
    assert entry.value == "episodata_plugin_example:HDF5Backend"
    assert entry.dist is not None
    assert entry.dist.name == "episodata-plugin-example"


def test_the_registry_lists_and_returns_it_by_name() -> None:
    (info,) = [info for info in list_plugins("backend") if info.name == "hdf5"]
    assert info.distribution == "episodata-plugin-example"
    assert info.version == episodata_plugin_example.__version__
    assert get_backend("hdf5") is HDF5Backend


def test_listing_and_selecting_it_import_no_h5py() -> None:
    code = """
    import sys
    from episodata_core.registry import get_backend, list_plugins

    assert "hdf5" in [info.name for info in list_plugins("backend")]
    assert "h5py" not in sys.modules, "listing imported h5py"
    get_backend("hdf5")
    assert "h5py" not in sys.modules, "selecting imported h5py"
    print("light")
    """
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "light"


def test_the_public_api_uses_it_by_name(tmp_path: Path) -> None:
    dataset = Dataset.from_episodes([EPISODE], path=str(tmp_path / "ds"), backend="hdf5")
    dataset.close()
    reopened = Dataset.open(tmp_path / "ds", read_only=True)
    assert isinstance(reopened.backend, HDF5Backend)
    assert reopened.manifest.backend == "hdf5"
    assert [p.distribution for p in reopened.manifest.provenance.plugins] == [
        "episodata-plugin-example"
    ]
    segment = reopened.episode(0).read()
    np.testing.assert_array_equal(segment.next_obs.state, EPISODE["observations"]["state"])
    np.testing.assert_array_equal(segment.action, EPISODE["actions"])
    reopened.close()


def test_a_pipeline_stores_with_it_by_name(tmp_path: Path) -> None:
    Dataset.from_episodes([EPISODE, EPISODE], path=str(tmp_path / "source")).close()
    config = tmp_path / "pipeline.toml"
    config.write_text(
        '[source]\ndataset = "source"\n\n'
        '[store]\nbackend = "hdf5"\npath = "stored"\noptions = { chunk_bytes = 4096 }\n'
    )
    pipeline = Pipeline.from_toml(config)
    assert any("(hdf5)" in step for step in pipeline.validate())
    result = pipeline.run(progress=False)
    assert isinstance(result.dataset.backend, HDF5Backend)
    assert result.dataset.num_episodes == 2
    plugins = result.dataset.manifest.metadata["pipeline"]["plugins"]
    assert plugins["episodata-plugin-example"] == episodata_plugin_example.__version__
    result.dataset.close()


def test_a_pipeline_reports_bad_options_with_their_location(tmp_path: Path) -> None:
    config = tmp_path / "pipeline.toml"
    config.write_text(
        '[source]\ndataset = "source"\n\n'
        '[store]\nbackend = "hdf5"\npath = "stored"\noptions = { chunk_bytes = 16 }\n'
    )
    with pytest.raises(SchemaError, match=r"store\.options\.chunk_bytes"):
        Pipeline.from_toml(config).validate()
