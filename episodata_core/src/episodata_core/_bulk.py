"""Creating a dataset at a path, and bulk writes that are marked incomplete until done.

A creation at a path goes: refuse anything but an absent or empty folder, a creation
that never wrote its manifest, or (for a bulk write) a dataset that an earlier bulk
write left marked incomplete; make the folder, take the writer lock, write the creation
marker (:data:`~episodata_core.location.CREATING_NAME`); let the backend lay out its
files; write ``manifest.json``; remove the marker. A folder that holds the marker but no
manifest is recognizably an unfinished creation, which the next creation takes over.

Bulk writes (``from_episodes``, ``copy_to``, ``import_dataset``) create their dataset
with ``manifest.incomplete`` set and clear it only once the last episode is durable, so
a writer killed or interrupted half-way leaves a dataset that ``Dataset.open`` refuses
instead of a partial one that looks complete. A bad episode (any ``Exception``) removes
what the call created; a ``KeyboardInterrupt`` leaves the marked dataset, which a rerun
replaces and a copy with ``resume=True`` finishes.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from episodata_core import _shared_writer, hooks, location
from episodata_core._batching import add_rows, batched_by_bytes, nbytes_of
from episodata_core._progress import progress_bar
from episodata_core.errors import DatasetStateError, EpisodataError, SchemaError
from episodata_core.manifest import Incomplete, read_manifest
from episodata_core.normalize import split_episode, to_rows
from episodata_core.protocols import EpisodeRows
from episodata_core.schema import DatasetSchema

if TYPE_CHECKING:
    import os
    from collections.abc import Iterable, Iterator, Mapping

    from pydantic import BaseModel

    from episodata_core.dataset import Dataset
    from episodata_core.manifest import Manifest
    from episodata_core.normalize import Alignment
    from episodata_core.protocols import StorageBackend

__all__ = ["BulkWrite", "Created", "copy", "create_at", "from_episodes", "incomplete_error"]


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
        location.start_creation(target, manifest.incomplete.operation if replacing else "create")  # type: ignore[union-attr]
        store = backend_cls.create(manifest.schema, folder, options)
        try:
            writer = _shared_writer.register_writer(folder, lock, store, manifest)
        except BaseException:
            store.close()
            raise
        # from here the handle's lease owns the backend and the lock
        dataset = cls(store, manifest, writer=writer)
        hooks.get_plugin_manager().hook.before_manifest_written(dataset=dataset, manifest=manifest)
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


def incomplete_error(
    folder: str, manifest: Manifest, backend_cls: Any, options: BaseModel
) -> DatasetStateError:
    """The refusal to open a dataset marked incomplete: what happened and what to do."""
    incomplete = manifest.incomplete
    assert incomplete is not None
    episodes: int | None = None
    # what is on disk is the truth (the manifest's count is as of the last batch); a
    # backend that cannot even open leaves the count of the manifest
    with contextlib.suppress(EpisodataError, OSError, ValueError):
        store = backend_cls.open(folder, options, writable=False)
        try:
            episodes = len(store.episode_table())
        finally:
            store.close()
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


class BulkWrite:
    """A stored dataset being filled by one bulk write; marked incomplete until done."""

    PROGRESS_EVERY = 1.0
    """Seconds between progress records: short writes need none, long ones a few."""

    def __init__(self, dataset: Dataset, created: Created | None) -> None:
        self.dataset = dataset
        self.created = created
        self._recorded = time.monotonic()

    def progress(self, *, now: bool = False) -> None:
        """Record how many episodes are durable, at most every :attr:`PROGRESS_EVERY`.

        A hint for people reading the manifest; ``open`` counts what is on disk.
        ``now`` records at once.
        """
        incomplete = self.dataset.manifest.incomplete
        if incomplete is None:
            return
        if not now and time.monotonic() - self._recorded < self.PROGRESS_EVERY:
            return
        incomplete.episodes_done = self.dataset.num_episodes
        self.dataset._write_manifest(durable=False)
        self._recorded = time.monotonic()

    def finish(self) -> None:
        """Everything is written: make it durable, then clear the mark."""
        dataset = self.dataset
        dataset.flush()
        if dataset.manifest.incomplete is None:
            return
        dataset.manifest.incomplete = None
        hooks.get_plugin_manager().hook.before_manifest_written(
            dataset=dataset, manifest=dataset.manifest
        )
        dataset._write_manifest()

    def fail(self, error: BaseException) -> None:
        """Undo (a bad episode: remove what this call created) or leave the mark (Ctrl-C)."""
        dataset = self.dataset
        remove = isinstance(error, Exception) and self.created is not None
        # best effort: nothing here may hide the error that is on its way to the caller
        if not remove:
            # the mark stays: record the progress so that the message is accurate
            with contextlib.suppress(Exception):
                self.progress(now=True)
        with contextlib.suppress(Exception):
            dataset.close()
        if remove:
            assert self.created is not None
            self.created.remove()
            error.add_note(f"nothing was kept at {str(self.created.folder)!r}")


def from_episodes(
    cls: type[Dataset],
    episodes: Iterable[Mapping[str, Any]],
    schema: DatasetSchema | None,
    path: str | os.PathLike[str] | None,
    *,
    backend: str | None,
    alignment: Alignment | None,
    metadata: Mapping[str, Any] | None,
    options: Mapping[str, Any],
) -> Dataset:
    """:meth:`Dataset.from_episodes`."""
    iterator = iter(episodes)
    first = next(iterator, None)
    if schema is None:
        if first is None:
            raise SchemaError("from_episodes: no episodes to infer a schema from; pass schema=")
        schema = DatasetSchema.infer(first, alignment=alignment)
    if first is not None:
        # a bad first episode is refused before anything exists on disk
        split = split_episode(first, schema, alignment=alignment, where="episode 0")
        to_rows(split, schema, where="episode 0")
    dataset, created = cls._create(
        schema,
        path,
        backend=backend,
        metadata=metadata,
        options=options,
        incomplete=Incomplete(operation="from_episodes"),
    )
    if first is None:
        BulkWrite(dataset, created).finish()
        return dataset
    everything = itertools.chain([first], iterator)
    del first  # the first episode need not outlive its write
    bulk = BulkWrite(dataset, created)
    try:
        # in memory the bound is 0: every episode is a batch of its own
        for batch in batched_by_bytes(everything, dataset._batch_bytes(), nbytes_of):
            dataset._add_validated(batch, alignment, name_items=None)
            bulk.progress()
        bulk.finish()
    except BaseException as err:
        bulk.fail(err)
        raise
    return dataset


def copy(
    source: Dataset,
    path: str | os.PathLike[str] | None,
    *,
    backend: str | None,
    progress: bool,
    resume: bool,
    options: Mapping[str, Any],
) -> Dataset:
    """:meth:`Dataset.copy_to`."""
    start = 0
    target: Dataset | None = None
    created: Created | None = None
    if resume and path is not None:
        target = _resume_target(source, location.normalize(path), backend, options)
    if target is None:
        target, created = source._create(
            source.schema,
            path,
            backend=backend,
            metadata=source.manifest.metadata,
            options=options,
            incomplete=Incomplete(operation="copy", source=source.location),
        )
    bulk = BulkWrite(target, created)
    try:
        if created is None and target.location is not None:
            start = _finish_copied(source, target)
        _copy_from(source, target, start, progress, bulk)
        bulk.finish()
    except BaseException as err:
        bulk.fail(err)
        raise
    return target


def _resume_target(
    source: Dataset, folder: str, backend: str | None, options: Mapping[str, Any]
) -> Dataset | None:
    """The copy to finish at ``folder``, opened for writing; ``None``: nothing to resume."""
    if location.creation_state(folder) != "dataset":
        return None  # absent, empty or an unfinished creation: a fresh copy takes it
    manifest = read_manifest(folder)
    incomplete = manifest.incomplete
    if incomplete is None:
        raise DatasetStateError(
            f"cannot resume a copy into {folder!r}: it is a complete dataset, so there is "
            "nothing to resume. Choose a new destination, or delete it to copy again"
        )
    if incomplete.operation != "copy":
        raise DatasetStateError(
            f"cannot resume a copy into {folder!r}: it was left by an interrupted "
            f"{incomplete.operation}, not a copy; copy without resume to replace it"
        )
    problems = []
    if backend is not None and backend != manifest.backend:
        problems.append(f"its backend is {manifest.backend!r}, not {backend!r}")
    if manifest.schema != source.schema:
        problems.append("its schema differs from the source's")
    if problems:
        raise DatasetStateError(
            f"cannot resume a copy into {folder!r}: {'; '.join(problems)}; copy without "
            "resume to replace it"
        )
    target = type(source).open(folder, allow_incomplete=True, **options)
    try:
        target._prepare_write()  # the writable open recovers what the killed copy left
    except BaseException:
        target.close()
        raise
    return target


def _finish_copied(source: Dataset, target: Dataset) -> int:
    """Check the episodes a resumed copy kept, complete its ongoing ones; the next id.

    The episodes already copied must be a prefix of the source with the same lengths
    and flags (ongoing ones may be shorter: they were recovered to their last flush).
    """
    have = target.backend.episode_table()
    want = source.backend.episode_table()
    count = len(have)
    folder = target.location
    if count > len(want):
        raise DatasetStateError(
            f"cannot resume the copy into {folder!r}: it holds {count} episodes, the source "
            f"only {len(want)}; copy without resume to replace it"
        )
    done = ~have.ongoing[:count]
    same = (
        (have.length[:count] == want.length[:count])
        & (have.terminated[:count] == want.terminated[:count])
        & (have.truncated[:count] == want.truncated[:count])
        & ~want.ongoing[:count]
    )
    shorter = have.length[:count] <= want.length[:count]
    wrong = np.flatnonzero(np.where(done, ~same, ~shorter))
    if len(wrong):
        raise DatasetStateError(
            f"cannot resume the copy into {folder!r}: episode {int(wrong[0])} differs from the "
            "source's (length or flags); copy without resume to replace it"
        )
    keys = source.schema.qualified_keys
    for index in np.flatnonzero(have.ongoing[:count]).tolist():
        fields = [k for k in keys if k not in have.present or have.present[k][index]]
        kept, stop = int(have.length[index]) + 1, int(want.length[index]) + 1
        with target._io_lock:
            if stop > kept:
                rows = source.backend.read_rows(index, kept, stop, fields)
                target.backend.append_rows(index, rows)
            if not want.ongoing[index]:
                target.backend.finalize_episode(
                    index,
                    terminated=bool(want.terminated[index]),
                    truncated=bool(want.truncated[index]),
                )
    return count


_READ_AHEAD = 16
"""Episodes read concurrently ahead of a copy from object storage, where every read is
a round trip: one at a time, a copy S3 -> local ran at a tenth of TensorStore's speed."""


