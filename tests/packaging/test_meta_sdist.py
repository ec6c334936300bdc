"""The code-free ``episodata`` distribution packs its metadata, not the repository."""

from __future__ import annotations

import tarfile
from pathlib import Path

from hatchling.builders.sdist import SdistBuilder

ROOT = Path(__file__).resolve().parents[2]


def test_meta_sdist_holds_only_its_metadata(tmp_path):
    (archive,) = SdistBuilder(str(ROOT)).build(directory=str(tmp_path))
    with tarfile.open(archive) as sdist:
        names = {name.split("/", 1)[1] for name in sdist.getnames() if "/" in name}
    assert {"pyproject.toml", "README.md", "PKG-INFO"} <= names
    # the workspace members ship as their own distributions; tests, docs, benchmarks and
    # the lock file stay in the repository
    assert names <= {"pyproject.toml", "README.md", "PKG-INFO", ".gitignore"}, sorted(names)
    assert Path(archive).stat().st_size < 64 * 1024
