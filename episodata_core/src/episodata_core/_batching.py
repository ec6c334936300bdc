"""Group episodes into write batches bounded by their bytes.

A durable commit costs about as much for many episodes as for one, so bulk writers
(``from_episodes``, ``copy_to``, importers) hand episodes to the backend in batches; the
byte bound keeps what a batch holds in memory small next to the data.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from episodata_core.protocols import SupportsAddEpisodes, supports_persistence

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Sequence

    from episodata_core.protocols import EpisodeRows, StorageBackend

__all__ = ["BATCH_BYTES", "add_rows", "batch_bytes", "batched_by_bytes", "nbytes_of"]

BATCH_BYTES = 64 << 20
"""Default bound of one write batch."""

T = TypeVar("T")


def batch_bytes(backend: StorageBackend) -> int:
    """How many bytes of episodes bulk writes to ``backend`` group in one batch.

    Batches pay off where each write is a durable commit; in memory they would only
    keep a batch of episodes alive at once, so there every episode goes alone (0).
    """
    return BATCH_BYTES if supports_persistence(backend) else 0


def nbytes_of(value: Any) -> int:
    """Bytes of the arrays in a (nested) mapping of arrays; views count what they show."""
    if isinstance(value, Mapping):
        return sum(nbytes_of(item) for item in value.values())
    return int(getattr(value, "nbytes", 0))


def batched_by_bytes(
    items: Iterable[T],
    max_bytes: int,
    size: Callable[[T], int],
    *,
    alone: Callable[[T], bool] | None = None,
) -> Iterator[list[T]]:
    """Consecutive runs of ``items``, each closed once its ``size`` total reaches ``max_bytes``.

    Every run holds at least one item; an item larger than ``max_bytes`` is a run alone,
    and so is an item for which ``alone`` is true (the run before it closes first, so
    the order of ``items`` is kept).
    """
    run: list[T] = []
    total = 0
    for item in items:
        if alone is not None and alone(item):
            if run:
                yield run
                run, total = [], 0
            yield [item]
            continue
        run.append(item)
        total += size(item)
        if total >= max_bytes:
            yield run
            run, total = [], 0
    if run:
        yield run


def add_rows(backend: StorageBackend, episodes: Sequence[EpisodeRows]) -> list[int]:
    """Checked episodes to ``backend``: in one call where it can take several."""
    if not episodes:
        return []
    if isinstance(backend, SupportsAddEpisodes):
        return backend.add_episodes(episodes)
    return [
        backend.add_episode(new.rows, terminated=new.terminated, truncated=new.truncated)
        for new in episodes
    ]
