"""``episodata.backends.zarr``: the Zarr v3 backend (from episodata-zarr).

Importing it does not import TensorStore; the backend does when it opens a dataset.
"""

from __future__ import annotations

from episodata_zarr import ZarrBackend

__all__ = ["ZarrBackend"]
