"""``episodata quickstart``: the README's quick start, end to end, in one command.

The ``episodata.commands`` entry point names :class:`QuickstartCommand`; gymnasium is
imported only when the command runs.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from episodata_core.commands import Arg, arg
from episodata_core.errors import MissingDependencyError

if TYPE_CHECKING:
    import argparse

__all__ = ["QuickstartCommand"]


class QuickstartCommand:
    """``episodata quickstart``: record CartPole-v1, read an episode, sample a batch."""

    name: ClassVar[str] = "quickstart"
    description: ClassVar[str] = (
        "record CartPole-v1 episodes into a dataset, then read and sample them"
    )
    epilog: ClassVar[str] = (
        "The README quick start in one command: collect CartPole rollouts into a "
        "dataset (appending new episodes if it exists), read an episode as transitions "
        "and sample a batch of segments."
    )
    arguments: ClassVar[tuple[Arg, ...]] = (
        arg(
            "--path",
            default="quickstart-cartpole",
            help="dataset folder (default: ./quickstart-cartpole)",
        ),
        arg("--backend", help="backend of a new dataset (default: zarr)"),
        arg("--episodes", type=int, default=20, help="episodes to record (default: 20)"),
        arg("-q", "--quiet", action="store_true", help="no progress bar"),
        arg(
            "--seed",
            type=int,
            help="seed of env, actions and sampling (default: 0, or the number of "
            "episodes already there when appending, so a rerun records new episodes)",
        ),
    )

    def run(self, args: argparse.Namespace) -> int:
        """Record ``args.episodes`` episodes into ``args.path``, then read and sample."""
        import numpy as np

        from episodata_core.dataset import Dataset

        try:
            import gymnasium as gym
        except ImportError as err:
            raise MissingDependencyError(
                f"quickstart records CartPole with Gymnasium ({err.name} is missing): "
                'pip install "episodata[gym]"'
            ) from err
        from episodata_gym import record_episodes, schema_from_gym_spaces

        env = gym.make("CartPole-v1")
        path = Path(args.path)
        seed = args.seed
        if (path / "manifest.json").exists():
            dataset = Dataset.open(path)
            existing = dataset.num_episodes
            if seed is None:
                # the same seed would record the same episodes again: continue after them
                seed = existing
                why = f"seed {seed}, after the {_counted(existing, 'episode')} already there"
            else:
                why = f"seed {seed}, as given"
            print(f"appending to the existing dataset {path} ({existing} episodes) with {why}")
        else:
            schema = schema_from_gym_spaces(env.observation_space, env.action_space)
            dataset = Dataset.create(schema, path, backend=args.backend)
            seed = 0 if seed is None else seed
            print(f"created {path} ({dataset.manifest.backend} backend)")
        with dataset:
            shown = not args.quiet and sys.stderr.isatty()
            ids = record_episodes(env, dataset, args.episodes, seed=seed, progress=shown)
            recorded = _counted(len(ids), "CartPole-v1 episode")
            print(f"recorded {recorded} with random actions (seed {seed})")
            segment = dataset.episode(ids[0]).read()
            print(f"\nepisode {ids[0]}: {_counted(len(segment), 'transition')}")
            for name in ("obs", "action", "reward", "next_obs", "terminated"):
                value = getattr(segment, name)
                print(f"  segment.{name:<11} {value.dtype}{list(value.shape)}")
            same = bool(np.array_equal(segment.next_obs[:-1], segment.obs[1:]))
            print(f"  next_obs[t] == obs[t + 1]: {same}")
            stream = dataset.segment_stream(sequence_length=32, batch_size=64, seed=seed)
            batch = stream.sample()
            stream.close()
            print("\nstream.sample() with sequence_length=32, batch_size=64:")
            for name in ("obs", "next_obs", "action", "mask"):
                value = getattr(batch, name)
                print(f"  batch.{name:<9} {value.dtype}{list(value.shape)}")
            padded = int(np.count_nonzero(~batch.mask))
            print(f"  padded transitions in this batch (mask False): {padded}")
            episodes = _counted(dataset.num_episodes, "episode")
            print(f"\n{episodes}, {_counted(dataset.num_steps, 'transition')} in {path}")
        # in the README's checkout the command lives in uv's environment, not on PATH
        runner = "uv run --no-dev " if "UV_RUN_RECURSION_DEPTH" in os.environ else ""
        print(f"next: {runner}episodata info {path}")
        return 0


def _counted(count: int, noun: str) -> str:
    return f"{count} {noun if count == 1 else noun + 's'}"
