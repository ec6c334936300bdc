"""A writable open after a crashed writer: drop what no commit covers, say what was found.

What a killed writer can leave (see ``_fold``): chunks and index rows past the commit
record, a commit record it never renamed, log entries a fold had already folded
(stale), and index rows a torn fold rewrote (their episodes are still in the log).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from episodata_zarr._disk import remove_leftovers
from episodata_zarr._layout import COMMIT_NAME

if TYPE_CHECKING:
    from episodata_zarr._impl import ZarrStore

__all__ = ["present_keys", "recover"]

_LOG = logging.getLogger("episodata")


def recover(store: ZarrStore, stale: list[int]) -> None:
    """Remove a crashed writer's leftovers; ``stale``: log entries already folded."""
    record = store.record
    removed = remove_leftovers(store.arrays, record, store.tail.ongoing)
    for temporary in store.folder.glob(f".{COMMIT_NAME}.*.tmp"):
        temporary.unlink(missing_ok=True)  # a commit record a killed writer never renamed
    store.log.forget(stale)
    store.arrays.trim(record.rows, record.episodes)
    if store.torn_entries:
        # index rows a torn fold wrote send their episodes back to the log on disk
        # too (readers apply that rule anyway; a reader without episodata may not)
        ids = store.torn_entries
        rewritten = store.index.make_entries(
            [-1] * len(ids),
            store.index.length.view()[ids].tolist(),
            [False] * len(ids),
            [False] * len(ids),
            [True] * len(ids),
            [present_keys(store, e) for e in ids],
        )
        store.arrays.write([], ids, rewritten)
    if store.log.interrupted or stale or removed:
        _LOG.info(
            "%s: recovered after an interrupted writer: %d finalized and %d ongoing "
            "episodes in the episode log, %d stale log entries and %d temporary files "
            "removed",
            store.folder,
            len(store.tail.episodes),
            len(store.tail.ongoing),
            len(stale),
            removed,
        )


def present_keys(store: ZarrStore, episode: int) -> list[str]:
    """The fields an episode stores."""
    table = store.index.table()
    return [
        k
        for k in store.schema.qualified_keys
        if k not in table.present or bool(table.present[k][episode])
    ]
