"""The conformance kit: base test classes that every plugin's tests subclass.

Needs pytest (``pip install "episodata-core[testing]"``; :mod:`.strategies` also needs
Hypothesis). A plugin's tests subclass the class of its kind (``BackendTests``,
``PersistentBackendTests``, ``SamplerTests``, ``ImporterTests``, ``ExporterTests``,
``CommandTests``); each brings the packaging checks of :mod:`.packaging`.
"""

from __future__ import annotations

from episodata_core.testing.backend import BackendTests
from episodata_core.testing.command import CommandTests
from episodata_core.testing.concurrent_readers import ConcurrentReaderTests
from episodata_core.testing.examples import example_rows, example_schema
from episodata_core.testing.exporter import ExportCase, ExporterTests, FailingExport
from episodata_core.testing.importer import ImporterTests
from episodata_core.testing.oracle import (
    BadSource,
    ExpectedEpisode,
    ExpectedImport,
    assert_dataset_matches,
    assert_episode_matches,
    assert_report_matches,
)
from episodata_core.testing.packaging import (
    HEAVY_MODULES,
    PackagingTests,
    check_entry_point_discoverable,
    check_entry_point_is_light,
)
from episodata_core.testing.persistent import PersistentBackendTests
from episodata_core.testing.sampler import SamplerTests

__all__ = [
    "HEAVY_MODULES",
    "BackendTests",
    "BadSource",
    "CommandTests",
    "ConcurrentReaderTests",
    "ExpectedEpisode",
    "ExpectedImport",
    "ExportCase",
    "ExporterTests",
    "FailingExport",
    "ImporterTests",
    "PackagingTests",
    "PersistentBackendTests",
    "SamplerTests",
    "assert_dataset_matches",
    "assert_episode_matches",
    "assert_report_matches",
    "check_entry_point_discoverable",
    "check_entry_point_is_light",
    "example_rows",
    "example_schema",
]
