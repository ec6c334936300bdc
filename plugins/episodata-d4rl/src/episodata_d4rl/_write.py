"""The write pass of the D4RL importer: action-out rows to action-in episodes (§1.5-1.6).

Kept episodes are grouped into batches of adjacent rows that fit the read budget; each
column is read once per batch with one slice, and every episode of the batch is a set of
views into those arrays. Where the final observation comes from ``next_observations``,
the episode's observations are copied once into one buffer with it, so that the reset
observation and the rest stay views of that buffer. The episodes of a batch go to
``Dataset.add_episodes`` together: a durable commit per episode would dominate.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from episodata_core.importing import PendingEpisodes

if TYPE_CHECKING:
    from collections.abc import Iterator

    import numpy.typing as npt

    from episodata_core.dataset import Dataset
    from episodata_d4rl._boundaries import Episodes, Plan
    from episodata_d4rl._layout import Layout

__all__ = ["batches", "write_episodes"]


def batches(
    first: npt.NDArray[np.int64], last: npt.NDArray[np.int64], row_bytes: int, budget: int
) -> Iterator[tuple[int, int]]:
    """Split episodes (rows ``first[k]..last[k]``) into ``[k0, k1)`` runs within budget.

    A run spans rows ``first[k0]..max(last[k0:k1])``; it holds at least one episode even
    when that episode alone exceeds the budget.
    """
    k0, count = 0, int(first.shape[0])
    limit = max(1, budget // max(row_bytes, 1))
    while k0 < count:
        k1 = k0 + 1
        end = int(last[k0])
        while k1 < count and max(end, int(last[k1])) - int(first[k0]) + 1 <= limit:
            end = max(end, int(last[k1]))
            k1 += 1
        yield k0, k1
        k0 = k1


def write_episodes(
    handle: Any,
    dataset: Dataset,
    layout: Layout,
    episodes: Episodes,
    plan: Plan,
    *,
    rewards: npt.NDArray[Any],
    terminals: npt.NDArray[np.bool_],
    cache: dict[str, npt.NDArray[Any]],
    budget: int,
    write_bytes: int,
) -> None:
    """Append every kept episode to ``dataset`` in source order.

    At most ``write_bytes`` of episodes go to one ``add_episodes`` call.
    """
    kept = np.flatnonzero(plan.kept)
    if kept.size == 0:
        return
    schema = layout.schema
    keys = {role: schema.by_role(role)[0].key for role in ("observation", "action", "reward")}
    columns = [layout.observation_key, "actions", *layout.infos.values()]
    columns += [layout.next_key] if layout.next_key else []
    row_bytes = sum(_row_bytes(handle[key]) for key in columns)
    first = episodes.start[kept]
    # a maze2d piece also reads the next piece's first row, its final observation
    last = episodes.end[kept] + (plan.final[kept] == "next_row_continuous")
    pending = PendingEpisodes(dataset, max_bytes=write_bytes)
    for k0, k1 in batches(first, last, row_bytes, budget):
        r0, r1 = int(first[k0]), int(last[k0:k1].max()) + 1

        def read(key: str, r0: int = r0, r1: int = r1) -> npt.NDArray[Any]:
            return _read(handle, key, r0, r1, cache, layout.string_widths.get(key))

        obs = read(layout.observation_key)
        actions = read("actions")
        successors = read(layout.next_key) if layout.next_key else None
        infos = {key: read(source) for key, source in layout.infos.items()}
        if layout.terminals_info:
            infos["terminals"] = terminals[r0:r1]
        for k in kept[k0:k1]:
            s, e = int(episodes.start[k]) - r0, int(episodes.end[k]) - r0
            steps = int(plan.transitions[k])
            final = str(plan.final[k])
            if final == "next_observations":
                assert successors is not None
                joined = _joined(obs[s : e + 1], successors[e : e + 1])
            else:  # "next_row_continuous" reads row e + 1; "dropped" stops at row e
                joined = obs[s : s + 1 + steps]
            episode: dict[str, Any] = {
                "initial_observation": {keys["observation"]: joined[0]},
                "observations": {keys["observation"]: joined[1:]},
                "actions": {keys["action"]: actions[s : s + steps]},
                "rewards": {keys["reward"]: rewards[r0 + s : r0 + s + steps]},
                "terminated": bool(plan.terminated[k]),
                "truncated": bool(plan.truncated[k]),
            }
            if infos or layout.info_valid:
                episode["initial_info"], episode["infos"] = _infos(
                    infos, s, e, steps, unknown_last=final == "next_observations"
                )
            pending.add(episode)
        # written before the next read: the queued episodes are views of this batch
        pending.write()


def _joined(rows: npt.NDArray[Any], last: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """``rows`` followed by ``last`` in one new buffer: the episode's only copy."""
    out = np.empty((rows.shape[0] + last.shape[0], *rows.shape[1:]), dtype=rows.dtype)
    out[: rows.shape[0]] = rows
    out[rows.shape[0] :] = last
    return out


def _infos(
    infos: dict[str, npt.NDArray[Any]], s: int, e: int, steps: int, *, unknown_last: bool
) -> tuple[dict[str, Any], dict[str, npt.NDArray[Any]]]:
    if not unknown_last:
        first = {key: values[s] for key, values in infos.items()}
        return first, {key: values[s + 1 : s + 1 + steps] for key, values in infos.items()}
    # Case A: the info of next_observations[e] was never recorded
    joined = {
        key: _joined(values[s : e + 1], _unknown_row(values)) for key, values in infos.items()
    }
    initial: dict[str, Any] = {key: values[0] for key, values in joined.items()}
    rest = {key: values[1:] for key, values in joined.items()}
    initial["info_valid"] = np.True_
    rest["info_valid"] = np.arange(steps) < steps - 1
    return initial, rest


def _unknown_row(values: npt.NDArray[Any]) -> npt.NDArray[Any]:
    row = np.zeros((1, *values.shape[1:]), dtype=values.dtype)  # 0, False, "" or b""
    if values.dtype.kind in "fc":
        row[...] = np.nan
    return row


def _row_bytes(dataset: Any) -> int:
    return int(dataset.dtype.itemsize * np.prod(dataset.shape[1:], dtype=np.int64))


def _read(
    handle: Any, key: str, r0: int, r1: int, cache: dict[str, npt.NDArray[Any]], width: int | None
) -> npt.NDArray[Any]:
    if key in cache:
        return cache[key][r0:r1]
    dataset = handle[key]
    if width is not None:
        return np.asarray(dataset.asstr()[r0:r1], dtype=f"<U{width}")
    return np.asarray(dataset[r0:r1])
