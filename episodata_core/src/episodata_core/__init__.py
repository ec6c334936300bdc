"""episodata's core: the plugin contract and the engine.

Plugins import from here; users import the facade ``episodata``.
"""

from __future__ import annotations

from episodata_core._version import __version__
from episodata_core.dataset import Dataset, Episode
from episodata_core.errors import (
    DatasetStateError,
    EpisodataDeprecationWarning,
    EpisodataError,
    EpisodataPluginWarning,
    EpisodataWarning,
    FieldNotFoundError,
    MissingDependencyError,
    PluginConflictError,
    PluginError,
    PluginNotFoundError,
    SchemaError,
)
from episodata_core.manifest import Manifest
from episodata_core.schema import DatasetSchema, FieldSpec
from episodata_core.views import Batch, FieldGroup, Segment, Transition
from episodata_core.writers import ActionOutEpisodeWriter, EpisodeWriter, VectorEpisodeWriter

__all__ = [
    "ActionOutEpisodeWriter",
    "Batch",
    "Dataset",
    "DatasetSchema",
    "DatasetStateError",
    "EpisodataDeprecationWarning",
    "EpisodataError",
    "EpisodataPluginWarning",
    "EpisodataWarning",
    "Episode",
    "EpisodeWriter",
    "FieldGroup",
    "FieldNotFoundError",
    "FieldSpec",
    "Manifest",
    "MissingDependencyError",
    "PluginConflictError",
    "PluginError",
    "PluginNotFoundError",
    "SchemaError",
    "Segment",
    "Transition",
    "VectorEpisodeWriter",
    "__version__",
]
