"""LeRobot 0.6.1's own v2.1 -> v3.0 converter reads the v2.1 folders the tests make (slow).

It checks the test support (``lerobot_v2.make_v2``) against LeRobot itself: the converter
accepts the folder, and our import of the v2.1 folder equals our import of the v3.0
folder LeRobot made of it, exactly (the converter concatenates the mp4s without
re-encoding). LeRobot runs in its own venv (``lerobot_python``, see
test_lerobot_loads_export.py).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import textwrap
from typing import TYPE_CHECKING

import numpy as np
import pytest
from lerobot_fixtures import LENGTHS
from lerobot_v2 import make_v2

from episodata_core.transfer import import_dataset

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.slow

CONVERT = textwrap.dedent(
    """
    import sys
    from lerobot.scripts.convert_dataset_v21_to_v30 import convert_dataset

    convert_dataset("local/episodata-v21", root=sys.argv[1], push_to_hub=False,
                    force_conversion=True)
    """
)


@pytest.mark.parametrize("name", ["pendulum-images", "pendulum-video"])
def test_lerobots_converter_gives_the_same_episodes(
    lerobot_python: str, tmp_path: Path, name: str
) -> None:
    v21 = make_v2(name, tmp_path / "ours")
    converted = tmp_path / "lerobot" / v21.name
    shutil.copytree(v21, converted)  # the converter moves the folder it converts
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    result = subprocess.run([lerobot_python, "-c", CONVERT, str(converted)], capture_output=True,
                            text=True, check=False, env=env)  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    ours, _ = import_dataset("lerobot", v21)
    theirs, _ = import_dataset("lerobot", converted)
    assert theirs.manifest.metadata["imports"][0]["source"]["codebase_version"] == "v3.0"
    assert ours.schema == theirs.schema
    for e in range(len(LENGTHS)):
        a, b = ours.episode(e).read(), theirs.episode(e).read()
        for key in ("state", "image"):
            np.testing.assert_array_equal(a.all_obs[key], b.all_obs[key])
        np.testing.assert_array_equal(a.action, b.action)
        np.testing.assert_array_equal(a.reward, b.reward)
