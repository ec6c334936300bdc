"""Seeded synthetic data, generated once per run and shared by every system.

A dataset is held as *rows* (data-model.md §2): every field's rows of all episodes back
to back, episode ``e`` at rows ``offsets[e] : offsets[e] + lengths[e] + 1``, row 0 of an
episode holding the reset observation and a zero action and reward. That is exactly what
episodata stores, so the NumPy ceiling gathers from the same arrays, and peers get the
same rows (TorchRL with an extra ``episode`` column).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from episodata import DatasetSchema

__all__ = [
    "OBS",
    "RowData",
    "cartpole_steps",
    "image_data",
    "load_or_make",
    "state_data",
]

OBS, ACTION, REWARD = "observation/observation", "action/action", "reward/reward"


@dataclass(frozen=True)
class RowData:
    """Rows of every field plus the per-episode index (``[E]`` int64 each)."""

    rows: dict[str, npt.NDArray[Any]]
    lengths: npt.NDArray[np.int64]
    offsets: npt.NDArray[np.int64]
    layout: str | None = None

    @property
    def num_episodes(self) -> int:
        """Number of episodes."""
        return len(self.lengths)

    @property
    def num_rows(self) -> int:
        """Rows per field (transitions + one reset row per episode)."""
        return int(self.rows[OBS].shape[0])

    @property
    def nbytes(self) -> int:
        """Raw bytes of every field's rows."""
        return sum(int(a.nbytes) for a in self.rows.values())

    def schema(self) -> DatasetSchema:
        """The episodata schema of these rows (bare observation, action and reward)."""
        from episodata import DatasetSchema, FieldSpec

        specs = []
        for key, array in self.rows.items():
            role, name = key.split("/", 1)
            layout = self.layout if key == OBS else None
            specs.append(
                FieldSpec(
                    name, shape=array.shape[1:], dtype=str(array.dtype), role=role, layout=layout
                )
            )
        return DatasetSchema(specs)

    def episode(self, e: int) -> dict[str, Any]:
        """Episode ``e`` as an action-in bulk dict (views, no copies)."""
        start, length = int(self.offsets[e]), int(self.lengths[e])
        stop = start + length + 1
        return {
            "initial_observation": self.rows[OBS][start],
            "observations": self.rows[OBS][start + 1 : stop],
            "actions": self.rows[ACTION][start + 1 : stop],
            "rewards": self.rows[REWARD][start + 1 : stop],
            "truncated": True,
        }

    def episodes(self, count: int | None = None) -> Iterator[dict[str, Any]]:
        """The first ``count`` (default all) episodes as bulk dicts."""
        for e in range(self.num_episodes if count is None else count):
            yield self.episode(e)

    def episode_rows(self, e: int) -> dict[str, npt.NDArray[Any]]:
        """Every row of episode ``e`` by qualified key (views)."""
        start = int(self.offsets[e])
        stop = start + int(self.lengths[e]) + 1
        return {key: array[start:stop] for key, array in self.rows.items()}

    def episode_ids(self) -> npt.NDArray[np.int64]:
        """``[rows]`` the episode of every row."""
        return np.repeat(np.arange(self.num_episodes, dtype=np.int64), self.lengths + 1)

    def gather_index(
        self, episodes: npt.NDArray[np.int64], starts: npt.NDArray[np.int64], length: int
    ) -> npt.NDArray[np.int64]:
        """``[B, length + 1]`` row numbers of windows ``(episode, start)``."""
        first = self.offsets[episodes] + starts
        return first[:, None] + np.arange(length + 1, dtype=np.int64)


def _index(episodes: int, steps: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    lengths = np.full(episodes, steps, dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths + 1)[:-1]]).astype(np.int64)
    return lengths, offsets


def _zero_reset_rows(rows: dict[str, npt.NDArray[Any]], offsets: npt.NDArray[np.int64]) -> None:
    # no action or reward led to the reset observation: row 0 of each episode is zero
    rows[ACTION][offsets] = 0
    rows[REWARD][offsets] = 0


