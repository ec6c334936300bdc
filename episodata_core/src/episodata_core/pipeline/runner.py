"""Run a pipeline: its steps go through an executor, so other engines can take over.

:class:`LocalExecutor` (registered as ``"local"``) runs steps one after the other in
this process. Executors are plugins of the ``episodata.executors`` entry-point group;
one that can spread a several-file import over workers also implements
:class:`SupportsImportFiles`. Steps report through the pluggy pipeline hooks (start,
after each step, end, error).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict

from episodata_core import hooks, registry
from episodata_core._options import validate_options
from episodata_core.dataset import Dataset
from episodata_core.errors import EpisodataError
from episodata_core.pipeline.config import (
    DatasetSource,
    ExecutorConfig,
    ImportSource,
    PipelineConfig,
    load_config,
)
from episodata_core.pipeline.imports import ImportRequest, import_files
from episodata_core.transfer import export_datasets

if TYPE_CHECKING:
    import os
    from collections.abc import Callable

    from episodata_core.transfer import ImportReport

__all__ = [
    "Executor",
    "LocalExecutor",
    "Pipeline",
    "PipelineResult",
    "Step",
    "SupportsImportFiles",
]


@dataclass(frozen=True)
class Step:
    """One unit of pipeline work, with a name that error messages use."""

    name: str
    run: Callable[[], Any]


class Executor(Protocol):
    """Runs steps in order; a distributed engine can implement the same method."""

    def execute(self, step: Step) -> Any:
        """Run one step and return its result."""
        ...


@runtime_checkable
class SupportsImportFiles(Protocol):
    """An executor that imports a source's files itself (e.g. one worker task per file).

    The result must equal :func:`~episodata_core.pipeline.imports.import_files` episode
    for episode; :class:`~episodata_core.pipeline.imports.ImportTarget` commits shards
    made elsewhere in that order.
    """

    def import_files(
        self, request: ImportRequest, *, progress: bool
    ) -> tuple[Dataset, ImportReport]:
        """Import ``request.files`` into ``request.destination``; the dataset and report."""
        ...

    def provenance(self) -> dict[str, Any]:
        """What the manifest records about the run: ``name``, cluster size, versions."""
        ...


class LocalExecutor:
    """Runs each step right here, in this process."""

    name: ClassVar[str] = "local"
    description: ClassVar[str] = "runs the steps one after the other in this process"

    class Options(BaseModel):
        """The local executor takes no options."""

        model_config = ConfigDict(extra="forbid")

    def __init__(self, options: BaseModel | None = None) -> None:
        self.options = options

    def execute(self, step: Step) -> Any:
        """Call the step."""
        return step.run()


@dataclass
class PipelineResult:
    """What a run produced: the dataset, the import report and export reports."""

    dataset: Dataset
    import_report: Any = None
    export_reports: list[Any] = field(default_factory=list)


class Pipeline:
    """A validated pipeline; build it with :meth:`from_toml` or from a config model.

    ``allow_import_paths=True`` accepts ``"package.module:Class"`` in place of a
    registered plugin name, which imports (runs) that module: pass it only for a file
    you trust. A pipeline file cannot set it for itself.
    """

    def __init__(self, config: PipelineConfig, *, allow_import_paths: bool = False) -> None:
        self.config = config
        self.allow_import_paths = allow_import_paths
        self._import_report: Any = None

    @classmethod
    def from_toml(
        cls,
        source: str | os.PathLike[str],
        *,
        allow_import_paths: bool = False,
        workdir: str | os.PathLike[str] | None = None,
    ) -> Pipeline:
        """Load a TOML file (or TOML text) and validate its structure; imports nothing.

        Relative paths in the file are relative to the file's folder, or to ``workdir``
        when it is given (e.g. ``"."`` to run an example pipeline without writing next to
        it).
        """
        path = Path(source) if not isinstance(source, str) else source
        base = None if workdir is None else Path(workdir).expanduser().absolute()
        return cls(load_config(path, base=base), allow_import_paths=allow_import_paths)

    def validate(self) -> list[str]:
        """Resolve every plugin and check every options table; nothing is written."""
        return self.config.resolve(allow_import_paths=self.allow_import_paths)

    def with_executor(self, name: str | None = None, **options: Any) -> Pipeline:
        """Return this pipeline on another executor, or with other executor options.

        ``name=None`` keeps the file's executor; options that are ``None`` are left out,
        the others override the file's (``address="ray://head:10001"``).
        """
        current = self.config.executor
        given = {k: v for k, v in options.items() if v is not None}
        if name is not None and name != current.name:
            chosen = ExecutorConfig(name=name, options=given)
        else:
            chosen = ExecutorConfig(name=current.name, options={**current.options, **given})
        config = self.config.model_copy(update={"executor": chosen})
        return Pipeline(config, allow_import_paths=self.allow_import_paths)

    def make_executor(self) -> Executor:
        """The executor the configuration names, built with its validated options."""
        chosen = self.config.executor
        cls: Any = registry.get_executor(chosen.name)
        return cls(validate_options(cls, chosen.options, "executor.options"))  # type: ignore[no-any-return]

    def run(self, *, executor: Executor | None = None, progress: bool = True) -> PipelineResult:
        """Run every step; on failure the error names the step that failed.

        ``executor`` overrides the configuration's ``[executor]``.
        """
        _, imported = self.config._resolved(self.allow_import_paths)
        # the steps look plugins up by name, so an allowed import path is registered
        # under its own text for the duration of the run only
        registrars = {
            "backend": registry.register_backend,
            "importer": registry.register_importer,
            "exporter": registry.register_exporter,
        }
        added: list[tuple[registry.PluginKind, str]] = []
        try:
            for (kind, name), cls in imported.items():
                registrars[kind](cls, name=name)
                added.append((kind, name))
            return self._run(executor or self.make_executor(), progress)
        finally:
            for kind, name in added:
                registry.unregister(kind, name)

    def _run(self, executor: Executor, progress: bool) -> PipelineResult:
        hooks.call_hook("on_pipeline_start", pipeline=self)
        current = "start"
        try:
            self._import_report = None
            result = PipelineResult(dataset=self._source_step(executor, progress))
            result.import_report = self._import_report
            current = "record provenance"
            result.dataset.update_metadata({"pipeline": self._provenance(executor)})
            for number, export in enumerate(self.config.exports):
                current = f"exports[{number}] ({export.exporter} to {export.path})"
                label = export.label or Path(result.dataset.location or "dataset").name
                step = Step(
                    current,
                    partial(
                        export_datasets,
                        export.exporter,
                        {label: result.dataset},
                        export.path,
                        progress=progress,
                        **export.options,
                    ),
                )
                result.export_reports.append(executor.execute(step))
                hooks.call_hook("after_pipeline_step", pipeline=self, step=current)
        except BaseException as err:
            hooks.call_hook("on_pipeline_error", pipeline=self, error=err)
            if isinstance(err, EpisodataError):
                err.add_note(f"pipeline step that failed: {current}")
            raise
        hooks.call_hook("on_pipeline_end", pipeline=self, result=result)
        return result

    def _source_step(self, executor: Executor, progress: bool) -> Dataset:
        source, store = self.config.source, self.config.store
        if isinstance(source, ImportSource):
            request = ImportRequest(
                importer=source.importer,
                files=tuple(source.files()),
                destination=store.path if store else None,
                backend=store.backend if store else None,
                options=dict(source.options),
            )
            name = f"source ({source.importer} import of {source.path})"
            dataset: Dataset
            if isinstance(executor, SupportsImportFiles):
                dataset, self._import_report = executor.import_files(request, progress=progress)
            else:
                step = Step(name, partial(import_files, request, progress=progress))
                dataset, self._import_report = executor.execute(step)
            hooks.call_hook("after_pipeline_step", pipeline=self, step=name)
            return dataset
        assert isinstance(source, DatasetSource)
        opened = Dataset.open(source.dataset)
        hooks.call_hook(
            "after_pipeline_step", pipeline=self, step=f"source (open {source.dataset})"
        )
        if store is None or store.path is None:
            return opened
        name = f"store (copy to {store.path})"
        copy: Dataset = executor.execute(
            Step(
                name,
                lambda: opened.copy_to(
                    store.path, backend=store.backend, progress=progress, **store.options
                ),
            )
        )
        hooks.call_hook("after_pipeline_step", pipeline=self, step=name)
        return copy

    def _provenance(self, executor: Executor) -> dict[str, Any]:
        versions = {}
        for dist in ("episodata-core", *self._distributions()):
            try:
                versions[dist] = metadata.version(dist)
            except metadata.PackageNotFoundError:
                versions[dist] = "unknown"
        ran_on: dict[str, Any] = {"name": getattr(executor, "name", type(executor).__name__)}
        if isinstance(executor, SupportsImportFiles):
            ran_on = executor.provenance()
        return {
            # where it ran is recorded apart: the config and its hash say what was written
            "config": self.config.model_dump(mode="json", exclude={"executor"}),
            "config_sha256": self.config.digest(),
            "plugins": versions,
            "executor": ran_on,
        }

    def _distributions(self) -> list[str]:
        wanted = set()
        source = self.config.source
        if isinstance(source, ImportSource):
            wanted.add(("importer", source.importer))
        if self.config.store is not None:
            wanted.add(("backend", self.config.store.backend_name()))
        wanted |= {("exporter", e.exporter) for e in self.config.exports}
        wanted.add(("executor", self.config.executor.name))
        return sorted(
            {
                info.distribution
                for info in registry.list_plugins()
                if (info.kind, info.name) in wanted and info.distribution
            }
        )
