"""The conformance kit: base test classes that every plugin's tests subclass.

Needs pytest (``pip install "episodata-core[testing]"``). See ``BackendTests``.
"""

from __future__ import annotations

from episodata_core.testing.backend import (
    BackendTests,
    PersistentBackendTests,
    example_rows,
    example_schema,
)
from episodata_core.testing.sampler import SamplerTests

__all__ = [
    "BackendTests",
    "PersistentBackendTests",
    "SamplerTests",
    "example_rows",
    "example_schema",
]
