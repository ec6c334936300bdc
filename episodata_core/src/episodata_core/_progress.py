"""Progress bars for long work: tqdm when it is installed, nothing otherwise.

:func:`progress_bar` wraps an iterable whose length is known (episodes to copy);
:func:`episode_progress` follows episodes as they are written by code that does not
report its progress itself (an importer plugin, a rollout loop), through the
``after_episode_written`` hook, and shows the rate in episodes and megabytes.
"""

from __future__ import annotations

import contextlib
import math
import time
from typing import TYPE_CHECKING, Any, TypeVar, cast

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator

    from episodata_core.dataset import Dataset

__all__ = ["episode_progress", "progress_bar"]

T = TypeVar("T")


def _tqdm() -> Any:
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return None
    return tqdm


def progress_bar(
    items: Iterable[T],
    *,
    enabled: bool,
    what: str,
    action: str,
    total: int | None = None,
    nbytes: Callable[[T], int] | None = None,
) -> Iterable[T]:
    """``items``, shown as a progress bar on stderr when ``enabled`` and tqdm is installed.

    ``total`` gives an iterator without a length its ETA; ``nbytes(item)`` adds the
    megabytes done and their rate. tqdm is optional: the core depends on numpy, pydantic
    and pluggy only, and the ``episodata`` distribution adds tqdm for the command line.
    """
    tqdm = _tqdm() if enabled else None
    if tqdm is None:
        return items
    bar = tqdm(items, unit=what.rstrip("s"), desc=f"{action} {what}", total=total)
    if nbytes is None:
        return cast("Iterable[T]", bar)
    return _with_rate(bar, nbytes)


def _with_rate(bar: Any, nbytes: Callable[[T], int]) -> Iterator[T]:
    done = 0
    started = time.monotonic()
    for item in bar:
        done += nbytes(item)
        rate = done / max(time.monotonic() - started, 1e-9) / 1e6
        # shown at the bar's next refresh (tqdm's own pace), and in its final line
        bar.set_postfix_str(f"{done / 1e6:.1f} MB, {rate:.1f} MB/s", refresh=False)
        yield item


class _Follower:
    """Counts the episodes written to one dataset and their bytes, into a bar."""

    REFRESH = 0.5  # seconds between rate updates

    def __init__(self, dataset: Dataset, bar: Any) -> None:
        self._backend = dataset.backend
        self._bar = bar
        self._row_bytes = sum(
            spec.np_dtype.itemsize * math.prod(spec.shape) for spec in dataset.schema
        )
        self._bytes = 0
        self._started = self._shown = time.monotonic()

    def after_episode_written(self, dataset: Dataset, episode: int) -> None:
        if dataset.backend is not self._backend:  # another dataset of this process
            return
        self._bytes += (len(dataset.episode(episode)) + 1) * self._row_bytes
        self._bar.update(1)
        now = time.monotonic()
        if now - self._shown >= self.REFRESH:
            self._shown = now
            rate = self._bytes / max(now - self._started, 1e-9) / 1e6
            self._bar.set_postfix_str(f"{self._bytes / 1e6:.1f} MB, {rate:.1f} MB/s")


@contextlib.contextmanager
def episode_progress(
    dataset: Dataset, *, enabled: bool, action: str, total: int | None = None
) -> Iterator[None]:
    """Show the episodes written to ``dataset`` inside the block (count, MB, MB/s, ETA).

    ``total`` (when the number of episodes is known) gives the bar an ETA. Nothing is
    shown when ``enabled`` is false or tqdm is missing.
    """
    tqdm = _tqdm() if enabled else None
    if tqdm is None:
        yield
        return
    from episodata_core import hooks

    class EpisodeProgress:
        """The hook plugin that feeds the bar while the block runs."""

        @hooks.hookimpl
        def after_episode_written(self, dataset: Dataset, episode: int) -> None:
            follower.after_episode_written(dataset, episode)

    bar = tqdm(total=total, unit=" episodes", desc=action)
    follower = _Follower(dataset, bar)
    listener = EpisodeProgress()
    hooks.register_hooks(listener)
    try:
        yield
    finally:
        hooks.unregister_hooks(listener)
        bar.close()
