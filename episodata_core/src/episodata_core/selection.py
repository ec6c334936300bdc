"""Row ranges of episodes read by field key: :class:`Selection` and :func:`read_fields`.

This is the 0.2 API's way to read storage directly: a backend answers
``read_fields(keys, selections)`` with one mapping per selection, and
``episode_length(id)`` with the episode's stored rows (T + 1). The built-in backends
implement both (:class:`~episodata_core.protocols.SupportsReadFields`) with the functions
here, which turn a list of selections into ONE :meth:`gather_rows` call, so any backend
that gathers answers them at the cost of a sampled batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from episodata_core.errors import FieldNotFoundError
from episodata_core.protocols import GatherRequest

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    import numpy.typing as npt

    from episodata_core.protocols import EpisodeTable, StorageBackend

__all__ = ["ReadsSelections", "Selection", "episode_length", "read_fields"]


@dataclass(frozen=True)
class Selection:
    """Rows ``[start, stop)`` of episode ``episode_id``, in storage rows.

    Row 0 of an episode is its reset row, so an episode of T transitions has T + 1 rows
    (:func:`episode_length`); ``Selection(3, 0, 5)`` reads the first five rows of
    episode 3.
    """

    episode_id: int
    start: int
    stop: int

    def __post_init__(self) -> None:
        for name in ("episode_id", "start", "stop"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | np.integer):
                raise TypeError(f"Selection.{name} must be an int, got {value!r}")
            if value < 0:
                raise ValueError(f"Selection.{name} must be >= 0, got {value}")
        if self.stop < self.start:
            raise ValueError(f"Selection: stop ({self.stop}) is before start ({self.start})")

    @property
    def length(self) -> int:
        """How many rows the selection reads: ``stop - start``."""
        return self.stop - self.start


def episode_length(backend: StorageBackend, episode_id: int) -> int:
    """Stored rows of one episode, T + 1 (the reset row and one per step)."""
    table = backend.episode_table()
    _check_episode(table, int(episode_id))
    return int(table.length[int(episode_id)]) + 1


def read_fields(
    backend: StorageBackend, keys: Iterable[str], selections: Sequence[Selection]
) -> list[dict[str, npt.NDArray[Any]]]:
    """Read ``keys`` over every selection with one batched backend read.

    ``keys`` are flat field keys (``"camera"``, ``"keyboard/jump"``; unique across
    roles) or qualified ones (``"observation/camera"``). The result has one mapping per
    selection, in the order given, from each key (as given, in the order given) to
    ``[selection.length, *field.shape]`` rows of the field dtype.

    Raises
    ------
    KeyError
        A key the schema does not have, or an optional field absent from one of the
        selected episodes.
    IndexError
        A selection past the end of its episode, or an episode that does not exist.
    """
    keys = list(keys)
    schema = backend.schema
    specs = [schema.field(key) for key in keys]
    qualified = tuple(dict.fromkeys(spec.qualified_key for spec in specs))
    if not selections:
        return []
    table = backend.episode_table()
    episodes = np.array([s.episode_id for s in selections], dtype=np.int64)
    starts = np.array([s.start for s in selections], dtype=np.int64)
    counts = np.array([s.length for s in selections], dtype=np.int64)
    for selection in selections:
        _check_selection(table, selection)
    for spec in specs:
        present = table.present.get(spec.qualified_key)
        if present is None:
            continue
        missing = [int(e) for e in episodes if not present[e]]
        if missing:
            raise FieldNotFoundError(
                f"optional {spec.role} field {spec.key!r} is absent from episode "
                f"{missing[0]}; select episodes that have it, or read other fields"
            )
    request = GatherRequest(
        episodes=episodes,
        starts=starts,
        counts=counts,
        offsets=np.zeros_like(counts),
        num_rows=int(counts.max()),
        fields=qualified,
    )
    # one read for the whole list; each selection's rows are a view of that buffer
    buffers = backend.gather_rows(request)
    return [
        {key: buffers[spec.qualified_key][b, :count] for key, spec in zip(keys, specs, strict=True)}
        for b, count in enumerate(counts.tolist())
    ]


def _check_episode(table: EpisodeTable, episode_id: int) -> None:
    if not 0 <= episode_id < len(table):
        raise IndexError(f"episode {episode_id} does not exist (the backend has {len(table)})")


def _check_selection(table: EpisodeTable, selection: Selection) -> None:
    _check_episode(table, selection.episode_id)
    rows = int(table.length[selection.episode_id]) + 1
    if selection.stop > rows:
        raise IndexError(
            f"{selection} reaches past episode {selection.episode_id}, which has {rows} "
            f"rows (its {rows - 1} transitions and the reset row)"
        )


class ReadsSelections:
    """The 0.2 direct reads as backend methods, answered through the backend's gather.

    A backend class that lists this base answers ``read_fields`` and ``episode_length``
    (:class:`~episodata_core.protocols.SupportsReadFields`) with the functions above,
    instead of each backend writing the same two delegations.
    """

    __slots__ = ()

    def read_fields(
        self, keys: Iterable[str], selections: Sequence[Selection]
    ) -> list[dict[str, npt.NDArray[Any]]]:
        """Rows of ``keys`` for each selection (0.2's read), with one ``gather_rows``."""
        return read_fields(cast("StorageBackend", self), keys, selections)

    def episode_length(self, episode_id: int) -> int:
        """Stored rows of the episode: T + 1."""
        return episode_length(cast("StorageBackend", self), episode_id)
