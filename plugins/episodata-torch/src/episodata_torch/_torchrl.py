"""``tensordict_to_episodes``: TorchRL collector output as episodes for ``Dataset.from_episodes``.

A TorchRL collector yields TensorDicts of batch size ``[T]`` (one environment) or
``[E, T]`` (E environments, time last) holding, per step, ``observation`` and
``action`` at the top and what followed under ``"next"``: ``("next", "observation")``,
``("next", "reward")`` (``[..., 1]``), ``("next", "done")``, ``("next", "terminated")``
and ``("next", "truncated")`` (``[..., 1]`` bool). Environments reset themselves after
a done step, so the following step's top-level observation is a reset observation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from episodata_core.errors import SchemaError

if TYPE_CHECKING:
    from collections.abc import Sequence

    import numpy.typing as npt

__all__ = ["tensordict_to_episodes"]

# flags, rewards and TorchRL's bookkeeping (StepCounter's step_count, collector ids)
_NOT_OBSERVATIONS = {
    "reward", "done", "terminated", "truncated", "info", "mask", "step_count", "collector",
    "is_init",
}  # fmt: skip
_TRAJ = ("collector", "traj_ids")


def _array(tensor: Any) -> npt.NDArray[Any]:
    return np.asarray(tensor.detach().cpu().numpy())


def _leaf_name(key: str | tuple[str, ...]) -> str:
    # batch_to_tensordict nests dict observations under "observation": drop that level
    if isinstance(key, tuple) and len(key) > 1 and key[0] == "observation":
        key = key[1:]
    return key if isinstance(key, str) else "/".join(key)


def tensordict_to_episodes(
    td: Any,
    *,
    observation_keys: Sequence[str | tuple[str, ...]] | None = None,
    action_key: str | tuple[str, ...] = "action",
    reward_key: str | tuple[str, ...] = "reward",
    drop_incomplete: bool = False,
) -> list[dict[str, Any]]:
    """Split TorchRL collector output into action-in episode dicts.

    Parameters
    ----------
    td
        A ``tensordict.TensorDict`` of batch size ``[T]`` or ``[E, T]`` in TorchRL's
        layout (above), e.g. one batch of a ``SyncDataCollector``.
    observation_keys
        Observation entries (top-level keys also under ``"next"``); default: every such
        key except ``reward``, the flags, ``info`` and TorchRL's ``step_count``. One key gives a bare ``observations`` array,
        several a dict keyed by name (nested keys joined by ``/``).
    action_key
        The action entry (a nested TensorDict becomes a dict of actions).
    reward_key
        The reward entry under ``"next"``; its trailing ``1`` axis is dropped.
    drop_incomplete
        Leave out the trajectory of each environment that has not ended by the last step
        (by default it becomes an episode with neither flag set).

    Returns
    -------
    list of dict
        In environment order, then time order: ``initial_observation`` (the observation
        where the trajectory's first action was taken), ``observations`` ``[T, ...]``
        (what followed each action), ``actions`` ``[T, ...]``, ``rewards`` ``[T]``,
        ``terminated``, ``truncated``. A trajectory is cut after every done step, and
        where ``("collector", "traj_ids")`` changes.
    """
    if td.batch_dims not in (1, 2):
        raise SchemaError(
            f"tensordict_to_episodes expects batch size [T] or [E, T], got {list(td.batch_size)}"
        )
    if "next" not in td:
        raise SchemaError(
            "tensordict_to_episodes expects TorchRL's layout, with what followed each action "
            "under 'next'; this TensorDict has no 'next' entry"
        )
    following = td.get("next")
    for where, container, key in (("", td, action_key), ("next", following, reward_key)):
        if key not in container.keys(include_nested=True):
            path = f"('next', {key!r})" if where else repr(key)
            raise SchemaError(f"tensordict_to_episodes: the TensorDict has no {path} entry")
    keys = _observation_keys(td, following, observation_keys)
    envs = [td] if td.batch_dims == 1 else [td[e] for e in range(td.batch_size[0])]
    episodes: list[dict[str, Any]] = []
    for env in envs:
        episodes.extend(_split(env, keys, action_key, reward_key, drop_incomplete))
    return episodes


def _observation_keys(
    td: Any, following: Any, chosen: Sequence[str | tuple[str, ...]] | None
) -> list[str | tuple[str, ...]]:
    if chosen is not None:
        for key in chosen:
            if key not in td.keys(include_nested=True) or key not in following.keys(
                include_nested=True
            ):
                raise SchemaError(
                    f"observation key {key!r} must be both at the top and under 'next'"
                )
        return list(chosen)
    found = [
        key
        for key in following.keys(include_nested=True, leaves_only=True)
        if (key if isinstance(key, str) else key[0]) not in _NOT_OBSERVATIONS
        and key in td.keys(include_nested=True, leaves_only=True)
    ]
    if not found:
        raise SchemaError(
            "tensordict_to_episodes found no observation: no key is both at the top and under "
            "'next'; pass observation_keys="
        )
    return found


def _split(
    env: Any,
    keys: list[str | tuple[str, ...]],
    action_key: str | tuple[str, ...],
    reward_key: str | tuple[str, ...],
    drop_incomplete: bool,
) -> list[dict[str, Any]]:
    following = env.get("next")
    steps = int(env.batch_size[0])
    done = _array(following.get("done")).reshape(steps, -1)[:, 0].astype(bool)
    terminated = _flag(following, "terminated", steps, done)
    truncated = _flag(following, "truncated", steps, done & ~terminated)
    cut = done.copy()
    if _TRAJ in env.keys(include_nested=True):
        ids = _array(env.get(_TRAJ)).reshape(steps)
        cut[:-1] |= ids[1:] != ids[:-1]
    ends = np.flatnonzero(cut).tolist()
    if not ends or ends[-1] != steps - 1:
        ends.append(steps - 1)
    current = {key: _array(env.get(key)) for key in keys}
    after = {key: _array(following.get(key)) for key in keys}
    actions = env.get(action_key)
    action_arrays: Any = (
        {_leaf_name(k): _array(actions.get(k)) for k in actions.keys(True, True)}
        if hasattr(actions, "keys")  # a TensorDict of several actions; a tensor has no keys
        else _array(actions)
    )
    rewards = _array(following.get(reward_key))
    if rewards.ndim == 2 and rewards.shape[1] == 1:
        rewards = rewards[:, 0]
    episodes: list[dict[str, Any]] = []
    start = 0
    for end in ends:
        window = slice(start, end + 1)
        finished = bool(cut[end])
        if finished or not drop_incomplete:
            episodes.append(
                {
                    "initial_observation": _pick(current, keys, start),
                    "observations": _pick(after, keys, window),
                    "actions": (
                        {k: v[window] for k, v in action_arrays.items()}
                        if isinstance(action_arrays, dict)
                        else action_arrays[window]
                    ),
                    "rewards": rewards[window],
                    "terminated": bool(terminated[end]),
                    "truncated": bool(truncated[end]),
                }
            )
        start = end + 1
    return episodes


def _flag(following: Any, name: str, steps: int, default: npt.NDArray[np.bool_]) -> Any:
    if name not in following:
        return default
    return _array(following.get(name)).reshape(steps, -1)[:, 0].astype(bool)


def _pick(arrays: dict[Any, npt.NDArray[Any]], keys: list[Any], at: int | slice) -> Any:
    if len(keys) == 1:
        return arrays[keys[0]][at]
    return {_leaf_name(key): arrays[key][at] for key in keys}
