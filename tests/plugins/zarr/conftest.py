from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from _zarr_helpers import image_schema as _image_schema

if TYPE_CHECKING:
    from episodata_core.schema import DatasetSchema


@pytest.fixture
def image_schema() -> DatasetSchema:
    return _image_schema()
