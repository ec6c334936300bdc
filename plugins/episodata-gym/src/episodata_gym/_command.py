"""``episodata quickstart``: the README's quick start, end to end, in one command.

The ``episodata.commands`` entry point names :class:`QuickstartCommand`; gymnasium is
imported only when the command runs.
"""

from __future__ import annotations

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
        "dataset (appending if it exists), read an episode as transitions and sample "
        "a batch of segments."
    )
    arguments: ClassVar[tuple[Arg, ...]] = (
        arg(
            "--path",
            default="quickstart-cartpole",
            help="dataset folder (default: ./quickstart-cartpole)",
        ),
        arg("--backend", help="backend of a new dataset (default: zarr)"),
        arg("--episodes", type=int, default=20, help="episodes to record (default: 20)"),
        arg("--seed", type=int, default=0, help="seed of env, actions and sampling"),
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
        if (path / "manifest.json").exists():
            dataset = Dataset.open(path)
            print(f"appending to the existing dataset {path} ({dataset.num_episodes} episodes)")
        else:
            schema = schema_from_gym_spaces(env.observation_space, env.action_space)
            dataset = Dataset.create(schema, path, backend=args.backend)
            print(f"created {path} ({dataset.manifest.backend} backend)")
        with dataset:
            ids = record_episodes(env, dataset, args.episodes, seed=args.seed)
            print(f"recorded {len(ids)} CartPole-v1 episodes with random actions")
            segment = dataset.episode(ids[0]).read()
            print(f"\nepisode {ids[0]}: {len(segment)} transitions")
            for name in ("obs", "action", "reward", "next_obs", "terminated"):
                value = getattr(segment, name)
                print(f"  segment.{name:<11} {value.dtype}{list(value.shape)}")
            same = bool(np.array_equal(segment.next_obs[:-1], segment.obs[1:]))
            print(f"  next_obs[t] == obs[t + 1]: {same}")
            stream = dataset.segment_stream(sequence_length=32, batch_size=64, seed=args.seed)
            batch = stream.sample()
            stream.close()
            print("\nstream.sample() with sequence_length=32, batch_size=64:")
            for name in ("obs", "next_obs", "action", "mask"):
                value = getattr(batch, name)
                print(f"  batch.{name:<9} {value.dtype}{list(value.shape)}")
            padded = int(np.count_nonzero(~batch.mask))
            print(f"  padded transitions in this batch (mask False): {padded}")
            print(f"\n{dataset.num_episodes} episodes, {dataset.num_steps} transitions in {path}")
        print(f"next: episodata info {path}")
        return 0
