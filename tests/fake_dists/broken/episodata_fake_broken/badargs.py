"""A hook plugin whose implementation names an argument no hook specification has."""

from __future__ import annotations

from episodata_core.hooks import hookimpl


@hookimpl
def after_episode_written(dataset: object, episode_index: int) -> None:
    raise AssertionError("a hookimpl with a wrong argument name must never be called")
