"""``episodata hdf5-commit PATH``: a verb this plugin adds to the ``episodata`` command.

The worked example of an ``episodata.commands`` plugin: a class with ``name``,
``description``, ``arguments`` and ``run``, named by the entry point. This module
imports no h5py; ``run`` does.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from episodata_core.commands import Arg, arg
from episodata_core.errors import DatasetStateError

if TYPE_CHECKING:
    import argparse

__all__ = ["CommitCommand"]


class CommitCommand:
    """Print what ``data.h5`` of an ``hdf5`` dataset has committed, read straight from HDF5."""

    name: ClassVar[str] = "hdf5-commit"
    description: ClassVar[str] = (
        "print the committed episodes and rows of an hdf5 dataset's data.h5, and its fields"
    )
    arguments: ClassVar[tuple[Arg, ...]] = (arg("path", help="folder of an hdf5 dataset"),)

    def run(self, args: argparse.Namespace) -> int:
        """Read ``/commit`` and ``/rows`` of ``<path>/data.h5``; print one line each."""
        import h5py

        from episodata_plugin_example._format import DATA_NAME, read_commit

        file = Path(args.path) / DATA_NAME
        if not file.is_file():
            raise DatasetStateError(
                f'{file} does not exist; pass the folder of a dataset created with backend="hdf5"'
            )
        with h5py.File(file, "r") as handle:
            episodes, rows = read_commit(handle["commit"])
            fields: list[str] = []
            handle["rows"].visititems(
                lambda key, obj: fields.append(key) if isinstance(obj, h5py.Dataset) else None
            )
        print(f"committed: {episodes} episodes, {rows} rows")
        for key in sorted(fields):
            print(f"field: {key}")
        return 0
