"""The LeRobot importer under the conformance kit, against LeRobot 0.6.1's own datasets."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
from lerobot_fixtures import copy_dataset, edit_info, expected_import, rewrite_data

from episodata_core.errors import FormatError, PartialFileError
from episodata_core.testing import BadSource, ExpectedImport, ImporterTests
from episodata_core.testing.importer import HEAVY_MODULES
from episodata_lerobot import LeRobotImporter

if TYPE_CHECKING:
    from pathlib import Path


def _bad_common(directory: Path, name: str) -> list[BadSource]:
    directory.mkdir(parents=True, exist_ok=True)
    empty = directory / "not-lerobot"
    empty.mkdir()
    (empty / "README.md").write_text("no meta/ here")
    v21 = copy_dataset(name, directory / "v21")
    edit_info(v21, lambda info: info.update(codebase_version="v2.1"))
    cut = copy_dataset(name, directory / "cut")
    data = cut / "data" / "chunk-000" / "file-000.parquet"
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])

    def wider_state(table: pa.Table) -> pa.Table:
        # four values per frame where info.json declares observation.state [3]
        values = np.asarray(table.column("observation.state").to_pylist(), dtype=np.float32)
        wider = np.concatenate([values, values[:, :1]], axis=1)
        column = pa.FixedSizeListArray.from_arrays(pa.array(wider.reshape(-1)), 4)
        index = table.schema.get_field_index("observation.state")
        return table.set_column(index, "observation.state", column)

    shape = copy_dataset(name, directory / "shape")
    rewrite_data(shape, wider_state)

    def early_done(table: pa.Table) -> pa.Table:
        done = table.column("next.done").to_numpy().copy()
        done[2] = True
        index = table.schema.get_field_index("next.done")
        return table.set_column(index, "next.done", pa.array(done))

    early = copy_dataset(name, directory / "early-done")
    rewrite_data(early, early_done)
    return [
        BadSource(empty, FormatError, "not a LeRobot dataset folder: it has no meta/info.json"),
        # a v3 folder labelled v2.1: the v2 layout's meta/*.jsonl are not there
        BadSource(v21, FormatError, r"meta/(episodes|tasks)\.jsonl does not exist; a LeRobot v2\.1 dataset has"),
        BadSource(cut, PartialFileError, "is not a readable parquet file .* cut short"),
        BadSource(shape, FormatError, re.escape("holds 4 value(s) per frame (fixed_size_list<element: float>[4]), but meta/info.json declares shape [3]")),
        BadSource(early, FormatError, re.escape("next.done is True at frame(s) [2] before its last")),
        BadSource(copy_dataset(name, directory / "unknown"), FormatError,
                  re.escape("names episode(s) [7]"), {"episodes": [0, 7]}),
    ]  # fmt: skip


class TestLeRobotImagesKit(ImporterTests[LeRobotImporter]):
    importer_cls = LeRobotImporter
    heavy_modules = (*HEAVY_MODULES, "pyarrow", "av", "PIL")

    def import_cases(self, directory: Path) -> list[tuple[Path, ExpectedImport]]:
        folder = copy_dataset("pendulum-images", directory)
        return [
            (folder, expected_import("pendulum-images")),
            (folder, expected_import("pendulum-images", final_observation="missing")),
            (folder, expected_import("pendulum-images", episodes=(2, 0))),
        ]

    def bad_sources(self, directory: Path) -> list[BadSource]:
        return _bad_common(directory, "pendulum-images")


class TestLeRobotVideoKit(ImporterTests[LeRobotImporter]):
    importer_cls = LeRobotImporter
    heavy_modules = (*HEAVY_MODULES, "pyarrow", "av", "PIL")
    persistent_backends = ("npz_directory",)  # zarr: the images kit covers it, video costs

    def import_cases(self, directory: Path) -> list[tuple[Path, ExpectedImport]]:
        folder = copy_dataset("pendulum-video", directory)
        return [
            (folder, expected_import("pendulum-video")),
            (folder, expected_import("pendulum-video", episodes=(1,), final_observation="missing")),
        ]

    def bad_sources(self, directory: Path) -> list[BadSource]:
        bad = _bad_common(directory, "pendulum-video")
        missing = copy_dataset("pendulum-video", directory / "no-video")
        (missing / "videos" / "observation.image" / "chunk-000" / "file-000.mp4").unlink()
        short = copy_dataset("pendulum-video", directory / "short-video")
        mp4 = short / "videos" / "observation.image" / "chunk-000" / "file-000.mp4"
        mp4.write_bytes(mp4.read_bytes()[: mp4.stat().st_size * 2 // 3])
        return [
            *bad,
            BadSource(missing, FormatError, re.escape("video file 'videos/observation.image/chunk-000/file-000.mp4' of feature 'observation.image' is missing")),
            BadSource(short, FormatError, "cut short|damaged"),
        ]  # fmt: skip
