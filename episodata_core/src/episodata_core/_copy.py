"""Copying a dataset: :meth:`Dataset.copy_to <episodata_core.dataset.Dataset.copy_to>`.

Every episode goes, in order so that ids are kept, to a new dataset that stays marked
incomplete until the copy is done (:class:`~episodata_core._bulk.BulkWrite`); finalized
episodes in byte-bounded batches, through the one batching path of
:mod:`episodata_core._batching`. ``resume=True`` checks the episodes an interrupted copy
kept, completes its ongoing ones and copies the rest.

Below :mod:`episodata_core.dataset` (which calls it): new handles are made through the
source's class, never by importing it.
"""

from __future__ import annotations

import collections
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from episodata_core import _creation, location
from episodata_core._batching import add_rows, batch_bytes, batched_by_bytes, nbytes_of
from episodata_core._bulk import BulkWrite
from episodata_core._progress import progress_bar
from episodata_core.errors import DatasetStateError
from episodata_core.manifest import Incomplete, read_manifest
from episodata_core.protocols import EpisodeRows

if TYPE_CHECKING:
    import os
    from collections.abc import Callable, Iterable, Iterator, Mapping
    from concurrent.futures import Future

    from episodata_core._creation import Created
    from episodata_core.dataset import Dataset

__all__ = ["copy_dataset"]


def copy_dataset(
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
        target, created = _creation.create(
            type(source),
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
        with target.access.lock:
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


T = TypeVar("T")

_READ_AHEAD = 16
"""Episodes read concurrently ahead of a copy from object storage, where every read is
a round trip: one at a time, a copy S3 -> local ran at a tenth of TensorStore's speed."""


def _read_ahead(read: Callable[[int], T], indexes: Iterable[int], *, remote: bool) -> Iterator[T]:
    """``read(i)`` for each index in order; from object storage, a few in flight at once."""
    if not remote:
        for index in indexes:
            yield read(index)
        return
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=8, thread_name_prefix="episodata-copy") as pool:
        pending: collections.deque[Future[T]] = collections.deque()
        for index in indexes:
            pending.append(pool.submit(read, index))
            if len(pending) >= _READ_AHEAD:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


def _copy_from(
    source: Dataset, target: Dataset, start: int, progress: bool, bulk: BulkWrite
) -> None:
    """Copy episodes ``start..`` of ``source`` to ``target``, in order, in batches.

    Finalized episodes go in byte-bounded batches (one commit each where the backend
    takes several at once); an ongoing one closes the batch before it, so ids stay.
    """
    table = source.backend.episode_table()
    count = len(table)
    keys = source.schema.qualified_keys
    access = target.access

    def read(index: int) -> tuple[int, EpisodeRows]:
        fields = [key for key in keys if key not in table.present or table.present[key][index]]
        rows = source.backend.read_rows(index, 0, int(table.length[index]) + 1, fields)
        flags = bool(table.terminated[index]), bool(table.truncated[index])
        return index, EpisodeRows(rows, terminated=flags[0], truncated=flags[1])

    episodes = progress_bar(
        _read_ahead(read, range(start, count), remote=location.is_remote(source.location or "")),
        enabled=progress,
        what="episodes",
        action="copying",
        total=count - start,
        nbytes=lambda item: nbytes_of(item[1].rows),
    )
    for batch in batched_by_bytes(
        episodes,
        batch_bytes(target.backend),
        lambda item: nbytes_of(item[1].rows),
        alone=lambda item: bool(table.ongoing[item[0]]),
    ):
        first, episode = batch[0]
        with access.lock:
            if table.ongoing[first]:
                copied = [access.backend.start_episode(episode.rows)]
            else:
                copied = add_rows(access.backend, [new for _, new in batch])
        assert copied == [index for index, _ in batch], "episode ids are kept by copying in order"
        bulk.progress()
    assert target.num_episodes == count, "episode ids are kept by copying in order"
