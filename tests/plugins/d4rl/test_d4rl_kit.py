"""The D4RL importer under the conformance kit (formats.md §5.1 fixtures and oracles)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from tests.fixtures.hdf5_sources import (
    antmaze_like,
    d4rl_bad,
    d4rl_tiny,
    d4rl_v0,
    maze2d_like,
)

from episodata_core.errors import FormatError
from episodata_core.testing import BadSource, ExpectedEpisode, ExpectedImport, ImporterTests
from episodata_d4rl import D4RLImporter

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


class TestD4RLImporterKit(ImporterTests[D4RLImporter]):
    importer_cls = D4RLImporter

    def import_cases(self, directory: Path) -> list[tuple[Path, ExpectedImport]]:
        built = [
            d4rl_tiny(directory),  # next_observations: every step kept
            d4rl_tiny(directory, case="B"),  # no next_observations: last steps dropped
            d4rl_tiny(directory, timeout_at_3=True),  # terminated and truncated
            d4rl_v0(directory, max_episode_steps=None),  # (N,1) columns, warns no_timeouts
            maze2d_like(directory),
            antmaze_like(directory),
        ]
        return [(path, expected_import(oracle)) for path, oracle in built]

    def bad_sources(self, directory: Path) -> list[BadSource]:
        sources = []
        # terminals_value_2 passes read_schema and fails in import_into (after the
        # destination was created); the others fail in read_schema
        for case in ("terminals_value_2", "actions_11_rows", "text_file"):
            path, fragment = d4rl_bad(directory, case)
            sources.append(BadSource(path, FormatError, re.escape(fragment)))
        return sources
