"""One episode of a dataset: its length, flags and transition reads."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from episodata_core.views import Flags, Segment, Transition

if TYPE_CHECKING:
    from collections.abc import Iterable

    from episodata_core._access import DatasetAccess
    from episodata_core.dataset import Dataset

__all__ = ["Episode"]


class Episode:
    """One episode of a dataset: its flags, length and transition reads.

    Made from a :class:`~episodata_core.dataset.Dataset`, or from the access object of
    one (an index's filter gets those): both give the backend and schema it reads.
    """

    __slots__ = ("_dataset", "_index")

    def __init__(self, dataset: Dataset | DatasetAccess, index: int) -> None:
        self._dataset = dataset
        self._index = index

    @property
    def index(self) -> int:
        """The episode's position in the dataset (its id): ``dataset.episode(index)``."""
        return self._index

    @property
    def id(self) -> int:
        """The episode's id, the same as :attr:`index` (0.2's name)."""
        return self._index

    @property
    def length(self) -> int:
        """T, the number of transitions written so far (``len(episode)``)."""
        return self._status()[0]

    def _status(self) -> tuple[int, bool, bool, bool]:
        table = self._dataset.backend.episode_table()
        i = self.index
        return (
            int(table.length[i]),
            bool(table.terminated[i]),
            bool(table.truncated[i]),
            bool(table.ongoing[i]),
        )

    def __len__(self) -> int:
        """T, the number of transitions written so far."""
        return self._status()[0]

    @property
    def terminated(self) -> bool:
        """Whether the episode ended in a terminal state."""
        return self._status()[1]

    @property
    def truncated(self) -> bool:
        """Whether the episode was cut short (a time limit, a crash, a dropped step)."""
        return self._status()[2]

    @property
    def ongoing(self) -> bool:
        """Whether steps may still be added."""
        return self._status()[3]

    def __repr__(self) -> str:
        length, terminated, truncated, ongoing = self._status()
        state = "ongoing" if ongoing else f"terminated={terminated}, truncated={truncated}"
        return f"Episode({self.index}, len={length}, {state})"

    def _present_fields(self, fields: str | Iterable[str] | None) -> tuple[str, ...]:
        table = self._dataset.backend.episode_table()
        chosen = self._dataset.schema.resolve(fields)
        return tuple(
            spec.qualified_key
            for spec in chosen
            if spec.qualified_key not in table.present
            or table.present[spec.qualified_key][self.index]
        )

    def read(self, fields: str | Iterable[str] | None = None) -> Segment:
        """Every transition of the episode: ``obs`` ``[T, ...]``, ``all_obs`` ``[T + 1, ...]``.

        The arrays may be views of the stored rows; those are read-only (copy before
        changing them in place), and the same holds for :meth:`segment` and :meth:`step`.
        """
        return self.segment(0, None, fields=fields)

    def segment(
        self,
        start: int | None = 0,
        stop: int | None = None,
        fields: str | Iterable[str] | None = None,
    ) -> Segment:
        """Transitions ``[start, stop)``, with Python's slice rules for negatives and ``None``."""
        length, terminated, truncated, ongoing = self._status()
        first, last, _ = slice(start, stop).indices(length)
        last = max(first, last)
        rows = self._dataset.backend.read_rows(
            self.index, first, last + 1, self._present_fields(fields)
        )
        flags = _episode_flags(last - first, last == length and not ongoing, terminated, truncated)
        return Segment(self._dataset.schema, rows, flags)

    def step(self, t: int, *, fields: str | Iterable[str] | None = None) -> Transition:
        """Transition ``t`` with the time axis removed (negative ``t`` counts from the end)."""
        length, terminated, truncated, ongoing = self._status()
        position = t + length if t < 0 else t
        if not 0 <= position < length:
            raise IndexError(
                f"step {t} is out of range for episode {self.index} of length {length}"
            )
        rows = self._dataset.backend.read_rows(
            self.index, position, position + 2, self._present_fields(fields)
        )
        is_last = position == length - 1 and not ongoing
        flags = Flags(
            np.bool_(is_last and terminated), np.bool_(is_last and truncated), np.bool_(True)
        )
        return Transition(self._dataset.schema, rows, flags)


def _episode_flags(count: int, reaches_end: bool, terminated: bool, truncated: bool) -> Flags:
    term = np.zeros(count, dtype=bool)
    trunc = np.zeros(count, dtype=bool)
    if reaches_end and count:
        term[-1], trunc[-1] = terminated, truncated
    return Flags(term, trunc, np.ones(count, dtype=bool))
