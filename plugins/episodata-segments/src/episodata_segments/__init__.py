"""Offset-segment archives: the ``offset-segments`` exporter and importer.

The archive (formats.md §3) holds one NPZ file per segment of K transitions (K + 1
observations, K actions), ``manifest.json``, ``manifest.jsonl``, ``build_episodes.py``,
``README.md`` and ``SHA256SUMS``. Run the plugins through
:func:`episodata.export_datasets` and :func:`episodata.import_dataset`.
"""

from __future__ import annotations

from episodata_segments._export import (
    EnvironmentReport,
    ExportReport,
    OffsetSegmentsExporter,
    OffsetSegmentsExportOptions,
)
from episodata_segments._import import OffsetSegmentsImporter, OffsetSegmentsImportOptions

__all__ = [
    "EnvironmentReport",
    "ExportReport",
    "OffsetSegmentsExportOptions",
    "OffsetSegmentsExporter",
    "OffsetSegmentsImportOptions",
    "OffsetSegmentsImporter",
]

__version__ = "0.3.0"
