"""episodata's core: the plugin contract and the engine.

Plugins import from here; users import the facade ``episodata``, which re-exports
exactly :data:`__all__`: this list is the one owner of the public names.
"""

from __future__ import annotations

from episodata_core._version import __version__
from episodata_core.dataset import Dataset
from episodata_core.episode import Episode
from episodata_core.errors import (
    ArgumentError,
    DatasetStateError,
    EpisodataDeprecationWarning,
    EpisodataError,
    EpisodataImportWarning,
    EpisodataPluginWarning,
    EpisodataWarning,
    FieldNotFoundError,
    FormatError,
    IntegrityError,
    MissingDependencyError,
    MissingFilterError,
    NonFiniteError,
    PartialFileError,
    PluginConflictError,
    PluginError,
    PluginNotFoundError,
    SchemaError,
)
from episodata_core.manifest import Manifest
from episodata_core.pipeline import Pipeline
from episodata_core.protocols import Sampler, StorageBackend
from episodata_core.registry import get_backend, register_backend
from episodata_core.sampling import SegmentDataset, SegmentStream, UniformSampler
from episodata_core.schema import DatasetSchema, FieldSpec
from episodata_core.selection import Selection
from episodata_core.stats import FieldStats
from episodata_core.transfer import ImportReport, export_datasets, import_dataset
from episodata_core.views import Batch, FieldGroup, Segment, Transition
from episodata_core.writers import ActionOutEpisodeWriter, EpisodeWriter, VectorEpisodeWriter

__all__ = [
    "ActionOutEpisodeWriter",
    "ArgumentError",
    "Batch",
    "Dataset",
    "DatasetSchema",
    "DatasetStateError",
    "EpisodataDeprecationWarning",
    "EpisodataError",
    "EpisodataImportWarning",
    "EpisodataPluginWarning",
    "EpisodataWarning",
    "Episode",
    "EpisodeWriter",
    "FieldGroup",
    "FieldNotFoundError",
    "FieldSpec",
    "FieldStats",
    "FormatError",
    "ImportReport",
    "IntegrityError",
    "Manifest",
    "MissingDependencyError",
    "MissingFilterError",
    "NonFiniteError",
    "PartialFileError",
    "Pipeline",
    "PluginConflictError",
    "PluginError",
    "PluginNotFoundError",
    "Sampler",
    "SchemaError",
    "Segment",
    "SegmentDataset",
    "SegmentStream",
    "Selection",
    "StorageBackend",
    "Transition",
    "UniformSampler",
    "VectorEpisodeWriter",
    "__version__",
    "export_datasets",
    "get_backend",
    "import_dataset",
    "register_backend",
]
