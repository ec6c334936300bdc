"""The plugin is light: importing it, or episodata.ray, or listing executors imports no Ray."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

PROBE = """
import json, sys
import episodata_ray, episodata.ray
from episodata_core import registry
cls = registry.get_executor("ray")
print(json.dumps({"ray": "ray" in sys.modules, "cls": cls.__name__,
                  "same": episodata.ray.read_windows is episodata_ray.read_windows}))
"""


def test_importing_the_plugin_imports_no_ray():
    result = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=False, timeout=120
    )
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout.splitlines()[-1])
    assert found == {"ray": False, "cls": "RayExecutor", "same": True}


def test_an_unknown_executor_lists_the_installed_ones(tmp_path):
    from episodata_core.errors import SchemaError
    from episodata_core.pipeline import Pipeline, load_config

    text = '[source]\nimporter = "d4rl"\npath = "x.hdf5"\n[executor]\nname = "dask"\n'
    with pytest.raises(SchemaError, match=r"executor\.name: no executor named 'dask'.*'ray'"):
        Pipeline(load_config(text)).validate()


def test_executor_options_are_validated_with_their_location():
    from episodata_core.errors import SchemaError
    from episodata_core.pipeline import Pipeline, load_config

    text = (
        '[source]\nimporter = "d4rl"\npath = "x.hdf5"\n[executor]\nname = "ray"\nadress = "auto"\n'
    )
    with pytest.raises(SchemaError, match=r"executor\.options.*adress"):
        Pipeline(load_config(text)).validate()
