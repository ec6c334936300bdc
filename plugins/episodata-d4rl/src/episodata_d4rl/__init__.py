"""D4RL HDF5 importer for episodata (formats.md §1).

Importing this package does not import h5py; the importer's methods do, and a missing
h5py raises :class:`~episodata_core.errors.MissingDependencyError` with the install
command.

Examples
--------
>>> import episodata
>>> dataset, report = episodata.import_dataset("d4rl", "hopper-medium-v2.hdf5")  # doctest: +SKIP
>>> print(report.summary())  # doctest: +SKIP
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from episodata_core.authoring import coerce_options
from episodata_core.importing import require_module
from episodata_d4rl._options import D4RLOptions, FieldNames
from episodata_d4rl._report import D4RLReport

if TYPE_CHECKING:
    from pydantic import BaseModel

    from episodata_core.dataset import Dataset
    from episodata_core.schema import DatasetSchema
    from episodata_core.transfer import ImportResult

__all__ = ["D4RLImporter", "D4RLOptions", "D4RLReport", "FieldNames"]

__version__ = "0.3.0"


class D4RLImporter:
    """Reads D4RL's flat, action-out HDF5 files into action-in episodes.

    Episodes end at ``terminals``, ``timeouts`` and the file end (formats.md §1.4). With
    ``next_observations`` every step is kept; without it the last step of each episode
    has no known successor and is dropped (and counted), and the shortened episode is
    marked truncated, never terminated.
    """

    name: ClassVar[str] = "d4rl"
    description: ClassVar[str] = "D4RL HDF5 datasets (observations, actions, terminals, ...)"
    Options: ClassVar[type[BaseModel]] = D4RLOptions

    def read_schema(self, source: str, options: BaseModel) -> DatasetSchema:
        """The schema of the episodes in ``source``; reads headers only."""
        _require_h5py()
        from episodata_d4rl._impl import read_schema

        return read_schema(source, coerce_options(options, D4RLOptions))

    def import_into(self, source: str, dataset: Dataset, options: BaseModel) -> ImportResult:
        """Validate ``source`` completely, then append its episodes to ``dataset``."""
        _require_h5py()
        from episodata_d4rl._impl import import_file

        return import_file(source, dataset, coerce_options(options, D4RLOptions))


def _require_h5py() -> None:
    require_module(
        "h5py",
        feature="the d4rl importer reads HDF5 files",
        install='pip install "episodata[d4rl]"',
    )
