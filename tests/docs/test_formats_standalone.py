"""The reading examples of docs/formats.md work without episodata.

The document's setup block writes the datasets with episodata; each block marked
``<!-- standalone -->`` then runs in a fresh interpreter in which importing anything
named ``episodata*`` fails, so the layouts really are readable by another tool.
"""

from __future__ import annotations

import subprocess
import sys
from typing import TYPE_CHECKING

import pytest
from _doc_blocks import PYTHON, ROOT, parse, run_python

if TYPE_CHECKING:
    from pathlib import Path

STANDALONE = "<!-- standalone -->"

# refuse every episodata distribution's modules before the example runs
_BLOCK_EPISODATA = """\
import importlib.abc
import sys


class _NoEpisodata(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0].startswith("episodata"):
            raise ImportError(f"{name}: the formats.md readers must not need episodata")
        return None


sys.meta_path.insert(0, _NoEpisodata())
"""

BLOCKS = parse(ROOT / "docs" / "formats.md")
READERS = [b for b in BLOCKS if b.marker == STANDALONE]


def test_there_are_readers_for_every_layout() -> None:
    text = "\n".join(b.code for b in READERS)
    for needle in ("demo-zarr", "demo-npz", "demo-segments"):
        assert needle in text
    assert all(b.language in PYTHON for b in READERS)


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("formats")
    namespace: dict[str, object] = {"__name__": "__main__"}
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(folder)
        for block in BLOCKS:
            if block.language in PYTHON and block.marker != STANDALONE:
                run_python(block, namespace)
    return folder


@pytest.mark.parametrize("block", READERS, ids=[b.where for b in READERS])
def test_reader_runs_without_episodata(block, written: Path) -> None:
    code = _BLOCK_EPISODATA + "\n" * max(block.line - 15, 1) + block.code
    result = subprocess.run(
        [sys.executable, "-W", "error", "-c", code],
        cwd=written,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, f"{block.where}:\n{result.stdout}\n{result.stderr}"
    assert result.stdout.strip(), "the example prints what it read"
