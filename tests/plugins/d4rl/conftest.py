from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pathlib import Path


@pytest.fixture(scope="session")
def sources(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A session folder for fixture files; builders name their files uniquely."""
    return tmp_path_factory.mktemp("d4rl-sources")
