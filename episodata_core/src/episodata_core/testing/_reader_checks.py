"""The oracle of the concurrent-reader check: what every row a reader samples must hold.

Every episode of the check is a kill-chain episode (:func:`~episodata_core.testing.
_crash_writer.chain_episode`, variant 0: the check never kills its writer, so ids are
never reused) plus one info field, ``reader_tag``, whose row ``r`` of episode ``e`` holds
``[e + 1, r + 1]``. A reader therefore learns from the rows alone which episode and row a
sampled window or transition claims to be (never from the sampler's bookkeeping), rebuilds
that episode from its id, and compares every field; a row of zeros where data should be
(tag ``[0, 0]``) belongs to no episode.

Lengths and flags are checked against two snapshots of the episode table that bracket
the read: an episode finalized in the ``older`` one must carry its flags on its last
transition, one still ongoing in the ``newer`` one must carry none, and a read holds at
least the rows of ``older`` and at most those of ``newer``. Between two ``refresh()``
calls a reader's table stays put, so for reads made in the reader's own thread both are
one table and every check is exact; a stream that reads ahead in its thread, or
DataLoader workers that reopen the dataset, are bracketed by the tables before and after.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from episodata_core.schema import DatasetSchema, FieldSpec
from episodata_core.testing._crash_writer import ChainEpisode, chain_episode

if TYPE_CHECKING:
    from collections.abc import Mapping

    import numpy.typing as npt

    from episodata_core.protocols import EpisodeTable

TAG_KEY = "info/reader_tag"
"""The qualified key of the field that names each row's episode and row (both + 1)."""


def reader_schema(base: DatasetSchema) -> DatasetSchema:
    """``base`` plus the ``reader_tag`` info field (``[2]`` int64 per row)."""
    if TAG_KEY in base.qualified_keys:
        return base
    return DatasetSchema([*base, FieldSpec("reader_tag", shape=(2,), dtype="int64", role="info")])


def reader_episode(schema: DatasetSchema, episode: int) -> ChainEpisode:
    """Rows ``[L + 1, ...]`` and flags of episode ``episode``: a chain episode, tagged."""
    content = chain_episode(schema, episode)
    rows = dict(content.rows)
    count = content.num_rows
    rows[TAG_KEY] = np.stack(
        [np.full(count, episode + 1, dtype=np.int64), np.arange(1, count + 1, dtype=np.int64)],
        axis=1,
    )
    return ChainEpisode(rows, content.terminated, content.truncated)


@dataclass(frozen=True)
class TableState:
    """A copy of an episode table (backends hand out views that a refresh changes)."""

    length: npt.NDArray[np.int64]
    ongoing: npt.NDArray[np.bool_]
    terminated: npt.NDArray[np.bool_]
    truncated: npt.NDArray[np.bool_]
    present: dict[str, npt.NDArray[np.bool_]]

    @classmethod
    def of(cls, table: EpisodeTable) -> TableState:
        """Copy ``table``."""
        return cls(
            np.array(table.length, dtype=np.int64),
            np.array(table.ongoing, dtype=bool),
            np.array(table.terminated, dtype=bool),
            np.array(table.truncated, dtype=bool),
            {key: np.array(column, dtype=bool) for key, column in table.present.items()},
        )

    def __len__(self) -> int:
        return len(self.length)

    def difference(self, other: TableState) -> str | None:
        """How ``other`` differs from this table (episodes, lengths, states), or None."""
        if len(other) != len(self):
            return f"{len(self)} -> {len(other)} episodes"
        changed = np.flatnonzero(
            (other.length != self.length)
            | (other.ongoing != self.ongoing)
            | (other.terminated != self.terminated)
            | (other.truncated != self.truncated)
        )
        if not len(changed):
            return None
        e = int(changed[0])
        return (
            f"episode {e} (length, ongoing) ({self.length[e]}, {self.ongoing[e]}) -> "
            f"({other.length[e]}, {other.ongoing[e]})"
        )

    def finalized(self, episode: int) -> bool:
        """Whether ``episode`` exists here and is finalized."""
        return episode < len(self) and not bool(self.ongoing[episode])


def _show(value: Any) -> str:
    return np.array2string(np.asarray(value), threshold=12, edgeitems=3, max_line_width=200)


