"""Fixtures of the lerobot tests."""

from __future__ import annotations

import os
import subprocess

import pytest


@pytest.fixture(scope="session")
def lerobot_python(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The python of a LeRobot 0.6.1 venv: ``EPISODATA_LEROBOT_PYTHON``, else made with uv."""
    given = os.environ.get("EPISODATA_LEROBOT_PYTHON")
    if given:
        return given
    venv = tmp_path_factory.mktemp("lerobot-venv") / "venv"
    subprocess.run(["uv", "venv", "-q", "--python", "3.12", str(venv)], check=True)
    env = {**os.environ, "VIRTUAL_ENV": str(venv)}
    subprocess.run(["uv", "pip", "install", "-q", "lerobot[dataset]==0.6.1"], check=True, env=env)
    return str(venv / "bin" / "python")
