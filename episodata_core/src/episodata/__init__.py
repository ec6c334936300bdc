"""episodata: episodic data for world models, control and reinforcement learning.

This package only re-exports the public API of ``episodata_core``; names outside
``__all__`` may change without notice.
"""

from __future__ import annotations

from episodata_core import (
    ActionOutEpisodeWriter,
    Batch,
    Dataset,
    DatasetSchema,
    DatasetStateError,
    EpisodataDeprecationWarning,
    EpisodataError,
    EpisodataPluginWarning,
    EpisodataWarning,
    Episode,
    EpisodeWriter,
    FieldGroup,
    FieldNotFoundError,
    FieldSpec,
    Manifest,
    MissingDependencyError,
    PluginConflictError,
    PluginError,
    PluginNotFoundError,
    SchemaError,
    Segment,
    Transition,
    VectorEpisodeWriter,
    __version__,
)

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
