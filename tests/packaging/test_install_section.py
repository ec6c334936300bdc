"""The README's install section installs this project, as written, outside the repository.

The block is copied out of README.md and run in bash: in a copy of the repository's tracked
files (so the build writes nothing into the checkout), with ``HOME`` in a temporary folder
(so ``~/.venvs/episodata`` is a fresh environment) and uv's own cache kept (so the
third-party wheels come from it, not from a download). It must end with the quick start
running in that environment, on code that reports version 0.3.0.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from tests.docs._doc_blocks import parse

ROOT = Path(__file__).resolve().parents[2]
MARKER = "<!-- no-run: tests/packaging/test_install_section.py"


def _install_block() -> str:
    blocks = [
        block
        for block in parse(ROOT / "README.md")
        if block.marker is not None and block.marker.startswith(MARKER)
    ]
    assert len(blocks) == 1, "README.md has one install block marked for this test"
    return blocks[0].code


def _tracked_copy(target: Path) -> None:
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.split(b"\0")
    for name in filter(None, listed):
        source = ROOT / os.fsdecode(name)
        if source.is_file():  # a file deleted in the work tree but not yet in the index
            (target / os.fsdecode(name)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / os.fsdecode(name))


def test_the_install_section_installs_this_project(tmp_path: Path) -> None:
    block = _install_block()
    assert "pip install episodata\n" not in block.replace('"', "")  # the index has 0.2.0
    checkout, home = tmp_path / "clone", tmp_path / "home"
    home.mkdir()
    _tracked_copy(checkout)
    uv = shutil.which("uv")
    assert uv is not None, "the test command runs under uv"
    cache = subprocess.run([uv, "cache", "dir"], capture_output=True, text=True, check=True)
    environ = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("VIRTUAL_ENV", "UV_PROJECT", "PYTHONPATH"))
    }
    environ |= {"HOME": str(home), "UV_CACHE_DIR": cache.stdout.strip(), "PATH": environ["PATH"]}
    script = f"set -euo pipefail\ncd {checkout}\n{block}\n"
    run = subprocess.run(
        ["bash", "-c", script],
        check=False,
        env=environ,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "episodes" in run.stdout
    assert "quickstart-cartpole" in run.stdout
    python = home / ".venvs" / "episodata" / "bin" / "python"
    versions = subprocess.run(
        [
            str(python),
            "-c",
            (
                "import importlib.metadata as m, episodata_core, episodata_zarr;"
                "print(m.version('episodata'), episodata_core.__version__,"
                " episodata_zarr.__version__, episodata_core.__file__)"
            ),
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    ).stdout.split()
    assert versions[:3] == ["0.3.0", "0.3.0", "0.3.0"]
    # installed from the wheels into the fresh environment, not a link to the checkout
    assert versions[3].startswith(str(home)), versions[3]
