"""Record episodes from a Gymnasium environment with the usual reset/step loop."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from episodata_core.authoring import episode_progress

if TYPE_CHECKING:
    from collections.abc import Callable

    from episodata_core.dataset import Dataset

__all__ = ["record_episodes"]


def record_episodes(
    env: Any,
    dataset: Dataset,
    num_episodes: int,
    *,
    seed: int | None = None,
    policy: Callable[[Any], Any] | None = None,
    progress: bool = False,
) -> list[int]:
    """Run ``num_episodes`` episodes of ``env`` and write each to ``dataset``.

    ``policy(observation) -> action`` picks actions; by default a random action from
    ``env.action_space``. The first reset uses ``seed`` (later resets continue its
    random stream), and the action space is seeded with it too. ``progress=True`` shows
    the episodes recorded on stderr. Returns the ids of the written episodes.
    """
    name = getattr(getattr(env, "spec", None), "id", None) or "episodes"
    with episode_progress(
        dataset, enabled=progress, action=f"recording {name}", total=num_episodes
    ):
        return _record(env, dataset, num_episodes, seed, policy)


def _record(
    env: Any,
    dataset: Dataset,
    num_episodes: int,
    seed: int | None,
    policy: Callable[[Any], Any] | None,
) -> list[int]:
    if seed is not None:
        env.action_space.seed(seed)
    act = policy if policy is not None else (lambda _: env.action_space.sample())
    written = []
    for number in range(num_episodes):
        obs, _ = env.reset(seed=seed if number == 0 else None)
        writer = dataset.new_episode(obs)
        while True:
            action = act(obs)
            obs, reward, terminated, truncated, _ = env.step(action)
            writer.add_step(
                {
                    "observations": obs,
                    "actions": action,
                    "rewards": reward,
                    "terminated": terminated,
                    "truncated": truncated,
                }
            )
            if terminated or truncated:
                break
        written.append(writer.episode)
    return written