def _read_ahead(read: Any, indexes: range, *, remote: bool) -> Iterator[Any]:
    """``read(i)`` for each index in order; from object storage, a few in flight at once."""
    if not remote:
        for index in indexes:
            yield read(index)
        return
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=8, thread_name_prefix="episodata-copy") as pool:
        pending: collections.deque[Any] = collections.deque()
        for index in indexes:
            pending.append(pool.submit(read, index))
            if len(pending) >= _READ_AHEAD:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


def _copy_from(
    source: Dataset, target: Dataset, start: int, progress: bool, bulk: BulkWrite
) -> None:
    """Copy episodes ``start..`` of ``source`` to ``target``, in order, in batches."""
    table = source.backend.episode_table()
    count = len(table)
    keys = source.schema.qualified_keys
    pending: list[EpisodeRows] = []
    pending_bytes = 0

    def write_pending() -> None:
        nonlocal pending, pending_bytes
        if pending:
            with target._io_lock:
                add_rows(target.backend, pending)
            pending, pending_bytes = [], 0
            bulk.progress()

    def read(index: int) -> Any:
        fields = [key for key in keys if key not in table.present or table.present[key][index]]
        return source.backend.read_rows(index, 0, int(table.length[index]) + 1, fields)

    for index, rows in zip(
        progress_bar(range(start, count), enabled=progress, what="episodes", action="copying"),
        _read_ahead(read, range(start, count), remote=location.is_remote(source.location or "")),
        strict=True,
    ):
        if table.ongoing[index]:
            # ids are kept by writing in order: the batch before this episode goes first
            write_pending()
            with target._io_lock:
                copied = target.backend.start_episode(rows)
            assert copied == index, "episode ids are kept by copying in order"
            continue
        terminated, truncated = bool(table.terminated[index]), bool(table.truncated[index])
        pending.append(EpisodeRows(rows, terminated=terminated, truncated=truncated))
        pending_bytes += nbytes_of(rows)
        if pending_bytes >= target._batch_bytes():
            write_pending()
    write_pending()
    assert target.num_episodes == count, "episode ids are kept by copying in order"
