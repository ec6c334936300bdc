"""``verify``: check every file of a Zarr dataset against what was recorded at write time.

- metadata: the root ``zarr.json`` against its CRC-32 in the commit record, group
  ``zarr.json`` files against the fixed group document, array ``zarr.json`` files against
  the CRC-32 of their creation metadata (shape aside) and the committed row counts;
- the index: every entry against its ``entry_hash``;
- data: every chunk is decoded (its CRC-32C codec catches damaged bytes), then the rows
  of each finalized episode are checked against the CRC-32 recorded when it was written;
- the episode log: it opens, every block matches its CRC-32, every episode it holds
  is whole, and every index entry that sends readers to the log finds its episode;
- symbolic links: every link anywhere in the folder that leads out of it;
- the manifest: its schema against the stored one and the arrays' metadata.

Every read goes to the disk, through fresh handles without a cache: a writer's cache
holds the chunks as it wrote them, whatever became of the files since.
Problems are collected, never raised, so one report lists all of them.
"""

from __future__ import annotations

import json
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from episodata_core.errors import EpisodataError
from episodata_zarr._confine import outside_links
from episodata_zarr._disk import chunk_file, open_uncached
from episodata_zarr._layout import GROUP_DOCUMENT, INDEX_PATH, crc32, metadata_digest
from episodata_zarr._manifest import manifest_problems
from episodata_zarr._reads import result
from episodata_zarr._table import entry_hash

if TYPE_CHECKING:
    import numpy.typing as npt

    from episodata_zarr._impl import ZarrStore
    from episodata_zarr._layout import FieldLayout

__all__ = ["verify"]


def verify(store: ZarrStore) -> list[str]:
    """Describe every damaged file, chunk or episode of ``store``'s folder (or prefix).

    On object storage there are no links to follow, and no episode log (a writer stages
    it locally); the manifest's schema is checked at open by the core.
    """
    remote = store.remote is not None
    problems = ([] if remote else outside_links(store.folder)) + _check_metadata(store)
    disk = open_uncached(store.arrays, _expected_arrays(store))
    problems += [str(err) for err in disk.values() if isinstance(err, EpisodataError)]
    entries, found = _check_index(store, disk[INDEX_PATH])
    problems += found
    for key, layout in store.layouts.items():
        problems += _check_field(store, key, layout, entries, disk[layout.path])
    if not remote:
        problems += _check_log(store)
        problems += manifest_problems(store.folder, store.schema)
    return problems


def _read(store: ZarrStore, relative: str) -> bytes:
    """The bytes of ``relative`` in the dataset; ``OSError`` when they cannot be read."""
    if store.remote is None:
        return (store.folder / relative).read_bytes()
    from episodata_core.location import key_value

    data = key_value(store.remote).get(relative)
    if data is None:
        raise FileNotFoundError(f"no object {relative!r}")
    return data


def _expected_arrays(store: ZarrStore) -> dict[str, tuple[str, int]]:
    """Array path -> (path whose metadata checksum applies, rows it must hold at least)."""
    record = store.record
    arrays = {INDEX_PATH: (INDEX_PATH, record.episodes)}
    for layout in store.layouts.values():
        arrays[layout.path] = (layout.path, record.rows)
    return arrays


def _check_metadata(store: ZarrStore) -> list[str]:
    problems: list[str] = []
    record = store.record
    root = f"{store.location}/zarr.json"
    try:
        if zlib.crc32(_read(store, "zarr.json")) != record.root:
            problems.append(f"{root}: differs from the checksum recorded at creation")
    except OSError as err:
        problems.append(f"{root}: cannot be read ({err})")
    arrays = _expected_arrays(store)
    groups = {str(Path(p).parent) for p in arrays if "/" in p}
    groups |= {str(Path(*Path(g).parts[:d])) for g in groups for d in range(1, len(Path(g).parts))}
    groups |= {"data", "index"}
    for path in sorted(set(arrays) | groups):
        file = f"{store.location}/{path}/zarr.json"
        try:
            document = json.loads(_read(store, f"{path}/zarr.json"))
        except (OSError, ValueError) as err:
            problems.append(f"{file}: cannot be read as Zarr metadata ({err})")
            continue
        if path not in arrays:
            if document != GROUP_DOCUMENT:
                problems.append(f"{file}: is not the group metadata it was written as")
            continue
        digest_path, rows = arrays[path]
        if not isinstance(document, dict) or metadata_digest(document) != record.metadata.get(
            digest_path
        ):
            problems.append(f"{file}: differs from the array metadata written at creation")
        elif not isinstance(document.get("shape"), list) or document["shape"][0] < rows:
            problems.append(
                f"{file}: shape {document.get('shape')} holds fewer than the {rows} committed rows"
            )
    return problems