class Oracle:
    """Expected episodes of the check, built from their ids (and kept: they never change)."""

    def __init__(self, schema: DatasetSchema) -> None:
        self.schema = schema
        self._episodes: dict[int, ChainEpisode] = {}
        self._zeros = {
            spec.qualified_key: np.zeros(spec.shape, dtype=spec.np_dtype) for spec in schema
        }

    def episode(self, episode: int) -> ChainEpisode:
        """The content of ``episode``."""
        content = self._episodes.get(episode)
        if content is None:
            content = self._episodes[episode] = reader_episode(self.schema, episode)
        return content

    # -- the episode table ----------------------------------------------------------------

    def check_table(self, older: TableState | None, table: TableState) -> list[str]:
        """``table`` against the oracle and against the ``older`` table of the same reader.

        Episodes never disappear; a finalized episode stays finalized with its length and
        flags; an ongoing one never shrinks. Every finalized episode has exactly its rows
        and flags, every ongoing one a prefix of its rows, and optional fields are present
        exactly where the oracle has them.
        """
        problems: list[str] = []
        if older is not None:
            if len(table) < len(older):
                problems.append(f"table: {len(table)} episodes after {len(older)} were visible")
            for episode in range(min(len(older), len(table))):
                if older.finalized(episode):
                    if table.ongoing[episode]:
                        problems.append(f"table: episode {episode} was finalized, is ongoing now")
                    elif (
                        table.length[episode],
                        table.terminated[episode],
                        table.truncated[episode],
                    ) != (
                        older.length[episode],
                        older.terminated[episode],
                        older.truncated[episode],
                    ):
                        problems.append(
                            f"table: finalized episode {episode} changed from length "
                            f"{older.length[episode]} to {table.length[episode]} or its flags"
                        )
                elif table.length[episode] < older.length[episode]:
                    problems.append(
                        f"table: ongoing episode {episode} shrank from {older.length[episode]} "
                        f"to {table.length[episode]} transitions"
                    )
        for episode in range(len(table)):
            content = self.episode(episode)
            length = int(table.length[episode])
            if table.ongoing[episode]:
                if length + 1 > content.num_rows:
                    problems.append(
                        f"table: ongoing episode {episode} has {length} transitions, more than "
                        f"the {content.num_rows - 1} ever written"
                    )
            else:
                if length != content.num_rows - 1:
                    problems.append(
                        f"table: finalized episode {episode} has {length} transitions, "
                        f"expected {content.num_rows - 1}"
                    )
                flags = (bool(table.terminated[episode]), bool(table.truncated[episode]))
                if flags != (content.terminated, content.truncated):
                    problems.append(
                        f"table: episode {episode} flags (terminated, truncated) are {flags}, "
                        f"expected {(content.terminated, content.truncated)}"
                    )
            for key, column in table.present.items():
                if bool(column[episode]) != (key in content.rows):
                    problems.append(
                        f"table: episode {episode} field {key!r} present={bool(column[episode])}"
                        f", expected {key in content.rows}"
                    )
        return problems

    # -- rows -----------------------------------------------------------------------------

    def check_rows(
        self, where: str, episode: int, first: int, got: Mapping[str, Any], *, count: int
    ) -> list[str]:
        """``got[key][:count]`` must be rows ``first..first+count-1`` of ``episode``.

        A field the episode does not store must read as zeros (``gather_rows``); the
        first differing row of each field is reported.
        """
        content = self.episode(episode)
        if first < 0 or first + count > content.num_rows:
            return [
                (
                    f"{where}: episode {episode} rows {first}..{first + count - 1} do not exist "
                    f"(it has {content.num_rows} rows)"
                )
            ]
        problems = []
        for key, values in got.items():
            block = np.asarray(values)[:count]
            if key in content.rows:
                expected = content.rows[key][first : first + count]
            else:
                expected = np.broadcast_to(self._zeros[key], (count, *self._zeros[key].shape))
            if block.dtype != expected.dtype or block.shape != expected.shape:
                problems.append(
                    f"{where}: episode {episode} field {key!r}: expected "
                    f"{expected.dtype}{expected.shape}, got {block.dtype}{block.shape}"
                )
                continue
            # the oracle never holds NaN, so a NaN read back differs here too
            differs = (block != expected).reshape(count, -1).any(axis=1)
            if differs.any():
                row = int(np.argmax(differs))
                problems.append(
                    f"{where}: episode {episode} row {first + row} field {key!r}: expected "
                    f"{_show(expected[row])}, got {_show(block[row])}"
                )
        return problems

    def _claimed(self, where: str, tag: Any, newer: TableState) -> tuple[int, int] | str:
        """The (episode, row) that a row's tag names, or why it names none."""
        episode, row = (int(v) - 1 for v in np.asarray(tag))
        if episode < 0 or row < 0:
            return f"{where}: a row of no episode (tag {_show(tag)}): zeros where data should be"
        if episode >= len(newer):
            return f"{where}: episode {episode} row {row} is not in the table ({len(newer)})"
        return episode, row

    def check_padding(self, where: str, episode: int, buffers: Mapping[str, Any]) -> list[str]:
        """Padding rows (``buffers[key]`` ``[P, ...]``) must be zeros."""
        for key, values in buffers.items():
            block = np.asarray(values)
            if block.size and block.any():
                row = int(np.argmax(block.reshape(len(block), -1).any(axis=1)))
                return [
                    (
                        f"{where}: episode {episode} padding row {row} field {key!r}: expected "
                        f"zeros, got {_show(block[row])}"
                    )
                ]
        return []

    # -- whole reads ----------------------------------------------------------------------

    def check_windows(
        self,
        where: str,
        buffers: Mapping[str, Any],
        terminated: Any,
        truncated: Any,
        mask: Any,
        *,
        older: TableState,
        newer: TableState,
    ) -> tuple[list[str], int, int]:
        """A batch of windows (buffers ``[B, L + 1, ...]``, flags and mask ``[B, L]``).

        Returns the problems, the rows checked and how many of them belong to episodes
        ongoing in ``newer``.
        """
        mask, terminated, truncated = (
            np.asarray(a, dtype=bool) for a in (mask, terminated, truncated)
        )
        problems: list[str] = []
        rows_checked = ongoing_rows = 0
        size, length = mask.shape
        for b in range(size):
            real = int(mask[b].sum())
            offset = int(np.argmax(mask[b])) if real else 0
            if real == 0 or not mask[b, offset : offset + real].all():
                problems.append(f"{where}: window {b} mask {_show(mask[b])} is not one run")
                continue
            claimed = self._claimed(f"{where} window {b}", buffers[TAG_KEY][b, offset], newer)
            if isinstance(claimed, str):
                problems.append(claimed)
                continue
            episode, start = claimed
            span = slice(offset, offset + real + 1)
            rows = {key: np.asarray(values[b])[span] for key, values in buffers.items()}
            found = self.check_rows(f"{where} window {b}", episode, start, rows, count=real + 1)
            pad = {
                key: np.concatenate(
                    [np.asarray(v[b])[:offset], np.asarray(v[b])[offset + real + 1 :]]
                )
                for key, v in buffers.items()
            }
            found += self.check_padding(f"{where} window {b}", episode, pad)
            found += self._check_window_bounds(where, b, episode, start, real, length, older, newer)
            found += self._check_flags(
                f"{where} window {b}",
                episode,
                start + real - 1,
                terminated[b],
                truncated[b],
                offset + real - 1,
                older=older,
                newer=newer,
            )
            problems += found
            rows_checked += real + 1
            ongoing_rows += (real + 1) * bool(newer.ongoing[episode])
        return problems, rows_checked, ongoing_rows

    def _check_window_bounds(
        self,
        where: str,
        b: int,
        episode: int,
        start: int,
        real: int,
        length: int,
        older: TableState,
        newer: TableState,
    ) -> list[str]:
        """A window is ``length`` transitions, or reaches the end of what the read saw."""
        longest = int(newer.length[episode])
        shortest = int(older.length[episode]) if episode < len(older) else 0
        if start + real > longest:
            return [
                (
                    f"{where} window {b}: episode {episode} transitions {start}..{start + real - 1}"
                    f", past its {longest} transitions in the table"
                )
            ]
        if real < length and not shortest <= start + real:
            return [
                (
                    f"{where} window {b}: episode {episode} from transition {start} holds {real} of "
                    f"{length} transitions, but the episode had {shortest} before the read"
                )
            ]
        return []

    def _check_flags(
        self,
        where: str,
        episode: int,
        last: int,
        terminated: Any,
        truncated: Any,
        at: int,
        *,
        older: TableState,
        newer: TableState,
    ) -> list[str]:
        """Flags ``[L]`` of a read whose last real transition (``last`` of the episode) is at ``at``."""
        content = self.episode(episode)
        terminated, truncated = np.atleast_1d(terminated), np.atleast_1d(truncated)
        elsewhere = np.ones(len(terminated), dtype=bool)
        elsewhere[at] = False
        if (terminated & elsewhere).any() or (truncated & elsewhere).any():
            return [
                (
                    f"{where}: episode {episode}: a flag before its last real transition "
                    f"(terminated {_show(terminated)}, truncated {_show(truncated)})"
                )
            ]
        got = (bool(terminated[at]), bool(truncated[at]))
        own = (content.terminated, content.truncated)
        if last != content.num_rows - 2:
            expected = (False, False)  # not the episode's last transition
        elif older.finalized(episode):
            expected = own  # finalized before the read
        elif not newer.finalized(episode):
            expected = (False, False)  # still ongoing after the read
        elif got == (False, False):
            return []  # finalized during the read: unflagged is the state before it
        else:
            expected = own
        if got != expected:
            state = "finalized" if newer.finalized(episode) else "ongoing"
            return [
                (
                    f"{where}: episode {episode} ({state}) transition {last}: (terminated, "
                    f"truncated) expected {expected}, got {got}"
                )
            ]
        return []

    def check_transitions(
        self,
        where: str,
        buffers: Mapping[str, Any],
        terminated: Any,
        truncated: Any,
        *,
        older: TableState,
        newer: TableState,
    ) -> tuple[list[str], int, int]:
        """A ``sample_transitions`` batch (buffers ``[B, 2, ...]``, flags ``[B]``)."""
        terminated, truncated = (
            np.asarray(terminated, dtype=bool),
            np.asarray(truncated, dtype=bool),
        )
        problems: list[str] = []
        rows_checked = ongoing_rows = 0
        for b in range(len(terminated)):
            claimed = self._claimed(f"{where} transition {b}", buffers[TAG_KEY][b, 0], newer)
            if isinstance(claimed, str):
                problems.append(claimed)
                continue
            episode, row = claimed
            rows = {key: np.asarray(values[b]) for key, values in buffers.items()}
            problems += self.check_rows(f"{where} transition {b}", episode, row, rows, count=2)
            if row + 1 > newer.length[episode]:
                problems.append(
                    f"{where} transition {b}: episode {episode} transition {row} is past its "
                    f"{newer.length[episode]} transitions in the table"
                )
            problems += self._check_flags(
                f"{where} transition {b}",
                episode,
                row,
                terminated[b : b + 1],
                truncated[b : b + 1],
                0,
                older=older,
                newer=newer,
            )
            rows_checked += 2
            ongoing_rows += 2 * bool(newer.ongoing[episode])
        return problems, rows_checked, ongoing_rows

    def check_episode(
        self,
        where: str,
        episode: int,
        buffers: Mapping[str, Any],
        terminated: Any,
        truncated: Any,
        *,
        older: TableState,
        newer: TableState,
    ) -> list[str]:
        """A whole-episode read (``episode(e).read()``: ``[T + 1, ...]`` of present fields)."""
        content = self.episode(episode)
        problems = []
        if set(buffers) != set(content.rows):
            problems.append(
                f"{where}: episode {episode} read fields {sorted(buffers)}, expected "
                f"{sorted(content.rows)}"
            )
        got_rows = {int(np.asarray(v).shape[0]) for v in buffers.values()}
        fewest, most = int(older.length[episode]) + 1, int(newer.length[episode]) + 1
        if len(got_rows) != 1 or not fewest <= min(got_rows) <= most:
            seen = f"{fewest}" if fewest == most else f"{fewest} to {most}"
            problems.append(
                f"{where}: episode {episode} read {sorted(got_rows)} rows, the table says {seen}"
            )
            return problems
        count = min(got_rows)
        problems += self.check_rows(where, episode, 0, buffers, count=count)
        if count > 1:
            problems += self._check_flags(
                where,
                episode,
                count - 2,
                terminated,
                truncated,
                count - 2,
                older=older,
                newer=newer,
            )
        return problems
