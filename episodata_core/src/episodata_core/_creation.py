"""Creating a dataset, opening a stored one, and taking the writer of its folder.

A creation at a path goes: refuse anything but an absent or empty folder, a creation
that never wrote its manifest, or (for a bulk write) a dataset that an earlier bulk
write left marked incomplete; make the folder, take the writer lock, write the creation
marker (:data:`~episodata_core.location.CREATING_NAME`); let the backend lay out its
files; write ``manifest.json``; remove the marker. A folder that holds the marker but no
manifest is recognizably an unfinished creation, which the next creation takes over.

The functions here build :class:`~episodata_core.dataset.Dataset` handles through the
class they are given, so that this module sits below ``dataset`` and never imports it.
"""

from __future__ import annotations

import contextlib
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from episodata_core import _shared_writer, generations, hooks, location, registry
from episodata_core._options import validate_options
from episodata_core._version import __version__
from episodata_core.errors import ArgumentError, DatasetStateError, EpisodataError, SchemaError
from episodata_core.manifest import Manifest, PluginVersion, Provenance, read_manifest
from episodata_core.protocols import supports_persistence
from episodata_core.schema import DatasetSchema

if TYPE_CHECKING:
    import os
    from collections.abc import Mapping

    from pydantic import BaseModel

    from episodata_core._access import DatasetAccess
    from episodata_core.dataset import Dataset
    from episodata_core.manifest import Incomplete
    from episodata_core.protocols import PersistentBackend, StorageBackend
    from episodata_core.registry import PluginKind

__all__ = [
    "Created",
    "create",
    "create_at",
    "incomplete_error",
    "open_at",
    "reopen_remote",
    "take_writer",
]


@dataclass(frozen=True)
class Created:
    """What one creation made on disk, so that a failed bulk write can take it back."""

    folder: Path | str
    """The folder (a :class:`~episodata_core.location.Url` on object storage)."""
    top: Path | None
    """The topmost folder this creation made; ``None`` when ``folder`` was there before."""

    def remove(self) -> None:
        """Remove every file of this creation; the dataset must be closed already.

        Done under a writer lock of its own, so a process that has started writing
        here meanwhile keeps its files.
        """
        lock = location.writer_lock(self.folder)
        try:
            lock.acquire()
        except DatasetStateError:
            return
        try:
            if location.is_remote(self.folder):
                location.clear_folder(self.folder)
            elif self.top is not None:
                shutil.rmtree(self.top)
            else:
                location.clear_folder(self.folder)
        finally:
            lock.release()
        if self.top is None and not location.is_remote(self.folder):
            with contextlib.suppress(FileNotFoundError):
                (Path(self.folder) / location.LOCK_NAME).unlink()


def create(
    cls: type[Dataset],
    schema: DatasetSchema,
    path: str | os.PathLike[str] | None,
    *,
    backend: str | None,
    metadata: Mapping[str, Any] | None,
    options: Mapping[str, Any],
    incomplete: Incomplete | None = None,
) -> tuple[Dataset, Created | None]:
    """:meth:`Dataset.create`, and the creation of bulk writes, which pass ``incomplete``.

    A bulk write's creation may also replace a dataset that an earlier, interrupted
    bulk write left marked incomplete. Returns the dataset and, for a stored one, what
    this call created on disk.
    """
    if not isinstance(schema, DatasetSchema):
        raise ArgumentError(
            f"schema: expected a DatasetSchema, got {type(schema).__name__}; build one "
            "with DatasetSchema([...]) or DatasetSchema.infer(episode)"
        )
    name = backend or registry.default_backend(path)
    backend_cls = registry.get_backend(name)
    backend_options = validate_options(backend_cls, dict(options), f"backend {name!r} option")
    manifest = Manifest(
        backend=name,
        backend_options=backend_options.model_dump(mode="json"),
        schema=schema,
        metadata=dict(metadata or {}),
        provenance=Provenance(
            episodata_version=__version__, plugins=[_plugin_version("backend", name)]
        ),
    )
    created: Created | None = None
    if path is None:
        dataset = cls(backend_cls.create(schema, None, backend_options), manifest)
        hooks.call_hook("before_manifest_written", dataset=dataset, manifest=manifest)
    else:
        if not supports_persistence(backend_cls):
            raise ArgumentError(
                f"backend {name!r} cannot store a dataset at a path; leave out path= or "
                "choose a persistent backend such as 'zarr' or 'npz_directory'"
            )
        manifest.incomplete = incomplete
        dataset, created = create_at(
            cls, location.normalize(path), backend_cls, backend_options, manifest
        )
    hooks.call_hook("after_dataset_created", dataset=dataset)
    return dataset, created


