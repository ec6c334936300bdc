"""Minari importer for episodata, HDF5 storage (user guide: docs/minari.md).

Importing this package does not import h5py; the importer's methods do, and a missing
h5py raises :class:`~episodata_core.errors.MissingDependencyError` with the install
command. JPEG-encoded images (minari >= 0.5.3) are decoded with Pillow, which the
``minari`` extra installs; ``decode_images=False`` keeps their JPEG bytes instead.

Field keys: a Dict space gives one field per key (nested Dicts join keys with ``/``), a
Tuple space one field per member keyed by its position (``_index_1`` becomes ``1``, so
``Tuple(Box, Dict(a=Box))`` gives ``0`` and ``1/a``); any other space gives one field
keyed ``field_names.observation`` / ``field_names.action``. ``infos/<k>`` becomes the
info field ``<k>``. Box and Discrete fields keep the bounds of their space, and uint8
image Boxes their axis layout (``HWC``).

Examples
--------
>>> import episodata
>>> dataset, report = episodata.import_dataset(  # doctest: +SKIP
...     "minari", "D4RL/pen/human-v2", "pen-human.zarr"
... )
>>> print(report.summary())  # doctest: +SKIP
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from episodata_core.authoring import coerce_options
from episodata_core.importing import require_module
from episodata_minari._options import FieldNames, MinariOptions

if TYPE_CHECKING:
    from pydantic import BaseModel

    from episodata_core.dataset import Dataset
    from episodata_core.schema import DatasetSchema
    from episodata_core.transfer import ImportResult

__all__ = ["FieldNames", "MinariImporter", "MinariOptions"]

__version__ = "0.3.0"


class MinariImporter:
    """Reads a Minari dataset folder (HDF5 storage) into action-in episodes.

    Minari keeps the final observation of every episode, so no step is dropped:
    ``observations[0]`` is the reset row, ``actions[t]`` and ``rewards[t]`` lead to
    ``observations[t + 1]``, and the flags are ``terminations[T-1]`` and
    ``truncations[T-1]``. The source is the dataset folder (``.../<name>-v<k>/``), its
    ``data/`` folder, or ``data/main_data.hdf5`` (``~`` is expanded), or a Minari dataset
    id such as ``"D4RL/pen/human-v2"``, found as ``minari.load_dataset`` finds it: below
    ``$MINARI_DATASETS_PATH``, else ``~/.minari/datasets``.
    """

    name: ClassVar[str] = "minari"
    description: ClassVar[str] = "Minari datasets, HDF5 storage (data/main_data.hdf5)"
    Options: ClassVar[type[BaseModel]] = MinariOptions

    def read_schema(self, source: str, options: BaseModel) -> DatasetSchema:
        """The schema of the episodes in ``source``; reads headers and string columns."""
        _require_h5py()
        from episodata_minari._impl import read_schema

        return read_schema(source, coerce_options(options, MinariOptions))

    def import_into(self, source: str, dataset: Dataset, options: BaseModel) -> ImportResult:
        """Validate ``source`` completely, then append its episodes to ``dataset``."""
        _require_h5py()
        from episodata_minari._impl import import_source

        return import_source(source, dataset, coerce_options(options, MinariOptions))


def _require_h5py() -> None:
    require_module(
        "h5py",
        feature="the minari importer reads main_data.hdf5",
        install='pip install "episodata[minari]"',
    )
