"""A small D4RL-shaped HDF5 file, so every documented command runs from a clone.

``python -m episodata_d4rl.sample hopper-sample.hdf5`` writes a file with the layout of
D4RL's ``hopper-medium-v2.hdf5`` (11-dimensional observations, 3-dimensional actions,
``next_observations``, ``terminals``, ``timeouts``, ``infos/qpos``, ``infos/qvel``): a few
dozen episodes of a damped random walk, some ending in a termination and the rest in a
timeout. The values are synthetic; real D4RL files come from the D4RL project's dataset
downloads (``d4rl.qlearning_dataset`` caches them under ``~/.d4rl/datasets``) and import
the same way.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

__all__ = ["ACTION_DIM", "OBS_DIM", "write_sample"]

OBS_DIM = 11
ACTION_DIM = 3


def _arrays(episodes: int, seed: int) -> dict[str, np.ndarray]:
    """The file's datasets, row-aligned like D4RL's: one row per step, episodes back to back."""
    rng = np.random.default_rng(seed)
    columns: dict[str, list[np.ndarray]] = {
        name: []
        for name in (
            "observations",
            "next_observations",
            "actions",
            "rewards",
            "terminals",
            "timeouts",
            "infos/qpos",
            "infos/qvel",
        )
    }
    for _ in range(episodes):
        steps = int(rng.integers(40, 200))
        actions = rng.uniform(-1, 1, size=(steps, ACTION_DIM)).astype(np.float32)
        # L + 1 states of a damped walk driven by the actions: row t's successor is row t + 1
        states = np.empty((steps + 1, OBS_DIM), dtype=np.float32)
        states[0] = rng.normal(0, 0.1, OBS_DIM)
        drive = np.tile(actions, (1, -(-OBS_DIM // ACTION_DIM)))[:, :OBS_DIM]
        for t in range(steps):
            states[t + 1] = 0.95 * states[t] + 0.05 * drive[t]
        terminated = bool(rng.random() < 0.5)
        columns["observations"].append(states[:-1])
        columns["next_observations"].append(states[1:])
        columns["actions"].append(actions)
        columns["rewards"].append(
            (1.0 + states[1:, 0] - 1e-3 * (actions**2).sum(1)).astype(np.float32)
        )
        flags = np.zeros(steps, dtype=bool)
        ended = flags.copy()
        ended[-1] = True
        columns["terminals"].append(ended if terminated else flags)
        columns["timeouts"].append(flags if terminated else ended)
        columns["infos/qpos"].append(states[:-1, :6].astype(np.float64))
        columns["infos/qvel"].append(states[:-1, 5:].astype(np.float64))
    return {name: np.concatenate(parts) for name, parts in columns.items()}


def write_sample(path: str | Path, *, episodes: int = 30, seed: int = 0) -> Path:
    """Write the sample file to ``path`` (replacing it) and return the path.

    Parameters
    ----------
    path
        The ``.hdf5`` file to write.
    episodes
        How many episodes (40 to 199 steps each).
    seed
        The same seed writes the same values.
    """
    import h5py  # the plugin's [h5py] extra; only this function needs it

    if episodes < 1:
        raise ValueError(f"episodes: expected a positive count, got {episodes}")
    target = Path(path)
    with h5py.File(target, "w") as file:
        for name, values in _arrays(episodes, seed).items():
            file.create_dataset(name, data=values)
        file.attrs["description"] = "synthetic sample in the layout of D4RL hopper-medium-v2"
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m episodata_d4rl.sample",
        description="Write a small synthetic file in the layout of D4RL's hopper-medium-v2.",
    )
    parser.add_argument("path", help="the .hdf5 file to write")
    parser.add_argument("--episodes", type=int, default=30, help="number of episodes (30)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (0)")
    args = parser.parse_args(argv)
    target = write_sample(args.path, episodes=args.episodes, seed=args.seed)
    print(f"wrote {target} ({args.episodes} episodes, D4RL hopper layout, synthetic values)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