def state_data(
    episodes: int, steps: int, seed: int, obs_dim: int = 17, action_dim: int = 6
) -> RowData:
    """W1's data: ``obs`` float32 ``[obs_dim]``, action float32 ``[action_dim]``, reward."""
    rng = np.random.default_rng([seed, 1])
    lengths, offsets = _index(episodes, steps)
    n = int(lengths.sum() + episodes)
    rows = {
        OBS: rng.standard_normal((n, obs_dim), dtype=np.float32),
        ACTION: rng.uniform(-1, 1, size=(n, action_dim)).astype(np.float32),
        REWARD: rng.standard_normal(n, dtype=np.float32),
    }
    _zero_reset_rows(rows, offsets)
    return RowData(rows, lengths, offsets)


def image_data(episodes: int, steps: int, seed: int, side: int = 64) -> RowData:
    """W2's data: ``obs`` uint8 ``[3, side, side]`` frames, action float32 ``[2]``, reward.

    Frames look rendered rather than random: a flat background per episode, a square
    that moves with the action, and faint noise, so codecs see realistic redundancy.
    """
    rng = np.random.default_rng([seed, 2])
    lengths, offsets = _index(episodes, steps)
    n = int(lengths.sum() + episodes)
    frames = rng.integers(0, 8, size=(n, 3, side, side), dtype=np.uint8)
    action = rng.uniform(-1, 1, size=(n, 2)).astype(np.float32)
    block = max(side // 8, 1)
    for e in range(episodes):
        start, stop = int(offsets[e]), int(offsets[e] + lengths[e] + 1)
        frames[start:stop] += rng.integers(40, 200, size=(3, 1, 1), dtype=np.uint8)
        path = np.cumsum(np.round(action[start:stop] * 2), axis=0).astype(np.int64)
        ys = np.mod(path[:, 0] + side // 2, side - block)
        xs = np.mod(path[:, 1] + side // 2, side - block)
        for t, (y, x) in enumerate(zip(ys.tolist(), xs.tolist(), strict=True)):
            frames[start + t, :, y : y + block, x : x + block] = 250
    rows: dict[str, npt.NDArray[Any]] = {
        OBS: frames,
        ACTION: action,
        REWARD: rng.standard_normal(n, dtype=np.float32),
    }
    _zero_reset_rows(rows, offsets)
    return RowData(rows, lengths, offsets, layout="CHW")


def cartpole_steps(steps: int, seed: int) -> dict[str, Any]:
    """CartPole-shaped steps as an environment hands them out, as Python lists.

    ``observations`` holds float32 ``[4]`` arrays (one more than steps), ``actions``
    ints and ``rewards`` floats.
    """
    rng = np.random.default_rng([seed, 5])
    obs = rng.standard_normal((steps + 1, 4), dtype=np.float32)
    return {
        "observations": list(obs),
        "actions": rng.integers(0, 2, size=steps).tolist(),
        "rewards": [1.0] * steps,
    }


def _safe(key: str) -> str:
    return key.replace("/", "__")


def load_or_make(run_dir: Path, name: str, make: Any) -> RowData:
    """Load ``name`` from the run folder, or ``make()`` it and store it there first.

    Every workload of a run (each in its own process) thus uses the very same bytes.
    """
    folder = run_dir / "data" / name
    done = folder / "index.npz"
    if not done.exists():
        data: RowData = make()
        folder.mkdir(parents=True, exist_ok=True)
        for key, array in data.rows.items():
            np.save(folder / f"{_safe(key)}.npy", array)
        np.savez(
            folder / "index.tmp.npz",
            lengths=data.lengths,
            offsets=data.offsets,
            keys=np.array(list(data.rows)),
            layout=np.array(data.layout or ""),
        )
        (folder / "index.tmp.npz").replace(done)
        return data
    with np.load(done) as index:
        keys = [str(k) for k in index["keys"]]
        rows = {key: np.load(folder / f"{_safe(key)}.npy") for key in keys}
        return RowData(
            rows,
            index["lengths"].astype(np.int64),
            index["offsets"].astype(np.int64),
            layout=str(index["layout"]) or None,
        )
