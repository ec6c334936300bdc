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
from episodata_core.testing.concurrent_readers import ConcurrentReaderTests
from episodata_core.testing.exporter import ExportCase, ExporterTests, FailingExport
from episodata_core.testing.importer import (
    BadSource,
    ExpectedEpisode,
    ExpectedImport,
    ImporterTests,
    assert_dataset_matches,
    assert_episode_matches,
    assert_report_matches,
)
from episodata_core.testing.sampler import SamplerTests

__all__ = [
    "BackendTests",
    "BadSource",
    "ConcurrentReaderTests",
    "ExpectedEpisode",
    "ExpectedImport",
    "ExportCase",
    "ExporterTests",
    "FailingExport",
    "ImporterTests",
    "PersistentBackendTests",
    "SamplerTests",
    "assert_dataset_matches",
    "assert_episode_matches",
    "assert_report_matches",
    "example_rows",
    "example_schema",
]
