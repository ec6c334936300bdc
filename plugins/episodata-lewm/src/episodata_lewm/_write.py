"""The write pass of the LeWM importer: swm rows to action-in episodes (formats.md §2.4).

Row t of an swm episode holds ``o_t``, the action taken **at** ``o_t`` and the reward of
**arriving** at ``o_t``. So the action of internal row j is ``action[g + j - 1]`` and its
reward is ``reward[g + j]``: actions shift, rewards do not.

The episodes of a window go to ``Dataset.add_episodes`` together (a durable commit per
episode would dominate the import), with observations and infos as views of the window:
rows ``[g, g + n)`` of a column are already the episode's rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from episodata_core.importing import PendingEpisodes

if TYPE_CHECKING:
    import numpy.typing as npt

    from episodata_core.dataset import Dataset
    from episodata_core.writers import EpisodeWriter
    from episodata_lewm._layout import Layout
    from episodata_lewm._windows import Window

__all__ = ["EpisodeFlags", "write_episodes"]

_KEYS = {"observation": "observations", "action": "actions", "reward": "rewards", "info": "infos"}


@dataclass(frozen=True)
class EpisodeFlags:
    """What the write pass needs per selected episode (``[S]`` arrays)."""

    kept: npt.NDArray[np.bool_]
    terminated: npt.NDArray[np.bool_]
    truncated: npt.NDArray[np.bool_]


def _read(handle: Any, layout: Layout, name: str, a: int, b: int) -> npt.NDArray[Any]:
    dataset = handle[name]
    column = layout.columns[name]
    if column.vlen_string:
        return np.asarray(dataset.asstr()[a:b], dtype=f"<U{layout.string_widths[name]}")
    values = np.asarray(dataset[a:b])
    return values.reshape(b - a, *column.shape)  # (R, 1) rewards squeeze to (R,)


def write_episodes(
    handle: Any,
    dataset: Dataset,
    layout: Layout,
    windows: list[Window],
    offsets: npt.NDArray[np.int64],
    lengths: npt.NDArray[np.int64],
    flags: EpisodeFlags,
    *,
    action_in: bool,
    write_bytes: int,
) -> None:
    """Append every kept selected episode to ``dataset``, window by window.

    At most ``write_bytes`` of episodes go to one ``add_episodes`` call.
    """
    by_role: dict[str, list[str]] = {role: [] for role in _KEYS}
    for name, role in layout.roles.items():
        by_role[role].append(name)
    streaming = _Stream(dataset, by_role, action_in)
    pending = PendingEpisodes(dataset, max_bytes=write_bytes)
    for window in windows:
        _write_window(handle, layout, window, offsets, lengths, flags, streaming, pending)
        # written before the next read: the queued episodes are views of this window
        pending.write()


def _write_window(
    handle: Any,
    layout: Layout,
    window: Window,
    offsets: npt.NDArray[np.int64],
    lengths: npt.NDArray[np.int64],
    flags: EpisodeFlags,
    streaming: _Stream,
    pending: PendingEpisodes,
) -> None:
    a, b = window.start, window.stop
    columns = {name: _read(handle, layout, name, a, b) for name in layout.roles}
    if window.streamed:
        ordinal = int(window.ordinals[0])
        if flags.kept[ordinal]:
            streaming.block(window, columns, flags, ordinal)
        return
    for ordinal in window.ordinals.tolist():
        if not flags.kept[ordinal]:
            continue
        s = int(offsets[ordinal]) - a
        n = int(lengths[ordinal])
        episode = _episode(columns, streaming.by_role, s, n, action_in=streaming.action_in)
        episode["terminated"] = bool(flags.terminated[ordinal])
        episode["truncated"] = bool(flags.truncated[ordinal])
        pending.add(episode)


def _episode(
    columns: dict[str, npt.NDArray[Any]],
    by_role: dict[str, list[str]],
    s: int,
    n: int,
    *,
    action_in: bool,
) -> dict[str, Any]:
    """The bulk action-in dict of the episode at rows ``s..s+n-1`` of the window."""
    shift = 1 if action_in else 0
    episode: dict[str, Any] = {
        "initial_observation": {k: columns[k][s] for k in by_role["observation"]},
        "observations": {k: columns[k][s + 1 : s + n] for k in by_role["observation"]},
        # out: action row j = action[g + j - 1], the last row's action is dropped
        "actions": {k: columns[k][s + shift : s + n - 1 + shift] for k in by_role["action"]},
    }
    if by_role["reward"]:
        # the reward at row t is for arriving at o_t: same index, row 0 (NaN) discarded
        episode["rewards"] = {k: columns[k][s + 1 : s + n] for k in by_role["reward"]}
    if by_role["info"]:
        episode["initial_info"] = {k: columns[k][s] for k in by_role["info"]}
        episode["infos"] = {k: columns[k][s + 1 : s + n] for k in by_role["info"]}
    return episode


class _Stream:
    """Writes an episode larger than the read budget block by block."""

    def __init__(self, dataset: Dataset, by_role: dict[str, list[str]], action_in: bool) -> None:
        self._dataset = dataset
        self.by_role = by_role
        self.action_in = action_in
        self._writer: EpisodeWriter | None = None
        self._carry: dict[str, npt.NDArray[Any]] = {}

    def block(
        self,
        window: Window,
        columns: dict[str, npt.NDArray[Any]],
        flags: EpisodeFlags,
        ordinal: int,
    ) -> None:
        """Append one block; the first opens the episode, the last finalizes it."""
        roles = self.by_role
        begin = 0
        if window.first:
            observation = {k: columns[k][0] for k in roles["observation"]}
            infos = {k: columns[k][0] for k in roles["info"]} or None
            self._writer = self._dataset.new_episode(observation, infos)
            self._carry = {}
            begin = 1  # row 0 is the reset row
        assert self._writer is not None
        steps: dict[str, Any] = {
            _KEYS[role]: {k: columns[k][begin:] for k in names}
            for role, names in roles.items()
            if names and role != "action"
        }
        if self.action_in:
            steps["actions"] = {k: columns[k][begin:] for k in roles["action"]}
        else:
            # the action that led to this block's first row was read with the last block
            steps["actions"] = {
                k: np.concatenate([self._carry[k], columns[k][:-1]])
                if k in self._carry
                else columns[k][:-1]
                for k in roles["action"]
            }
            self._carry = {k: columns[k][-1:] for k in roles["action"]}
        if window.stop - window.start > begin:
            self._writer.add_steps(steps)
        if window.last:
            self._writer.end(
                terminated=bool(flags.terminated[ordinal]),
                truncated=bool(flags.truncated[ordinal]),
            )
            self._writer = None
