"""A Zarr dataset on object storage: generation-numbered commit records and a staging folder.

Object stores have no rename and no ``flock``, so the commit protocol of ``_fold.py``
runs there as:

1. chunks and index entries are written as whole objects (a PUT replaces an object
   atomically: a reader gets the old or the new one, never a mix). A chunk that holds
   committed rows is rewritten with those rows unchanged, so a reader that pinned an
   older generation reads the same values either way; nothing a reader may need is
   ever deleted (rows past a commit are written over, old records are pruned only
   once newer ones exist);
2. the commit record is published last as a new object ``commits/<generation>.json``,
   written only if it does not exist yet (a conditional write), so two writers can never
   both commit one generation;
3. readers list ``commits/`` and pin the newest valid record until they ``refresh()``.
   A copy of it is then written to ``commit.json``, for stores that cannot list
   (``http(s)://``: a dataset published on a web server) and readers without episodata.

The episode log cannot live on object storage (SQLite needs a local file): a writer
keeps it in a local staging folder, and on object storage an episode is durable once a
``flush()`` (or ``close()``) has folded it into the arrays. A writer that dies loses
what it had not flushed; what it had is intact.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from episodata_core.errors import DatasetStateError, EpisodataError
from episodata_zarr._commit import parse_commit
from episodata_zarr._layout import COMMIT_NAME

if TYPE_CHECKING:
    from episodata_core.location import KeyValue, Location
    from episodata_zarr._commit import CommitRecord

__all__ = [
    "COMMITS",
    "commit_key",
    "prune_commits",
    "read_remote_commit",
    "remove_staging",
    "staging_folder",
    "write_remote_commit",
]

COMMITS = "commits/"
_KEEP = 4  # records kept at close: readers pinned a little behind still find theirs


def commit_key(generation: int) -> str:
    """The object name of generation ``generation``'s record (sorts by generation)."""
    return f"{COMMITS}{generation:012d}.json"


def read_remote_commit(kv: KeyValue, location: Location) -> CommitRecord:
    """The newest commit record under ``commits/`` (``commit.json`` over HTTP)."""
    if location.scheme in ("http", "https"):
        data = kv.get(COMMIT_NAME)
        if data is None:
            raise EpisodataError(
                f"{location.url}/{COMMIT_NAME} is missing: the location is not a Zarr "
                "episodata dataset"
            )
        return parse_commit(data, f"{location.url}/{COMMIT_NAME}")
    keys = [key for key in kv.list(COMMITS) if key.endswith(".json")]
    if not keys:
        raise EpisodataError(
            f"{location.url}/{COMMITS} holds no commit record: the location is not a Zarr "
            "episodata dataset, or its creation was interrupted"
        )
    key = keys[-1]
    data = kv.get(key)
    if data is None:
        raise EpisodataError(f"{location.url}/{key} vanished while it was read; open again")
    return parse_commit(data, f"{location.url}/{key}")


def write_remote_commit(kv: KeyValue, location: Location, record: CommitRecord) -> None:
    """Publish ``record`` as a new object, refused if that generation exists already."""
    import json

    key = commit_key(record.generation)
    document = json.dumps(record.document()).encode()
    if not kv.put_if(key, document, None):
        raise DatasetStateError(
            f"{location.url}/{key} was committed by another writer meanwhile (this writer's "
            "lease had expired); nothing of this commit counts. Open the dataset again"
        )
    kv.put(COMMIT_NAME, document)


def prune_commits(kv: KeyValue, keep: int = _KEEP) -> None:
    """Delete all but the newest ``keep`` records (garbage collection, after commits)."""
    keys = [key for key in kv.list(COMMITS) if key.endswith(".json")]
    for key in keys[:-keep]:
        kv.delete(key)


def staging_folder() -> Path:
    """A new local folder for a writer's episode log."""
    return Path(tempfile.mkdtemp(prefix="episodata-zarr-staging-"))


def remove_staging(folder: Path) -> None:
    """Remove a staging folder (its episodes were folded, or are lost with the writer)."""
    shutil.rmtree(folder, ignore_errors=True)