def _refuse_existing(folder: str, state: str, incomplete_ok: bool) -> None:
    """Raise unless a creation may take ``folder`` (in ``state``) over."""
    if state == "foreign":
        raise DatasetStateError(
            f"cannot create a dataset at {folder!r}: it already holds files. Choose a new "
            "path, or an empty folder"
        )
    if state != "dataset":
        return
    incomplete = read_manifest(folder).incomplete
    if incomplete is None:
        raise DatasetStateError(
            f"cannot create a dataset at {folder!r}: it already holds a dataset. Open it "
            "with Dataset.open(path), or choose a new path"
        )
    if not incomplete_ok:
        raise DatasetStateError(
            f"cannot create a dataset at {folder!r}: it already holds a dataset marked "
            f"incomplete ({incomplete.describe()}). Run that {incomplete.operation} again "
            "to replace it, or delete the folder"
        )


def create_at(
    cls: type[Dataset],
    folder: str,
    backend_cls: type[StorageBackend],
    options: BaseModel,
    manifest: Manifest,
) -> tuple[Dataset, Created]:
    """Create ``manifest``'s dataset in ``folder`` (see the module docstring).

    A manifest marked incomplete (a bulk write) may also replace a dataset marked
    incomplete. Returns the dataset, holding this process's writer of the folder.
    """
    operation = "create" if manifest.incomplete is None else manifest.incomplete.operation
    replacing = manifest.incomplete is not None
    remote = location.is_remote(folder)
    if remote:
        location.resolve(folder).check_writable("create a dataset at")
    _refuse_existing(folder, location.creation_state(folder), replacing)
    target: Path | str = folder
    top = None
    if not remote:
        target = Path(folder)
        top = next((p for p in reversed([target, *target.parents]) if not p.exists()), None)
        target.mkdir(parents=True, exist_ok=True)
    lock = location.writer_lock(folder)
    lock.acquire()
    dataset: Dataset | None = None
    try:
        # again under the lock: no other process can be creating or writing here now
        state = location.creation_state(target)
        _refuse_existing(folder, state, replacing)
        if state in ("unfinished", "dataset"):
            location.clear_folder(target)
        location.start_creation(target, operation)
        backend = backend_cls.create(manifest.schema, folder, options)
        try:
            writer = _shared_writer.register_writer(folder, lock, backend, manifest)
        except BaseException:
            backend.close()
            raise
        # from here the handle's lease owns the backend and the lock
        dataset = cls(backend, manifest, writer=writer)
        hooks.call_hook("before_manifest_written", dataset=dataset, manifest=manifest)
        # a manifest marked incomplete need not survive a power loss: without it the
        # folder is an unfinished creation, which is replaced all the same
        dataset._write_manifest(durable=not replacing)
        location.end_creation(target)
    except BaseException:
        if dataset is None:
            lock.release()
        else:
            dataset.close()
        raise
    return dataset, Created(target, top)


def open_at(
    cls: type[Dataset],
    path: str | os.PathLike[str],
    *,
    read_only: bool,
    allow_incomplete: bool,
    options: Mapping[str, Any],
) -> Dataset:
    """:meth:`Dataset.open`: this process's writer of the folder, or a read-only backend."""
    folder = location.normalize(path)
    # a dataset of an older format generation (episodata 0.2) opens read-only
    older = generations.open_older(folder)
    if older is not None:
        return cls(older.backend, older.manifest, read_only=True)
    manifest = read_manifest(folder)
    backend_cls = registry.get_backend(manifest.backend)
    if not supports_persistence(backend_cls):
        raise SchemaError(f"{folder!r}: backend {manifest.backend!r} cannot open stored datasets")
    opts = validate_options(
        backend_cls,
        {**manifest.backend_options, **options},
        f"{folder!r}: backend {manifest.backend!r} option",
    )
    if manifest.incomplete is not None and not allow_incomplete:
        raise incomplete_error(folder, manifest, backend_cls, opts)
    writer = None if read_only else _shared_writer.find_writer(folder)
    if writer is not None:
        return cls(writer.backend, writer.manifest, writer=writer)
    backend = backend_cls.open(folder, opts, writable=False, schema=manifest.schema)
    return cls(backend, manifest, read_only=read_only)


