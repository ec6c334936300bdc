"""Writes of whole episodes: checked all before any is written, and bulk writes.

:func:`add_checked` is :meth:`Dataset.add_episodes
<episodata_core.dataset.Dataset.add_episodes>`: every episode is validated, then all
go to the backend at once (:func:`~episodata_core._batching.add_rows`).

Bulk writes (``from_episodes``, ``copy_to``, ``import_dataset``) create their dataset
with ``manifest.incomplete`` set and clear it only once the last episode is durable, so
a writer killed or interrupted half-way leaves a dataset that ``Dataset.open`` refuses
instead of a partial one that looks complete. A bad episode (any ``Exception``) removes
what the call created; a ``KeyboardInterrupt`` leaves the marked dataset, which a rerun
replaces and a copy with ``resume=True`` finishes.
"""

from __future__ import annotations

import contextlib
import itertools
import time
from typing import TYPE_CHECKING, Any

from episodata_core import _creation, hooks
from episodata_core._batching import add_rows, batch_bytes, batched_by_bytes, nbytes_of
from episodata_core.errors import ArgumentError
from episodata_core.manifest import Incomplete
from episodata_core.normalize import split_episode, to_rows
from episodata_core.protocols import EpisodeRows
from episodata_core.schema import DatasetSchema

if TYPE_CHECKING:
    import os
    from collections.abc import Callable, Iterable, Mapping

    from episodata_core._access import DatasetAccess
    from episodata_core._creation import Created
    from episodata_core.dataset import Dataset
    from episodata_core.normalize import Alignment

__all__ = ["BulkWrite", "add_checked", "checked", "from_episodes"]


def checked(
    episode: Mapping[str, Any], schema: DatasetSchema, where: str, alignment: Alignment | None
) -> EpisodeRows:
    """A bulk episode as checked storage rows; raises before anything is written."""
    split = split_episode(episode, schema, alignment=alignment, where=where)
    rows = to_rows(split, schema, where=where)
    return EpisodeRows(rows, terminated=split.terminated, truncated=split.truncated)


def add_checked(
    access: DatasetAccess,
    episodes: Iterable[Mapping[str, Any]],
    alignment: Alignment | None,
    name_items: str | None,
    on_written: Callable[[int], None],
) -> list[int]:
    """Validate every episode, then write them all; ``name_items`` labels errors.

    ``on_written`` is called with each new id once all are written.
    """
    first = len(access.snapshot())
    schema = access.schema
    rows = [
        checked(
            episode,
            schema,
            f"episode {first + k}" + (f" (item {k} of {name_items})" if name_items else ""),
            alignment,
        )
        for k, episode in enumerate(episodes)
    ]
    if not rows:
        return []
    with access.lock:
        ids = add_rows(access.backend, rows)
    for index in ids:
        on_written(index)
    return ids


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
        hooks.call_hook("before_manifest_written", dataset=dataset, manifest=dataset.manifest)
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
            raise ArgumentError("from_episodes: no episodes to infer a schema from; pass schema=")
        schema = DatasetSchema.infer(first, alignment=alignment)
    if first is not None:
        # a bad first episode is refused before anything exists on disk
        split = split_episode(first, schema, alignment=alignment, where="episode 0")
        to_rows(split, schema, where="episode 0")
    dataset, created = _creation.create(
        cls,
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
        for batch in batched_by_bytes(everything, batch_bytes(dataset.backend), nbytes_of):
            dataset._add_validated(batch, alignment, name_items=None)
            bulk.progress()
        bulk.finish()
    except BaseException as err:
        bulk.fail(err)
        raise
    return dataset
