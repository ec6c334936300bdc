"""The plugin's own verb, ``episodata hdf5-commit``, run as a real ``episodata`` process."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from typing import TYPE_CHECKING

import numpy as np
from episodata import Dataset, DatasetSchema, FieldSpec
from episodata_core.testing import CommandTests

from episodata_plugin_example._command import CommitCommand

if TYPE_CHECKING:
    from pathlib import Path

SCHEMA = DatasetSchema(
    [
        FieldSpec("state", shape=(2,), dtype="float32"),
        FieldSpec("action", role="action", shape=(), dtype="int64"),
    ]
)


def _episodata(*args: str) -> subprocess.CompletedProcess[str]:
    # the console script when it is on PATH, else the same entry through -m
    script = shutil.which("episodata")
    command = [script] if script else [sys.executable, "-m", "episodata_core.cli"]
    return subprocess.run(
        [*command, *args], capture_output=True, text=True, timeout=120, check=False
    )


def test_help_lists_the_third_party_verb() -> None:
    done = _episodata("--help")

    assert (done.returncode, done.stderr) == (0, "")
    assert re.search(
        r"^    hdf5-commit\n\s+print the committed episodes", done.stdout, re.MULTILINE
    )
    assert "[episodata-plugin-example]" in done.stdout


def test_the_verb_reads_the_commit_counter_of_a_real_file(tmp_path: Path) -> None:
    lengths = [3, 5, 2]
    path = tmp_path / "ds"
    with Dataset.create(SCHEMA, path, backend="hdf5") as dataset:
        for n in lengths:
            dataset.add_episode(
                {
                    "initial_observation": {"state": np.zeros(2, np.float32)},
                    "observations": {"state": np.ones((n, 2), np.float32)},
                    "actions": np.arange(n, dtype=np.int64),
                    "terminated": True,
                }
            )

    done = _episodata("hdf5-commit", str(path))

    assert (done.returncode, done.stderr) == (0, "")
    lines = done.stdout.splitlines()
    # one row per step plus the reset row of each episode (the layout of docs/formats.md)
    assert lines[0] == f"committed: {len(lengths)} episodes, {sum(lengths) + len(lengths)} rows"
    assert set(lines[1:]) >= {"field: observation/state", "field: action/action"}


def test_a_folder_without_data_h5_is_a_one_line_error(tmp_path: Path) -> None:
    done = _episodata("hdf5-commit", str(tmp_path))

    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr == (
        f"episodata: error: {tmp_path / 'data.h5'} does not exist; pass the folder of a "
        'dataset created with backend="hdf5"\n'
    )


class TestCommitCommand(CommandTests[CommitCommand]):
    """The kit's checks of a command plugin: discoverable, named, light, in --help."""

    command_cls = CommitCommand
