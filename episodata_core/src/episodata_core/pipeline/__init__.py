"""Configuration-driven pipelines: import, store and export in one TOML file."""

from __future__ import annotations

from episodata_core.pipeline.config import (
    DatasetSource,
    ExportStep,
    ImportSource,
    PipelineConfig,
    StoreConfig,
    load_config,
)
from episodata_core.pipeline.runner import (
    Executor,
    LocalExecutor,
    Pipeline,
    PipelineResult,
    Step,
)

__all__ = [
    "DatasetSource",
    "Executor",
    "ExportStep",
    "ImportSource",
    "LocalExecutor",
    "Pipeline",
    "PipelineConfig",
    "PipelineResult",
    "Step",
    "StoreConfig",
    "load_config",
]
