"""Pipeline configuration: Pydantic models of a TOML file.

A pipeline has one source (an importer run on a file, or an existing dataset), an
optional store (where the data lands), and zero or more exports::

    [source]
    importer = "d4rl"
    path = "hopper-medium-v2.hdf5"

    [store]
    backend = "zarr"
    path = "hopper"

    [[exports]]
    exporter = "offset-segments"
    path = "hopper-segments"
    options = { offset = 25, episodes_per_env = 10 }

``source.path`` may also be a list of files, or a glob (``"runs/*.hdf5"``): each file is
imported in turn into the one dataset. ``[executor]`` (or ``executor = "ray"``) names
the registered executor that runs the steps, with its options beside the name
(``address = "auto"``); the default is ``"local"``, this process.

Plugins are named by their registered name. Each plugin's own ``Options`` model checks
its ``options`` table, and errors carry the full location (``exports[0].options.offset``).
A ``"package.module:Class"`` import path instead of a name runs code from that module,
so only the person running the pipeline can allow it (``--allow-import-paths`` on the
command line, ``allow_import_paths=True`` in Python); a file cannot opt itself in.
"""

from __future__ import annotations

import glob
import hashlib
import json
import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from episodata_core import registry
from episodata_core._options import located_errors, unknown_key, validate_options
from episodata_core.errors import SchemaError

