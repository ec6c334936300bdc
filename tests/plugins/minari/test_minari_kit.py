"""The Minari importer under the conformance kit (hand-written fixtures and their oracles)."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import TYPE_CHECKING

from minari_fixtures import (
    bad,
    dict_case,
    dict_episodes,
    oracle,
    tiny,
    tiny_episodes,
    tuple_case,
    tuple_episodes,
)

from episodata_core.testing import BadSource, ExpectedImport, ImporterTests
from episodata_minari import MinariImporter

if TYPE_CHECKING:
    from pathlib import Path


class TestMinariImporterKit(ImporterTests[MinariImporter]):
    importer_cls = MinariImporter

    def import_cases(self, directory: Path) -> list[tuple[Path, ExpectedImport]]:
        version = {"minari_version": "0.5.1"}
        tiny_folder, tiny_expected = oracle(tiny_episodes(), tiny(directory / "tiny-v0"))
        cases = [
            (tiny_folder, replace(tiny_expected, source={**tiny_expected.source, **version})),
            # the data/ folder and main_data.hdf5 itself are sources too
            (tiny_folder / "data", tiny_expected),
            (tiny_folder / "data" / "main_data.hdf5", tiny_expected),
            oracle(dict_episodes(), dict_case(directory / "dict-v0")),
            oracle(tuple_episodes(), tuple_case(directory / "tuple-v0")),
        ]
        # an unknown minari_version imports, with a warning
        folder, expected = oracle(
            tiny_episodes(), tiny(directory / "future-v0", minari_version="0.9.0")
        )
        cases.append((folder, replace(expected, warnings=frozenset({"unknown_minari_version"}))))
        return cases

    def bad_sources(self, directory: Path) -> list[BadSource]:
        # early_flag and flag_value_2 pass read_schema and fail in import_into, after the
        # destination was created; the others fail in read_schema. All but arrow have the
        # schema of the first case, so the kit's append test reaches the importer's checks
        cases = (
            "total_steps_mismatch",
            "actions_t_plus_1",
            "early_flag",
            "flag_value_2",
            "arrow",
        )
        made = [bad(directory, case) for case in cases]
        return [BadSource(b.source, b.error, re.escape(b.fragment), b.options) for b in made]
