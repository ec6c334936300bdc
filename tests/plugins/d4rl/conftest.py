from __future__ import annotations

import sys
from pathlib import Path

import pytest

# tests/fixtures is shared by several test folders; make the repository root importable
_ROOT = str(Path(__file__).resolve().parents[3])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)


@pytest.fixture(scope="session")
def sources(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A session folder for fixture files; builders name their files uniquely."""
    return tmp_path_factory.mktemp("d4rl-sources")
