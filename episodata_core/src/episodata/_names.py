"""The facade's names that ``import episodata`` does not import: where each lives."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from episodata._lazy import LazyName

__all__ = ["LAZY"]

LAZY: dict[str, LazyName] = {
    # 0.2's name of the role mapping, which FieldGroup serves as
    "Fields": ("episodata_core.views", "FieldGroup", None),
    # the backends ship in plugins, which import the core
    "MemoryBackend": ("episodata_memory", "MemoryBackend", "episodata-memory"),
    "NpzDirectoryBackend": ("episodata_npz", "NpzDirectoryBackend", "episodata-npz"),
    "ZarrBackend": ("episodata_zarr", "ZarrBackend", "episodata-zarr"),
}
