"""stable-worldmodel / LeWorldModel importer for episodata: HDF5 files and Lance datasets.

``World.collect`` writes Lance datasets (folders) by default and HDF5 files on request;
the ``lewm`` importer reads both, with the same options, roles and validation. Importing
this package does not import h5py, hdf5plugin, pylance, pyarrow or Pillow; the
importer's methods do. A missing library raises
:class:`~episodata_core.errors.MissingDependencyError`, a missing Blosc filter
:class:`~episodata_core.errors.MissingFilterError`, both with the install command.

Examples
--------
>>> import episodata
>>> dataset, report = episodata.import_dataset(  # doctest: +SKIP
...     "lewm", "tworoom.h5", "tworoom.zarr", episodes=300, read_budget_bytes=1 << 30
... )
>>> dataset, report = episodata.import_dataset("lewm", "pusht.lance", "pusht")  # doctest: +SKIP
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from episodata_core.authoring import coerce_options
from episodata_core.importing import require_module
from episodata_lewm._options import EpisodeSlice, LeWMOptions
from episodata_lewm._report import LeWMReport

if TYPE_CHECKING:
    from pydantic import BaseModel

    from episodata_core.dataset import Dataset
    from episodata_core.schema import DatasetSchema
    from episodata_core.transfer import ImportResult

__all__ = ["EpisodeSlice", "LeWMImporter", "LeWMOptions", "LeWMReport"]

__version__ = "0.3.0"


class LeWMImporter:
    """Reads swm / LeWM ``.h5`` files (``ep_len``, ``ep_offset``) and ``.lance`` datasets.

    swm rows are action-out (``action[t]`` is taken at row t; the last row's action is
    NaN) while ``reward[t]`` and the flags describe arriving at row t. The importer
    shifts actions, never rewards, and streams the source in reads of at most
    ``read_budget_bytes``. A Lance dataset's episodes are the runs of ``episode_idx``;
    its JPEG image columns are decoded to ``uint8 [H, W, C]`` (``images="jpeg"`` keeps
    the bytes). Files of stable-worldmodel 0.1.1, which lack the reset row, are
    recognized and imported as recorded, with a warning.
    """

    name: ClassVar[str] = "lewm"
    description: ClassVar[str] = (
        "stable-worldmodel / LeWorldModel HDF5 files (ep_len, ep_offset) and Lance datasets"
    )
    Options: ClassVar[type[BaseModel]] = LeWMOptions

    def read_schema(self, source: str, options: BaseModel) -> DatasetSchema:
        """The schema of the episodes in ``source``; reads headers and string lengths."""
        _require(source)
        from episodata_lewm._impl import read_schema

        return read_schema(source, coerce_options(options, LeWMOptions))

    def import_into(self, source: str, dataset: Dataset, options: BaseModel) -> ImportResult:
        """Validate ``source`` completely, then append its episodes to ``dataset``."""
        _require(source)
        from episodata_lewm._impl import import_file

        return import_file(source, dataset, coerce_options(options, LeWMOptions))


def _require(source: str) -> None:
    """The libraries that read ``source``: pylance, pyarrow and Pillow for a folder, else h5py."""
    from episodata_lewm._lance import is_lance

    install = 'pip install "episodata[lewm]"'
    if is_lance(source):
        feature = "the lewm importer reads Lance datasets"
        require_module("lance", feature=feature, install=install, distribution="pylance")
        require_module("pyarrow", feature=feature, install=install)
        require_module("PIL.Image", feature=feature, install=install, distribution="Pillow")
        return
    require_module("h5py", feature="the lewm importer reads HDF5 files", install=install)
