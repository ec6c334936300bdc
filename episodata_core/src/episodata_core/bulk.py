"""Bulk writes for plugins that fill a dataset from elsewhere (executors, Ray datasinks).

The plugin-author face of the core's bulk writing: a stored dataset created marked
incomplete (so an interrupted write is never mistaken for a complete dataset), rows of
finished episodes appended under the dataset's lock, whole datasets (shards) appended
in order, and the mark cleared once everything is durable. The core's own
``from_episodes``, copies and imports use the same machinery.

Examples
--------
>>> write = start_bulk_write(schema, "out", operation="write_episodes", source="shards")
>>> try:
...     for shard in shards:
...         append_dataset(shard, write.dataset)
...         write.progress()
...     write.finish()
... except BaseException as err:
...     write.fail(err)
...     raise
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from episodata_core import _creation
from episodata_core._batching import add_rows
from episodata_core._bulk import BulkWrite
from episodata_core.manifest import Incomplete

if TYPE_CHECKING:
    from collections.abc import Sequence

    from episodata_core.dataset import Dataset
    from episodata_core.protocols import EpisodeRows
    from episodata_core.schema import DatasetSchema

__all__ = ["BulkWrite", "append_dataset", "append_rows", "start_bulk_write"]


def start_bulk_write(
    schema: DatasetSchema,
    location: str,
    *,
    backend: str | None = None,
    operation: str,
    source: str,
) -> BulkWrite:
    """Create a stored dataset marked incomplete (``operation`` of ``source``).

    A dataset that an earlier, interrupted bulk write left incomplete at ``location`` is
    replaced; anything else there is refused, as :meth:`Dataset.create` does.
    """
    from episodata_core.dataset import Dataset

    dataset, created = _creation.create(
        Dataset,
        schema,
        location,
        backend=backend,
        metadata=None,
        options={},
        incomplete=Incomplete(operation=operation, source=source),
    )
    return BulkWrite(dataset, created)


def append_rows(dataset: Dataset, episodes: Sequence[EpisodeRows]) -> None:
    """Append finished episodes (stored rows, checked by the caller) in one commit."""
    with dataset.access.lock:
        add_rows(dataset.backend, list(episodes))


def append_dataset(source: Dataset, target: Dataset) -> None:
    """Every episode of ``source`` after those of ``target``, in order, in bounded batches."""
    from episodata_core.pipeline.imports import append_episodes

    append_episodes(source, target)
