"""Reading npz_directory datasets written by episodata 0.2.0 (format generation ``"0.2"``).

The layout, as observed in files 0.2.0 wrote (``tests/data/episodata-0.2/README.md``)::

    manifest.json              format_version 1, backend "npz_directory", a schema_version 2
                               schema, and storage.episodes: one entry per episode id, in id
                               order, {file, length (rows, T + 1), terminated, truncated,
                               ongoing}
    episodes/ep_{id:06d}.npz   one deflated zip of <key>.npy members, [length, *shape] each;
                               nested keys keep their '/' (keyboard/jump.npy); an absent
                               optional field has no member; ongoing episodes live here too

The manifest is checked at open; each archive is checked (member names, header shapes
and dtypes, CRC) when it is first read, and kept decoded in a small cache.
"""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from episodata_core import location
from episodata_core.errors import DatasetStateError, SchemaError
from episodata_core.generations import OlderDataset
from episodata_core.older import ReadOnlyBackend, manifest_from_02, read_npz_members, unique_keys
from episodata_core.protocols import EpisodeTable

if TYPE_CHECKING:
    from collections.abc import Mapping

    import numpy.typing as npt
    from pydantic import BaseModel

    from episodata_core.schema import DatasetSchema, FieldSpec

__all__ = ["Npz02Backend", "open_02"]

_CACHED_EPISODES = 16  # decoded archives kept; sampling revisits episodes


class Npz02Backend(ReadOnlyBackend):
    """An npz_directory dataset written by episodata 0.2.0, opened read-only."""

    name: ClassVar[str] = "npz_directory"
    description: ClassVar[str] = "npz_directory datasets written by episodata 0.2.0 (read-only)"
    generation: ClassVar[str] = "0.2"

    def __init__(
        self, folder: str, schema: DatasetSchema, table: EpisodeTable, files: list[Path]
    ) -> None:
        super().__init__(folder, schema, table)
        self._files = files
        self._by_key = unique_keys(schema, folder)
        self._cache: OrderedDict[int, dict[str, npt.NDArray[Any]]] = OrderedDict()

    @classmethod
    def open(cls, location: str, options: BaseModel, *, writable: bool = False) -> Npz02Backend:
        """Open read-only; ``writable=True`` is refused with the way to migrate."""
        from episodata_core.manifest import read_manifest_document

        backend = open_02(location, read_manifest_document(location)).backend
        assert isinstance(backend, Npz02Backend)
        if writable:
            raise DatasetStateError(backend.read_only_reason)
        return backend

    def _read(self, episode: int, start: int, stop: int, spec: FieldSpec) -> npt.NDArray[Any]:
        return self._episode(episode)[spec.key][start:stop].copy()

    def _episode(self, episode: int) -> dict[str, npt.NDArray[Any]]:
        cached = self._cache.get(episode)
        if cached is not None:
            self._cache.move_to_end(episode)
            return cached
        path = self._files[episode]
        members = read_npz_members(str(path), self._by_key, int(self._table.length[episode]) + 1)
        for spec in self._schema:
            key = spec.qualified_key
            stored = spec.key in members
            expected = bool(self._table.present[key][episode]) if spec.optional else True
            if stored != expected:
                raise SchemaError(
                    f"{str(path)!r}: field {spec.key!r} is {'' if stored else 'not '}stored, but "
                    f"episode {episode} is declared {'with' if expected else 'without'} it"
                )
        self._cache[episode] = members
        if len(self._cache) > _CACHED_EPISODES:
            self._cache.popitem(last=False)
        return members


def _entry(value: object, where: str, number: int) -> tuple[str, int, bool, bool, bool]:
    names = ("file", "length", "terminated", "truncated", "ongoing")
    if not isinstance(value, dict) or not set(names) <= set(value):
        raise SchemaError(
            f"{where}: storage.episodes[{number}] must be an object with {', '.join(names)}, "
            f"got {value!r}"
        )
    file, length = value["file"], value["length"]
    flags = [value[name] for name in names[2:]]
    if not isinstance(file, str) or type(length) is not int or length < 1:
        raise SchemaError(
            f"{where}: storage.episodes[{number}] needs a file name and a length >= 1 (rows), "
            f"got file {file!r}, length {length!r}"
        )
    if not all(isinstance(flag, bool) for flag in flags):
        raise SchemaError(f"{where}: storage.episodes[{number}]: flags must be true or false")
    return file, length, flags[0], flags[1], flags[2]


def open_02(folder: str, document: Mapping[str, Any]) -> OlderDataset:
    """Open the 0.2 npz_directory dataset at ``folder`` whose manifest is ``document``.

    Which optional fields an episode stores is read from its archive's member list
    (a directory read, no decompression); the archive's arrays are read when first asked.
    """
    import zipfile

    where = repr(str(Path(folder) / location.MANIFEST_NAME))
    manifest = manifest_from_02(document, where)
    schema = manifest.schema
    entries = [_entry(e, where, n) for n, e in enumerate(document["storage"]["episodes"])]
    files: list[Path] = []
    for number, (file, *_) in enumerate(entries):
        path = location.inside(folder, file)
        if not path.is_file():
            raise SchemaError(f"{where}: storage.episodes[{number}]: {file!r} is missing")
        files.append(path)
    optional = [spec for spec in schema if spec.optional]
    present = {spec.qualified_key: np.ones(len(entries), np.bool_) for spec in optional}
    if optional:
        for number, path in enumerate(files):
            try:
                with zipfile.ZipFile(path) as archive:
                    names = set(archive.namelist())
            except (zipfile.BadZipFile, OSError) as err:
                raise SchemaError(
                    f"{str(path)!r} is not a readable episode archive ({err})"
                ) from err
            for spec in optional:
                present[spec.qualified_key][number] = f"{spec.key}.npy" in names
    table = EpisodeTable(
        length=np.array([e[1] - 1 for e in entries], np.int64),
        terminated=np.array([e[2] for e in entries], np.bool_),
        truncated=np.array([e[3] for e in entries], np.bool_),
        ongoing=np.array([e[4] for e in entries], np.bool_),
        present=present,
    )
    return OlderDataset(Npz02Backend(folder, schema, table, files), manifest)