def _check_index(store: ZarrStore, handle: Any) -> tuple[npt.NDArray[np.int64] | None, list[str]]:
    """The committed index entries (None if unreadable) and their problems."""
    episodes = store.record.episodes
    if isinstance(handle, EpisodataError):
        return None, []  # reported already
    try:
        entries = result(handle[:episodes].read(), f"{INDEX_PATH}")
    except EpisodataError as err:
        return None, [f"{INDEX_PATH}: cannot be read ({err})"]
    entries = np.asarray(entries, dtype=np.int64)
    bad = np.flatnonzero(entry_hash(entries[:, :-1]) != entries[:, -1])
    return entries, [
        f"{INDEX_PATH}: the entry of episode {int(e)} does not match its checksum" for e in bad
    ]


def _check_field(
    store: ZarrStore,
    key: str,
    layout: FieldLayout,
    entries: npt.NDArray[np.int64] | None,
    handle: Any,
) -> list[str]:
    """Decode every chunk of one field; compare each finalized episode's CRC-32."""
    problems: list[str] = []
    if isinstance(handle, EpisodataError):
        return problems  # reported already
    # the folded episodes, as the index on disk says (a writer's memory also holds
    # episodes that are only in the log); the memory's index if the disk's is unreadable
    optional = store.index_layout.optional
    if entries is not None:
        # an entry reaching past the committed rows is a torn fold's: in the log still
        ends = entries[:, 0] + entries[:, 1] + 1
        folded = (entries[:, 4] == 0) & (ends <= store.record.rows)
        if key in optional:
            folded &= entries[:, 5 + optional.index(key)] != 0
        stored = np.flatnonzero(folded)
        starts, ends = entries[stored, 0], entries[stored, 0] + entries[stored, 1] + 1
    else:
        table = store.index.table()
        stored = np.flatnonzero(~table.ongoing[: store.record.episodes])
        stored = stored[store.index.row_start.view()[stored] < store.record.rows]
        if key in table.present:
            stored = stored[table.present[key][stored]]
        starts = store.index.row_start.view()[stored]
        ends = starts + table.length[stored] + 1
    column = 5 + len(optional) + store.index_layout.fields.index(key)
    order = np.argsort(starts)
    stored, starts, ends = stored[order], starts[order], ends[order]
    crc = np.zeros(len(stored), dtype=np.int64)
    unreadable = np.zeros(len(stored), dtype=bool)
    chunk = store.arrays.chunk_rows(handle)
    total = store.record.rows
    for lo in range(0, total, chunk):
        hi = min(lo + chunk, total)
        first = int(np.searchsorted(ends, lo, side="right"))
        last = int(np.searchsorted(starts, hi, side="left"))
        try:
            rows = np.ascontiguousarray(result(handle[lo:hi].read(), "read"))
        except EpisodataError as err:
            file = chunk_file(store.location, layout.path, handle, lo)
            missing = "NOT_FOUND" in str(err) or f"{file} is missing" in str(err)
            what = "is missing" if missing else "cannot be decoded"
            problems.append(f"field {key!r}: chunk {file} (rows {lo}-{hi}) {what}: {err}")
            unreadable[first:last] = True
            continue
        for i in range(first, last):
            part = rows[max(int(starts[i]), lo) - lo : min(int(ends[i]), hi) - lo]
            crc[i] = crc32(part, int(crc[i]))
    if entries is None:
        return problems  # the index is unreadable: reported already, nothing to compare
    expected = entries[stored, column]
    problems.extend(
        f"episode {int(stored[i])}, field {key!r}: rows {int(starts[i])}-{int(ends[i])} of "
        f"{store.location}/{layout.path} differ from the checksum recorded when it was written"
        for i in np.flatnonzero((crc != expected) & ~unreadable)
    )
    return problems


def _check_log(store: ZarrStore) -> list[str]:
    """The episode log, read again through a connection of its own: blocks and episodes."""
    from episodata_zarr._log import EpisodeLog

    log = EpisodeLog(store.folder, writable=False)
    try:
        entries = log.read()  # checks every block against its CRC-32
    except EpisodataError as err:
        return [str(err)]
    problems = []
    for entry in entries:
        end = 0
        for block in entry.blocks:
            if block.first > end:
                break
            end = max(end, block.first + block.rows)
        if end != entry.rows:
            problems.append(
                f"{log.path}: episode {entry.id} holds rows 0-{end} of the {entry.rows} it lists"
            )
    return problems
