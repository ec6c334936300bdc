"""Creating and opening a dataset: from a folder or a URL to a ready :class:`ZarrStore`.

The root group (``zarr.json``) holds the schema; it is checked against the commit
record's checksum before the schema is trusted. A local open checks that no file it
reads or SQLite writes is a link out of the folder, reads the manifest, adopts the
log and, writable, recovers after a crashed writer; an open on object storage pins the
newest commit record and keeps the log in a local staging folder.
"""

from __future__ import annotations

import json
import zlib
from pathlib import Path
from typing import TYPE_CHECKING

from episodata_core.errors import DatasetStateError, EpisodataError
from episodata_core.location import key_value, resolve
from episodata_core.schema import DatasetSchema
from episodata_zarr._commit import CommitRecord, read_commit, write_commit
from episodata_zarr._confine import check_files
from episodata_zarr._layout import (
    COMMIT_NAME,
    FORMAT,
    FORMAT_VERSION,
    GROUP_DOCUMENT,
    INDEX_PATH,
    field_layouts,
    group_paths,
    metadata_digest,
)
from episodata_zarr._log import LOG_NAME
from episodata_zarr._manifest import check_manifest
from episodata_zarr._objects import read_remote_commit, staging_folder

if TYPE_CHECKING:
    from episodata_core.location import Location
    from episodata_zarr._impl import ZarrStore
    from episodata_zarr._options import ZarrOptions

__all__ = ["create", "open_local", "open_remote"]


def create(
    cls: type[ZarrStore], schema: DatasetSchema, location: str, options: ZarrOptions
) -> ZarrStore:
    """Write an empty dataset into ``location`` (an empty or missing folder, or prefix)."""
    where = resolve(location)
    kv = key_value(location)
    remote = where if where.remote else None
    if remote is not None:
        remote.check_writable("create a dataset at")
        folder = staging_folder()
        # the core's lease and creation marker are dotfiles, its manifest comes later
        leftovers = sorted(key for key in kv.list() if not key.split("/")[-1].startswith("."))
    else:
        folder = Path(location)
        folder.mkdir(parents=True, exist_ok=True)
        # the core's lock file is a dotfile; anything else means the folder is in use
        leftovers = sorted(p.name for p in folder.iterdir() if not p.name.startswith("."))
    if leftovers:
        raise DatasetStateError(
            f"cannot create a Zarr dataset in {location!r}: it already holds {leftovers[:5]}"
        )
    layouts = field_layouts(schema, options)
    root = {
        **GROUP_DOCUMENT,
        "attributes": {
            "episodata": {
                "format": FORMAT,
                "format_version": FORMAT_VERSION,
                "schema": schema.model_dump(mode="json"),
                "commit_record": COMMIT_NAME,
                "episode_log": LOG_NAME,
            }
        },
    }
    root_bytes = json.dumps(root, indent=2).encode()
    kv.put("zarr.json", root_bytes)
    for group in ["index", *group_paths(lay.path for lay in layouts.values())]:
        kv.put(f"{group}/zarr.json", json.dumps(GROUP_DOCUMENT, indent=2).encode())
    record = CommitRecord(
        format=FORMAT,
        format_version=FORMAT_VERSION,
        generation=0,
        episodes=0,
        rows=0,
        metadata={},
        root=zlib.crc32(root_bytes),
    )
    store = cls(folder, schema, layouts, options, record, writable=True, remote=remote)
    store.arrays.create()
    digests = {
        path: metadata_digest(store.arrays.read_document(path))
        for path in [INDEX_PATH, *(lay.path for lay in layouts.values())]
    }
    store.record = record.model_copy(update={"metadata": digests})
    if remote is None:
        write_commit(folder, store.record)
    else:
        store.arrays.publish(store.record)
    store.arrays.open()
    return store


def open_local(
    cls: type[ZarrStore], location: str, options: ZarrOptions, *, writable: bool
) -> ZarrStore:
    """Open a dataset folder; a writable open also recovers after a crashed writer."""
    folder = Path(location)
    # no link out of the folder is read
    # (nor written: SQLite writes the log's -wal and -shm files next to it)
    check_files(
        folder, [COMMIT_NAME, "zarr.json", *(f"{LOG_NAME}{s}" for s in ("", "-wal", "-shm"))]
    )
    record = read_commit(folder)
    root_file = folder / "zarr.json"
    try:
        root_bytes = root_file.read_bytes()
    except OSError as err:
        raise EpisodataError(f"{root_file}: cannot be read ({err})") from err
    schema = _root_schema(root_bytes, record.root, str(root_file), "commit.json")
    if record.ongoing:
        raise EpisodataError(
            f"{folder}: written by an earlier episodata-zarr (layout 1) that kept the "
            f"ongoing episodes {sorted(record.ongoing)} in ongoing/; this version keeps "
            "them in log.sqlite and cannot read those files. Open the dataset with "
            "episodata-zarr 0.1 and finalize or flush and close it, then open it here"
        )
    check_manifest(folder, schema)  # before anything is sized or read by either schema
    store = cls(folder, schema, field_layouts(schema, options), options, record, writable=writable)
    store.arrays.open()
    store.load_index(record)
    stale = store.adopt_snapshot()
    if writable:
        store.recover(stale)
    return store


def open_remote(
    cls: type[ZarrStore], where: Location, options: ZarrOptions, *, writable: bool
) -> ZarrStore:
    """Open a dataset on object storage: the newest commit record, pinned."""
    if writable:
        where.check_writable("write to")
    kv = key_value(where)
    record = read_remote_commit(kv, where)
    root_bytes = kv.get("zarr.json")
    if root_bytes is None:
        raise EpisodataError(f"{where.url}/zarr.json is missing; the dataset is damaged")
    schema = _root_schema(root_bytes, record.root, f"{where.url}/zarr.json", "the commit record")
    store = cls(
        staging_folder(),
        schema,
        field_layouts(schema, options),
        options,
        record,
        writable=writable,
        remote=where,
    )
    store.arrays.open()
    store.load_index(record)
    if writable:
        # rows past the record (a killed writer's) are ignored and written over
        store.arrays.trim(record.rows, record.episodes)
    return store


def _root_schema(root_bytes: bytes, checksum: int, name: str, record: str) -> DatasetSchema:
    """The schema in the root ``zarr.json``, after its checksum from the commit record."""
    if zlib.crc32(root_bytes) != checksum:
        raise EpisodataError(
            f"{name}: damaged (it differs from the checksum in {record}); it holds the "
            "schema, so the dataset cannot be read"
        )
    try:
        return DatasetSchema.model_validate(
            json.loads(root_bytes)["attributes"]["episodata"]["schema"]
        )
    except (ValueError, KeyError, TypeError) as err:
        raise EpisodataError(f"{name}: no valid episodata schema ({err})") from err