__all__ = [
    "DatasetSource",
    "ExecutorConfig",
    "ExportStep",
    "ImportSource",
    "PipelineConfig",
    "StoreConfig",
    "load_config",
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ImportSource(_Strict):
    """Read foreign files with an importer plugin."""

    importer: str = Field(description="Registered importer name, e.g. 'd4rl'.")
    path: str | list[str] = Field(
        description="The file or folder to import, a list of them, or a glob ('runs/*.hdf5')."
    )
    options: dict[str, Any] = Field(default_factory=dict, description="The importer's Options.")

    def files(self) -> list[str]:
        """Every file to import, in import order: the list's order, a glob's matches sorted.

        Raises :class:`SchemaError` when a glob matches nothing or the list is empty.
        """
        entries = [self.path] if isinstance(self.path, str) else list(self.path)
        if not entries:
            raise SchemaError("source.path: the list of files is empty; name at least one file")
        files: list[str] = []
        for entry in entries:
            if "://" in entry or not glob.has_magic(entry):
                files.append(entry)
                continue
            matches = sorted(glob.glob(entry))
            if not matches:
                raise SchemaError(
                    f"source.path: the glob {entry!r} matches no file; check the pattern "
                    "(relative paths are relative to the pipeline file)"
                )
            files += matches
        return files


class ExecutorConfig(_Strict):
    """Which executor runs the steps: ``executor = "ray"`` or an ``[executor]`` table.

    Keys of the table other than ``name`` are the executor's options
    (``address = "auto"``), as are those of an explicit ``options`` table.
    """

    name: str = Field(default="local", description="Registered executor name: 'local', 'ray'.")
    options: dict[str, Any] = Field(default_factory=dict, description="The executor's Options.")

    @model_validator(mode="before")
    @classmethod
    def _short_forms(cls, data: Any) -> Any:
        if isinstance(data, str):
            return {"name": data}
        if isinstance(data, dict) and set(data) - {"name", "options"}:
            inline = {k: v for k, v in data.items() if k not in ("name", "options")}
            given = data.get("options", {})
            options = {**given, **inline} if isinstance(given, dict) else given
            return {"name": data.get("name", "local"), "options": options}
        return data


class DatasetSource(_Strict):
    """Start from an existing dataset folder."""

    dataset: str = Field(description="Path of an existing dataset.")


class StoreConfig(_Strict):
    """Where the pipeline's dataset is written."""

    path: str | None = Field(default=None, description="New dataset folder; omit for memory.")
    backend: str | None = Field(
        default=None, description="Registered backend name (default: zarr with a path)."
    )
    options: dict[str, Any] = Field(default_factory=dict, description="The backend's Options.")

    def backend_name(self) -> str:
        """``backend``, or the default for a dataset with (or without) a path."""
        return self.backend or registry.default_backend(self.path or None)


class ExportStep(_Strict):
    """Write the dataset out with an exporter plugin."""

    exporter: str = Field(description="Registered exporter name, e.g. 'offset-segments'.")
    path: str = Field(description="Output folder.")
    label: str | None = Field(
        default=None, description="Label of the dataset in the export (default: its name)."
    )
    options: dict[str, Any] = Field(default_factory=dict, description="The exporter's Options.")


class PipelineConfig(_Strict):
    """A whole pipeline: ``source``, optional ``store``, and ``exports``."""

    source: ImportSource | DatasetSource = Field(description="Where the episodes come from.")
    store: StoreConfig | None = Field(default=None, description="Where they are written.")
    exports: list[ExportStep] = Field(default_factory=list, description="What is exported.")
    executor: ExecutorConfig = Field(
        default_factory=ExecutorConfig, description="What runs the steps (default: local)."
    )

    @model_validator(mode="before")
    @classmethod
    def _refuse_self_opt_in(cls, data: Any) -> Any:
        if isinstance(data, dict) and "allow_import_paths" in data:
            raise ValueError(_SELF_OPT_IN)
        return data

    @model_validator(mode="after")
    def _check_shape(self) -> PipelineConfig:
        stored = isinstance(self.source, DatasetSource)
        if stored and self.store is not None and self.store.path is None:
            raise ValueError("store: a dataset source is already stored; drop [store]")
        return self

    def digest(self) -> str:
        """SHA-256 of the canonical JSON form: the same pipeline always hashes the same.

        The executor is left out: where a pipeline runs does not change what it writes.
        """
        document = self.model_dump(mode="json", exclude={"executor"})
        canonical = json.dumps(document, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()

    def resolve(self, *, allow_import_paths: bool = False) -> list[str]:
        """Look every plugin up and validate its options; returns one line per step.

        ``allow_import_paths`` lets a plugin be named ``"package.module:Class"``, which
        imports (runs) that module. It is the caller's decision, never the file's:
        without it every import path is refused before anything is looked up, so no
        module is imported.

        Raises :class:`SchemaError` with the full location of the first problem.
        """
        return self._resolved(allow_import_paths)[0]

    def _resolved(
        self, allow_import_paths: bool
    ) -> tuple[list[str], dict[tuple[registry.PluginKind, str], type]]:
        """The step lines and the classes imported from import paths, by (kind, name)."""
        named = self._named_plugins()
        if not allow_import_paths:
            for where, kind, name in named:
                if ":" in name:
                    raise SchemaError(
                        f"{where}: {name!r} is an import path, which would run code from "
                        f"that module; name a registered {kind} (see `episodata plugins`), "
                        "or, if you trust this file, pass --allow-import-paths "
                        "(allow_import_paths=True in Python)"
                    )
        classes = {(kind, name): _plugin(kind, name, where) for where, kind, name in named}
        imported = {key: cls for key, cls in classes.items() if ":" in key[1]}
        steps: list[str] = []
        source = self.source
        if isinstance(source, ImportSource):
            cls = classes["importer", source.importer]
            validate_options(cls, source.options, "source.options")
            files = source.files()
            what = files[0] if len(files) == 1 else f"{len(files)} files ({files[0]}, ...)"
            steps.append(f"import {what} with {source.importer}")
        else:
            steps.append(f"open {source.dataset}")
        if self.store is not None:
            backend = self.store.backend_name()
            validate_options(classes["backend", backend], self.store.options, "store.options")
            steps.append(f"store in {self.store.path or 'memory'} ({backend})")
        for number, export in enumerate(self.exports):
            cls = classes["exporter", export.exporter]
            validate_options(cls, export.options, f"exports[{number}].options")
            steps.append(f"export to {export.path} with {export.exporter}")
        if self.executor.name != "local":
            cls = classes["executor", self.executor.name]
            validate_options(cls, self.executor.options, "executor.options")
            steps.append(f"run on the {self.executor.name} executor")
        self._check_paths()
        return steps, imported

    def _check_paths(self) -> None:
        """Refuse, before any step runs, paths that would make a step fail half-way.

        A missing source, a store path that already holds a finished dataset and an
        export folder that exists (without ``overwrite``) all fail only after earlier
        steps did their work; catching them here keeps ``validate``'s "valid" honest.
        URLs are left to the step that opens them.
        """
        source = self.source
        if isinstance(source, ImportSource):
            for path in source.files():  # a glob that matches nothing is refused here too
                if _is_local(path) and not Path(path).expanduser().exists():
                    raise SchemaError(
                        f"source.path: no such file or folder {path!r}; give the path of "
                        f"the file to import with {source.importer!r} (relative paths are "
                        "relative to the pipeline file, or to --workdir)"
                    )
        elif _is_local(source.dataset) and not _holds_dataset(source.dataset):
            raise SchemaError(
                f"source.dataset: {source.dataset!r} is not an episodata dataset (no "
                f"manifest.json there); give the folder of an existing dataset"
            )
        if self.store is not None and self.store.path is not None:
            path = self.store.path
            if _is_local(path) and _holds_dataset(path, finished=True):
                raise SchemaError(
                    f"store.path: {path!r} already holds a dataset; choose a new path, or "
                    "remove that dataset first"
                )
        for number, export in enumerate(self.exports):
            if (
                _is_local(export.path)
                and Path(export.path).expanduser().exists()
                and not export.options.get("overwrite", False)
            ):
                raise SchemaError(
                    f"exports[{number}].path: {export.path!r} already exists; choose a new "
                    "folder, or set overwrite = true in that export's options"
                )

    def _named_plugins(self) -> list[tuple[str, registry.PluginKind, str]]:
        """``(location, kind, name)`` of every plugin the pipeline names, in step order."""
        named: list[tuple[str, registry.PluginKind, str]] = []
        if isinstance(self.source, ImportSource):
            named.append(("source.importer", "importer", self.source.importer))
        if self.store is not None:
            named.append(("store.backend", "backend", self.store.backend_name()))
        named += [
            (f"exports[{n}].exporter", "exporter", e.exporter) for n, e in enumerate(self.exports)
        ]
        if self.executor.name != "local":
            named.append(("executor.name", "executor", self.executor.name))
        return named


_SELF_OPT_IN = (
    "allow_import_paths is no longer read from a pipeline file (a file must not be able "
    "to make episodata run its code); remove it, and pass --allow-import-paths to "
    "`episodata pipeline validate|run` (allow_import_paths=True in Python) if you trust it"
)


def _is_local(path: str) -> bool:
    return "://" not in path or path.startswith("file://")


def _holds_dataset(path: str, *, finished: bool = False) -> bool:
    """Whether ``path`` holds a manifest (``finished``: one not marked incomplete).

    A dataset whose bulk write was interrupted is marked incomplete; a rerun replaces
    it, so a pipeline may name it as its store.
    """
    manifest = Path(path.removeprefix("file://")).expanduser() / "manifest.json"
    if not manifest.is_file():
        return False
    if not finished:
        return True
    try:
        document = json.loads(manifest.read_bytes())
    except (OSError, ValueError):
        return True  # unreadable: not ours to replace
    return not (isinstance(document, dict) and document.get("incomplete"))


def _plugin(kind: registry.PluginKind, name: str, where: str) -> Any:
    if ":" in name:
        # only reached when the caller allowed import paths (checked in _resolved)
        import importlib

        module, _, attribute = name.partition(":")
        try:
            return getattr(importlib.import_module(module), attribute)
        except (ImportError, AttributeError) as err:
            raise SchemaError(f"{where}: cannot load import path {name!r}: {err}") from err
    getters = {
        "backend": registry.get_backend,
        "importer": registry.get_importer,
        "exporter": registry.get_exporter,
        "executor": registry.get_executor,
    }
    try:
        return getters[kind](name)
    except LookupError as err:
        raise SchemaError(f"{where}: {err}") from err


def load_config(source: str | Path, *, base: Path | None = None) -> PipelineConfig:
    """Parse a TOML file (a path) or TOML text into a validated :class:`PipelineConfig`.

    Relative paths in the file are relative to the file's folder, or to ``base`` when
    it is given.
    """
    text: str
    if isinstance(source, Path) or "\n" not in source:
        file = Path(source)
        if not file.is_file():
            raise SchemaError(f"pipeline file {str(file)!r} does not exist")
        text = file.read_text()
        base = file.parent if base is None else base
    else:
        text = source
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise SchemaError(f"pipeline: not valid TOML: {err}") from err
    if "allow_import_paths" in document:
        raise SchemaError(f"pipeline: {_SELF_OPT_IN}")
    _check_keys(document)
    try:
        config = PipelineConfig.model_validate(document)
    except ValidationError as err:
        raise SchemaError(located_errors(err, "pipeline", PipelineConfig)) from err
    return _rebase(config, base) if base is not None else config


def _check_keys(document: dict[str, Any]) -> None:
    """Name an unknown key of the file with the valid ones and the closest, before pydantic.

    The source is one of two tables; validated as a union, one typo would come back as
    errors against both models. Which table is meant is read from its keys first.
    """
    tables: dict[str, tuple[type[BaseModel], Any]] = {"store": (StoreConfig, document.get("store"))}
    source = document.get("source")
    if isinstance(source, dict):
        import_keys, dataset_keys = set(ImportSource.model_fields), set(DatasetSource.model_fields)
        given = set(source)
        model: type[BaseModel] = (
            DatasetSource
            if "dataset" in given or len(given & dataset_keys) > len(given & import_keys)
            else ImportSource
        )
        if "importer" not in given and "dataset" not in given:
            known = import_keys | dataset_keys
            stray = sorted(key for key in given if key not in known)
            first = f"{unknown_key(stray[0], known)}; " if stray else ""
            raise SchemaError(
                f"pipeline.source: {first}a source is importer = NAME with path = FILE, "
                "or dataset = PATH"
            )
        tables["source"] = (model, source)
    for name in document:
        if name not in PipelineConfig.model_fields:
            raise SchemaError(
                f"pipeline: {unknown_key(name, PipelineConfig.model_fields, 'table')}"
            )
    for name, (model, table) in tables.items():
        if isinstance(table, dict):
            for key in table:
                if key not in model.model_fields:
                    raise SchemaError(f"pipeline.{name}: {unknown_key(key, model.model_fields)}")
    exports = document.get("exports")
    for number, table in enumerate(exports if isinstance(exports, list) else []):
        for key in table if isinstance(table, dict) else ():
            if key not in ExportStep.model_fields:
                raise SchemaError(
                    f"pipeline.exports[{number}]: {unknown_key(key, ExportStep.model_fields)}"
                )


def _rebase(config: PipelineConfig, base: Path) -> PipelineConfig:
    def absolute(path: str) -> str:
        if "://" in path or Path(path).is_absolute():  # a URL is a location of its own
            return path
        return str(base / path)

    source = config.source
    if isinstance(source, ImportSource):
        paths = source.path
        rebased = absolute(paths) if isinstance(paths, str) else [absolute(p) for p in paths]
        source = source.model_copy(update={"path": rebased})
    else:
        source = source.model_copy(update={"dataset": absolute(source.dataset)})
    store = config.store
    if store is not None and store.path is not None:
        store = store.model_copy(update={"path": absolute(store.path)})
    exports = [e.model_copy(update={"path": absolute(e.path)}) for e in config.exports]
    return config.model_copy(update={"source": source, "store": store, "exports": exports})
