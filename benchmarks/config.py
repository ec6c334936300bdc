"""Workload sizes: the defaults of performance.md, and the scaled-down quick and tiny runs."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

__all__ = ["PRESETS", "Sizes", "sizes_for"]


@dataclass(frozen=True)
class Sizes:
    """Every size and time budget of one run.

    ``state_*`` is W1's data (W4 and W7 reuse its shape), ``image_*`` W2's (W3 and W8
    read it from disk). Time budgets bound each measurement: ``rounds`` interleaved
    rounds of ``round_seconds`` per system, at least ``min_calls`` calls each.
    """

    name: str
    # W1 / W4: state segments and transitions
    state_episodes: int = 1000
    state_steps: int = 1000
    state_length: int = 64
    state_batch: int = 256
    transition_batch: int = 256
    # W2 / W3 / W8: image segments
    image_episodes: int = 100
    image_steps: int = 500
    image_length: int = 32
    image_batch: int = 64
    # W5: CartPole-shaped step writes, episodes of each length (CartPole's random policy
    # averages about 22 steps; 200 is where CartPole-v0 truncates)
    write_episode_lengths: tuple[int, ...] = (22, 200)
    # W6: index growth (episodes of index_steps transitions)
    index_sizes: tuple[int, ...] = (10**3, 10**4, 10**5, 10**6)
    index_steps: int = 80
    # W7: online add/sample after prefilling this many episodes
    online_prefill: tuple[int, ...] = (10**2, 10**3, 10**4)
    online_prefill_steps: int = 100
    online_steps: int = 400
    # W8: DataLoader batches per round; the small dataset has this fraction of episodes
    loader_batches: int = 150
    loader_small_fraction: float = 0.5
    loader_spawn: bool = True
    loader_rounds: int = 2
    # W9: rows of the D4RL-shaped and LeWM-shaped source files
    d4rl_rows: int = 1_000_000
    lewm_rows: int = 50_000
    lerobot_frames: int = 20_000  # frames of 64x64x3 images of each LeRobot source
    minari_steps: int = 500_000  # steps of the hopper-shaped Minari dataset
    # measurement budget
    rounds: int = 5
    round_seconds: float = 2.0
    min_calls: int = 5
    seed: int = 0
    workload_timeout_s: float = 1800.0
    share_process: bool = False

    def to_json(self) -> dict[str, Any]:
        """The sizes as a JSON-serializable dict."""
        return asdict(self)


PRESETS: dict[str, Sizes] = {
    "default": Sizes(name="default"),
    "quick": Sizes(
        name="quick",
        state_episodes=200,
        state_steps=500,
        image_episodes=20,
        image_steps=250,
        index_sizes=(10**3, 10**4, 10**5),
        online_prefill=(10, 10**2, 10**3),
        online_steps=100,
        loader_batches=25,
        loader_rounds=1,
        loader_spawn=False,
        d4rl_rows=100_000,
        lewm_rows=4_000,
        lerobot_frames=3_000,
        minari_steps=50_000,
        rounds=2,
        round_seconds=0.5,
        min_calls=3,
        workload_timeout_s=120.0,
        share_process=True,
    ),
    "tiny": Sizes(
        name="tiny",
        state_episodes=8,
        state_steps=100,
        state_length=16,
        state_batch=16,
        transition_batch=32,
        image_episodes=4,
        image_steps=40,
        image_length=8,
        image_batch=4,
        index_sizes=(10, 100),
        index_steps=20,
        online_prefill=(2, 20),
        online_prefill_steps=20,
        online_steps=10,
        loader_batches=3,
        loader_small_fraction=0.5,
        loader_spawn=False,
        loader_rounds=1,
        d4rl_rows=2_000,
        lewm_rows=300,
        lerobot_frames=300,
        minari_steps=2_000,
        rounds=1,
        round_seconds=0.05,
        min_calls=2,
        workload_timeout_s=60.0,
    ),
}


def sizes_for(preset: str, **overrides: Any) -> Sizes:
    """The preset's sizes with ``overrides`` applied (e.g. ``seed=1``)."""
    return replace(PRESETS[preset], **overrides)
