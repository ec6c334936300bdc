"""The bytes on disk: what dead writers left behind.

TensorStore's file kvstore writes a key by filling a temporary file next to it and renaming
that over the key. In its default locking mode the temporary is ``<key>.__lock``, which
a killed writer leaves behind and the next writer reuses *without truncating it*: the key
then holds the new bytes plus a stale tail, and every episode in that chunk is lost. Our
contexts turn TensorStore's locking off (``ZarrStore.new_context``: one writer holds our
own lock), so the temporary becomes ``<key>_<random hex>.__lock``, never reused; and a
writable open removes every ``*.__lock`` left by a dead writer (storage-engine.md,
promise 4: nothing a dead writer left is trusted).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["remove_leftovers"]

LOCK_SUFFIX = ".__lock"
"""Suffix of TensorStore's temporaries: ``<key>.__lock`` and ``<key>_<hex>.__lock``."""


def remove_leftovers(folder: Path) -> int:
    """Remove every TensorStore temporary under ``folder``; returns how many.

    Only a writable open calls this, under the writer lock, so no live writer owns one.
    """
    removed = 0
    # os.walk does not follow symlinks: nothing outside the dataset is touched
    for root, _, files in os.walk(folder):
        for name in files:
            if name.endswith(LOCK_SUFFIX):
                os.unlink(os.path.join(root, name))
                removed += 1
    return removed
