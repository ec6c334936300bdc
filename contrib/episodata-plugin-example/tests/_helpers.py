"""Shared helpers of the plugin's tests: subprocesses and episode content by id."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any

from episodata_core.testing import example_rows

if TYPE_CHECKING:
    import numpy.typing as npt
    from episodata_core.protocols import StorageBackend
    from episodata_core.schema import DatasetSchema

HERE = Path(__file__).resolve().parent


def run_python(code: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter of this environment (``_helpers`` importable)."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=env,
    )


def start_python(code: str, *args: str) -> subprocess.Popen[str]:
    """Start ``code`` in a fresh interpreter; its stdout is a text pipe."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def sha256(path: Path) -> str:
    """Digest of a file's bytes."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def episode_rows(schema: DatasetSchema, episode: int) -> dict[str, npt.NDArray[Any]]:
    """Episode ``episode`` of the test writers: any process can rebuild its rows."""
    return example_rows(schema, 3 + episode % 5, seed=500 + episode)


def assert_episode(
    backend: StorageBackend, episode: int, rows: dict[str, npt.NDArray[Any]]
) -> None:
    """The stored rows of ``episode`` equal ``rows``."""
    count = len(rows["observation/state"])
    stored = backend.read_rows(episode, 0, count, list(rows))
    for key, values in rows.items():
        assert stored[key].dtype == values.dtype, key
        assert (stored[key] == values).all(), f"episode {episode}, field {key}"
