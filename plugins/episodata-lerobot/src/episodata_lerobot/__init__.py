"""LeRobot v3 datasets: the ``lerobot`` importer and exporter (formats.md §8).

The importer also reads v2.1 and v2.0 folders (one parquet and one mp4 per episode).

Importing this package imports neither pyarrow nor PyAV nor Pillow; the plugins' methods
do, and a missing one raises :class:`~episodata_core.errors.MissingDependencyError` with
the install command (``pip install "episodata[lerobot]"``).

Examples
--------
>>> import episodata
>>> dataset, report = episodata.import_dataset(  # doctest: +SKIP
...     "lerobot", "~/.cache/huggingface/lerobot/lerobot/pusht", "pusht.zarr"
... )
>>> print(report.summary())  # doctest: +SKIP
>>> episodata.export_datasets("lerobot", dataset, "pusht-again")  # doctest: +SKIP
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from episodata_core.authoring import coerce_options
from episodata_core.importing import require_module
from episodata_lerobot._options import LeRobotExportOptions, LeRobotImportOptions

if TYPE_CHECKING:
    from collections.abc import Mapping

    from pydantic import BaseModel

    from episodata_core.dataset import Dataset
    from episodata_core.schema import DatasetSchema
    from episodata_core.transfer import ImportResult
    from episodata_lerobot._export import LeRobotExportReport

__all__ = ["LeRobotExportOptions", "LeRobotExporter", "LeRobotImportOptions", "LeRobotImporter"]

__version__ = "0.3.0"

_INSTALL = 'pip install "episodata[lerobot]"'


class LeRobotImporter:
    """Reads a local LeRobot v3.0 (or v2.1 / v2.0) dataset folder into action-in episodes.

    LeRobot stores frames action-out without the final observation: by default an
    episode of T frames gives T - 1 exact transitions (``final_observation="drop"``);
    ``final_observation="missing"`` keeps all T with the last next-observation filled
    and marked by the info field ``observation_valid``.
    """

    name: ClassVar[str] = "lerobot"
    description: ClassVar[str] = (
        "LeRobot v3.0, v2.1 and v2.0 dataset folders (parquet frames, mp4 videos)"
    )
    Options: ClassVar[type[BaseModel]] = LeRobotImportOptions

    def read_schema(self, source: str, options: BaseModel) -> DatasetSchema:
        """The schema of the episodes in ``source``; reads info.json and the episodes table."""
        _require("the lerobot importer")
        from episodata_lerobot._import import read_schema

        return read_schema(source, coerce_options(options, LeRobotImportOptions))

    def import_into(self, source: str, dataset: Dataset, options: BaseModel) -> ImportResult:
        """Check ``source`` completely, then append its episodes to ``dataset``."""
        _require("the lerobot importer")
        from episodata_lerobot._import import import_source

        return import_source(source, dataset, coerce_options(options, LeRobotImportOptions))


class LeRobotExporter:
    """Writes episodes as a LeRobot v3.0 dataset folder that LeRobot loads.

    Frame t of an episode is observation row t, action t and reward t (``next.reward``);
    the final observation row and the terminated/truncated distinction cannot be stored
    in LeRobot's frames and are recorded in ``meta/episodata.json`` (formats.md §8.3).
    """

    name: ClassVar[str] = "lerobot"
    description: ClassVar[str] = "LeRobot v3.0 dataset folder (parquet frames, PNG or mp4 images)"
    Options: ClassVar[type[BaseModel]] = LeRobotExportOptions

    def export(
        self, datasets: Mapping[str, Dataset], destination: str, options: BaseModel
    ) -> LeRobotExportReport:
        """Write ``datasets`` (their episodes one after another) to ``destination``."""
        _require("the lerobot exporter")
        from episodata_lerobot._export import export_datasets

        return export_datasets(datasets, destination, coerce_options(options, LeRobotExportOptions))


def _require(feature: str) -> None:
    for module, distribution in (("pyarrow", "pyarrow"), ("av", "av"), ("PIL.Image", "Pillow")):
        require_module(module, feature=f"{feature} reads parquet and mp4 files", install=_INSTALL,
                       distribution=distribution)  # fmt: skip
