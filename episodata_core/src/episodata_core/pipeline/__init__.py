"""Configuration-driven pipelines: import, store and export in one TOML file."""

from __future__ import annotations

from episodata_core.pipeline.config import (
    DatasetSource,
    ExecutorConfig,
    ExportStep,
    ImportSource,
    PipelineConfig,
    StoreConfig,
    load_config,
)
from episodata_core.pipeline.imports import ImportRequest, ImportTarget, import_files
from episodata_core.pipeline.runner import (
    Executor,
    LocalExecutor,
    Pipeline,
    PipelineResult,
    Step,
    SupportsImportFiles,
)

__all__ = [
    "DatasetSource",
    "Executor",
    "ExecutorConfig",
    "ExportStep",
    "ImportRequest",
    "ImportSource",
    "ImportTarget",
    "LocalExecutor",
    "Pipeline",
    "PipelineConfig",
    "PipelineResult",
    "Step",
    "StoreConfig",
    "SupportsImportFiles",
    "import_files",
    "load_config",
]
