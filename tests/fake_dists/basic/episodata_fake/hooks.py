"""Hook plugin of the fake distribution: records every finished episode."""

from __future__ import annotations

from episodata_core.hooks import hookimpl

CALLS: list[tuple[object, int]] = []


@hookimpl
def after_episode_written(dataset: object, episode: int) -> None:
    CALLS.append((dataset, episode))
