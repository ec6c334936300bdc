"""A real install: a fresh virtual environment, the distributions built and installed.

Needs uv (to build the environment offline from its cache) and the episodata
repository around this folder (for episodata-core); skipped otherwise. A third party
would install episodata-core from the package index instead.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PLUGIN = Path(__file__).resolve().parents[1]
CORE = PLUGIN.parents[1] / "episodata_core"

# Runs inside the fresh environment: discovery by name, then a dataset round trip
# through the public API, reopened by what manifest.json names.
PROBE = """
import json, sys
import numpy as np
from episodata_core.registry import get_backend, list_plugins

(info,) = [i for i in list_plugins("backend") if i.name == "hdf5"]
light = "h5py" not in sys.modules
backend = get_backend("hdf5")
light = light and "h5py" not in sys.modules

from episodata import Dataset

episode = {
    "initial_observation": np.zeros(3, dtype=np.float32),
    "observations": np.ones((4, 3), dtype=np.float32),
    "actions": np.arange(4, dtype=np.int64),
    "rewards": np.full(4, 0.5, dtype=np.float32),
    "truncated": True,
}
Dataset.from_episodes([episode], path=sys.argv[1], backend="hdf5").close()
opened = Dataset.open(sys.argv[1], read_only=True)
segment = opened.episode(0).read()
print(json.dumps({
    "distribution": info.distribution,
    "light": light,
    "module": sys.modules[backend.__module__].__file__,
    "backend": type(opened.backend).__name__,
    "actions": segment.action.tolist(),
    "truncated": bool(segment.truncated[-1]),
}))
"""


def _run(*command: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(part) for part in command], capture_output=True, text=True, check=False, timeout=600
    )


def test_installed_distribution_is_found_by_name(tmp_path: Path) -> None:
    uv = os.environ.get("UV") or shutil.which("uv")
    if uv is None:
        pytest.skip("uv is needed to build a fresh environment offline")
    if not (CORE / "pyproject.toml").is_file():
        pytest.skip("episodata-core's source folder is not next to this plugin")
    venv = tmp_path / "venv"
    created = _run(uv, "venv", "--python", sys.executable, venv)
    assert created.returncode == 0, created.stderr
    python = venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    # offline first (everything is in uv's cache after the project's own sync)
    install = _run(uv, "pip", "install", "--offline", "--python", python, CORE, PLUGIN)
    if install.returncode != 0:
        install = _run(uv, "pip", "install", "--python", python, CORE, PLUGIN)
    assert install.returncode == 0, install.stderr
    probe = _run(python, "-c", PROBE, tmp_path / "dataset")
    assert probe.returncode == 0, probe.stderr
    found = json.loads(probe.stdout)
    assert found["distribution"] == "episodata-plugin-example"
    assert found["light"], "discovery or selection imported h5py"
    # imported from the installed wheel, not from this source tree
    assert Path(found["module"]).resolve().is_relative_to(venv.resolve())
    assert found["backend"] == "HDF5Backend"
    assert found["actions"] == [0, 1, 2, 3]
    assert found["truncated"]
