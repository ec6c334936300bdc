"""The LeWM importer under the conformance kit (formats.md §5.2 fixtures and oracles)."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import TYPE_CHECKING

from tests.fixtures.hdf5_sources import (
    swm_action_in,
    swm_bad,
    swm_preset,
    swm_pusht_style,
    swm_tiny,
)
from tests.plugins.lewm.swm_recordings import LANCE, lance_expected_import, recording
from tests.plugins.lewm.test_lewm_lance_bad_input import CASES

from episodata_core.testing import BadSource, ExpectedEpisode, ExpectedImport, ImporterTests
from episodata_core.testing.importer import HEAVY_MODULES
from episodata_lewm import LeWMImporter

if TYPE_CHECKING:
    from pathlib import Path

    from tests.fixtures.hdf5_sources import SourceOracle


def expected_import(oracle: SourceOracle) -> ExpectedImport:
    """The shared fixtures' oracle in the kit's terms (same field names, nothing recomputed)."""
    return ExpectedImport(
        episodes=[ExpectedEpisode(**vars(episode)) for episode in oracle.episodes],
        options=oracle.options,
        report=oracle.report,
        provenance=oracle.provenance,
        source=oracle.source,
        warnings=oracle.warnings,
    )


class TestLeWMImporterKit(ImporterTests[LeWMImporter]):
    importer_cls = LeWMImporter

    def import_cases(self, directory: Path) -> list[tuple[Path, ExpectedImport]]:
        built = [
            swm_tiny(directory),
            swm_tiny(directory, form="blosc"),
            swm_tiny(directory, form="chunk1"),  # no ep_idx
            swm_pusht_style(directory),  # no reward or flags, finite last actions
            swm_action_in(directory),
            swm_preset(directory, "tworoom"),  # 64x64 drawings, Blosc, swm <= 0.0.5 layout
            swm_preset(directory, "cube"),  # strings, int64 ids, float64 columns
        ]
        cases = [(path, expected_import(oracle)) for path, oracle in built]
        # a read budget below one pixel row (192 bytes): every batch is a single row
        path, oracle = swm_tiny(directory, form="gzip")
        small = replace(expected_import(oracle), options={"read_budget_bytes": 100})
        return [*cases, (path, small)]

    def bad_sources(self, directory: Path) -> list[BadSource]:
        # nan_action_inside passes read_schema and fails in import_into's pre-pass (after
        # the destination was created); the others fail in read_schema
        cases = ("offset_not_cumsum", "nan_action_inside", "first_chunk_only", "text_file")
        return [
            BadSource(path, error, re.escape(fragment))
            for path, error, fragment in (swm_bad(directory, case) for case in cases)
        ]


class TestLeWMLanceKit(ImporterTests[LeWMImporter]):
    """stable-worldmodel's own Lance recordings (both releases) under the kit."""

    importer_cls = LeWMImporter
    heavy_modules = (*HEAVY_MODULES, "lance", "pyarrow", "PIL")

    def import_cases(self, directory: Path) -> list[tuple[Path, ExpectedImport]]:
        cases = [(recording(name).path, lance_expected_import(name)) for name in LANCE]
        # a read budget of one pixel row: every window is a single row of an episode
        small = lance_expected_import(LANCE[1], read_budget_bytes=3072)
        return [*cases, (recording(LANCE[1]).path, small)]

    def bad_sources(self, directory: Path) -> list[BadSource]:
        directory.mkdir(parents=True, exist_ok=True)
        cases = ("no_episode_idx", "truncated_data_file", "zeroed_jpeg", "fractional_id")
        made = [(case, *CASES[case]) for case in cases]
        return [
            BadSource(make(directory / case), error, re.escape(fragment))
            for case, make, error, fragment in made
        ]