def reopen_remote(
    cls: type[Dataset], folder: str, backend: StorageBackend, manifest: Manifest
) -> Dataset:
    """A read-only handle on a dataset on object storage, from the manifest in memory.

    A fork()ed DataLoader worker must not reach object storage through TensorStore
    itself (the backend reads through a helper), so nothing is read here.
    """
    backend_cls = type(backend)
    if not supports_persistence(backend_cls):
        raise SchemaError(f"{folder!r}: backend {manifest.backend!r} cannot open stored datasets")
    options = validate_options(
        backend_cls,
        dict(manifest.backend_options),
        f"{folder!r}: backend {manifest.backend!r} option",
    )
    reopened = backend_cls.open(folder, options, writable=False, schema=manifest.schema)
    return cls(reopened, manifest, read_only=True)


def incomplete_error(
    folder: str, manifest: Manifest, backend_cls: type[PersistentBackend], options: BaseModel
) -> DatasetStateError:
    """The refusal to open a dataset marked incomplete: what happened and what to do."""
    incomplete = manifest.incomplete
    assert incomplete is not None
    episodes: int | None = None
    # what is on disk is the truth (the manifest's count is as of the last batch); a
    # backend that cannot even open leaves the count of the manifest
    with contextlib.suppress(EpisodataError, OSError, ValueError):
        backend = backend_cls.open(folder, options, writable=False, schema=manifest.schema)
        try:
            episodes = len(backend.episode_table())
        finally:
            backend.close()
    if incomplete.operation == "copy":
        source = incomplete.source or "SOURCE"
        fix = (
            f"finish it with `episodata copy --resume {source} {folder}` (or copy_to(..., "
            "resume=True)), replace it by running the copy again"
        )
    else:
        what = {"import": "the import"}.get(incomplete.operation, incomplete.operation)
        fix = f"replace it by running {what} again with this path"
    return DatasetStateError(
        f"cannot open {folder!r}: incomplete: {incomplete.describe(episodes)}. Its episodes "
        f"are only part of what was meant to be written: {fix}, or pass "
        "allow_incomplete=True to open it anyway and look at what is there"
    )


def take_writer(
    access: DatasetAccess, folder: str, manifest: Manifest
) -> tuple[_shared_writer.SharedWriter, bool]:
    """Take the writer of ``folder``: this process's, or a new one reopening ``access``'s.

    Returns the writer and whether ``access``'s read-only backend was closed for it (a
    writer this process had already leaves it open, for the caller to close). A failed
    writable open puts a read-only backend back into ``access``.
    """
    backend_cls = type(access.backend)
    if not supports_persistence(backend_cls):
        raise DatasetStateError(f"{folder!r}: backend {manifest.backend!r} cannot write there")
    options = backend_cls.Options(**manifest.backend_options)
    own = access.backend
    reopened = False

    def reopen_writable() -> StorageBackend:
        # the read-only instance goes first: some libraries (h5py) refuse to open a
        # file for writing while this process has it open for reading
        nonlocal reopened
        reopened = True
        with access.lock:
            own.close()
            try:
                return backend_cls.open(folder, options, writable=True, schema=manifest.schema)
            except BaseException:
                access.backend = backend_cls.open(
                    folder, options, writable=False, schema=manifest.schema
                )
                raise

    return _shared_writer.open_writer(folder, reopen_writable, manifest), reopened


def _plugin_version(kind: PluginKind, name: str) -> PluginVersion:
    for info in registry.list_plugins(kind):
        if info.name == name and info.distribution is not None:
            return PluginVersion(
                distribution=info.distribution, version=info.version or "", role=kind
            )
    return PluginVersion(distribution="(registered at runtime)", version="", role=kind)
