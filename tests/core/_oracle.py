"""Episodes built from their id alone: the oracle of the lock and bulk-write tests.

Child processes import this module too, so parent and child agree on every value
without sharing anything but an id.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

from episodata import Dataset, DatasetSchema, FieldSpec

HERE = Path(__file__).parent

SCHEMA = DatasetSchema(
    [
        FieldSpec("state", shape=(2,), dtype="float32"),
        FieldSpec("action", shape=(), dtype="int64", role="action"),
        FieldSpec("reward", shape=(), dtype="float32", role="reward"),
    ]
)


def steps_of(i: int) -> int:
    return 2 + i % 4


def flags_of(i: int) -> tuple[bool, bool]:
    """(terminated, truncated): both kinds of ends, and episodes that simply stopped."""
    return i % 3 == 0, i % 3 == 1


def observations(i: int) -> np.ndarray:
    return (i * 100 + np.arange((steps_of(i) + 1) * 2, dtype=np.float32)).reshape(-1, 2)


def episode(i: int) -> dict[str, Any]:
    """Episode ``i`` as a bulk dict."""
    obs = observations(i)
    terminated, truncated = flags_of(i)
    return {
        "initial_observation": {"state": obs[0]},
        "observations": {"state": obs[1:]},
        "actions": np.arange(steps_of(i), dtype=np.int64) + i,
        "rewards": np.full(steps_of(i), i, dtype=np.float32),
        "terminated": terminated,
        "truncated": truncated,
    }


def assert_episode(dataset: Dataset, i: int, *, ongoing: bool = False) -> None:
    """Episode ``i`` of ``dataset`` holds exactly :func:`episode` ``(i)``."""
    read = dataset.episode(i)
    flags = (False, False) if ongoing else flags_of(i)
    assert (len(read), read.ongoing, read.terminated, read.truncated) == (
        steps_of(i),
        ongoing,
        *flags,
    ), f"episode {i}"
    rows = read.read().buffers
    np.testing.assert_array_equal(rows["observation/state"], observations(i), strict=True)
    np.testing.assert_array_equal(rows["action/action"][1:], np.arange(steps_of(i)) + i)
    np.testing.assert_array_equal(rows["reward/reward"][1:], np.full(steps_of(i), i, np.float32))


def assert_dataset(dataset: Dataset, count: int, ongoing: frozenset[int] = frozenset()) -> None:
    """``dataset`` holds episodes ``0..count-1`` of the oracle, and nothing else."""
    assert dataset.num_episodes == count
    for i in range(count):
        assert_episode(dataset, i, ongoing=i in ongoing)


def child(code: str, *args: str, **popen: Any) -> subprocess.Popen[str]:
    """A Python child process running ``code`` with this folder importable."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path])}
    return subprocess.Popen([sys.executable, "-c", code, *args], env=env, text=True, **popen)


def run_child(code: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a child process to the end; its output is captured."""
    process = child(code, *args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = process.communicate(timeout=timeout)
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)
