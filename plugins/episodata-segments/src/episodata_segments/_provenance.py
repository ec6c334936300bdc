"""Importer provenance of a dataset, looked up by episode position.

Importers append one record per import to ``metadata["imports"]`` (formats.md §0.2),
each with ``first_episode_id``, ``episode_count``, a ``source`` object (whose extras say
e.g. ``flags_present`` and ``row_constant_columns``) and a columnar ``episodes`` table
with one value per imported episode. Episodes that no record covers are *native*: they
were written directly, e.g. by ``Dataset.from_episodes``.
"""

from __future__ import annotations

import bisect
import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from episodata_core.errors import FormatError

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["ImportRecord", "Provenance"]


@dataclass(frozen=True)
class ImportRecord:
    """One ``metadata["imports"]`` entry, covering episodes ``first .. first + count - 1``."""

    position: int
    first: int
    count: int
    record: Mapping[str, Any]
    columns: Mapping[str, list[Any]]

    def extra(self, name: str, default: Any = None) -> Any:
        """A source extra such as ``flags_present``; ``source`` first, then the record."""
        source = self.record.get("source")
        if isinstance(source, dict) and name in source:
            return source[name]
        return self.record.get(name, default)


class Provenance:
    """The import records of one labelled dataset."""

    def __init__(self, metadata: Mapping[str, Any], label: str) -> None:
        imports = metadata.get("imports", [])
        if not isinstance(imports, list):
            raise FormatError(
                f"label {label!r}: metadata['imports'] must be a list of import records, "
                f"got {type(imports).__name__}"
            )
        records: list[ImportRecord] = []
        for position, record in enumerate(imports):
            records.append(_parse_record(record, position, label))
        records.sort(key=lambda r: r.first)
        for before, after in itertools.pairwise(records):
            if before.first + before.count > after.first:
                raise FormatError(
                    f"label {label!r}: import records {before.position} and {after.position} "
                    "claim the same episodes; the dataset metadata is inconsistent"
                )
        self._records = records
        self._firsts = [r.first for r in records]
        self.label = label

    @property
    def records(self) -> tuple[ImportRecord, ...]:
        """Every import record, by first episode."""
        return tuple(self._records)

    def record_of(self, episode: int) -> tuple[ImportRecord, int] | None:
        """The record that imported ``episode`` and its row in the ``episodes`` table."""
        at = bisect.bisect_right(self._firsts, episode) - 1
        if at < 0:
            return None
        record = self._records[at]
        if episode >= record.first + record.count:
            return None
        return record, episode - record.first

    def column(self, episode: int, name: str) -> Any:
        """The provenance value ``name`` of ``episode``, or ``None`` when it has none."""
        found = self.record_of(episode)
        if found is None:
            return None
        record, row = found
        values = record.columns.get(name)
        return None if values is None else values[row]

    def extra(self, episode: int, name: str, default: Any = None) -> Any:
        """The source extra ``name`` of the record that imported ``episode``."""
        found = self.record_of(episode)
        return default if found is None else found[0].extra(name, default)

    def flags_present(self, episode: int) -> bool:
        """Whether the source had flags: true for native episodes and unsaid extras."""
        return bool(self.extra(episode, "flags_present", True))

    def source_summary(self, episodes: tuple[int, ...]) -> dict[str, Any]:
        """The ``source`` object of the records that the chosen episodes came from."""
        used: dict[int, ImportRecord] = {}
        for episode in episodes:
            found = self.record_of(episode)
            if found is not None:
                used[found[0].position] = found[0]
        sources = [dict(_source(r.record)) for _, r in sorted(used.items())]
        if len(sources) == 1:
            return sources[0]
        if not sources:
            return {}
        return {"imports": sources}


def _source(record: Mapping[str, Any]) -> Mapping[str, Any]:
    source = record.get("source", {})
    result = dict(source) if isinstance(source, dict) else {}
    if "format" in record and "format" not in result:
        result["format"] = record["format"]
    return result


def _parse_record(record: Any, position: int, label: str) -> ImportRecord:
    where = f"label {label!r}, metadata['imports'][{position}]"
    if not isinstance(record, dict):
        raise FormatError(f"{where}: expected an import record (a dict)")
    first, count = record.get("first_episode_id"), record.get("episode_count")
    if not isinstance(first, int) or not isinstance(count, int) or first < 0 or count < 0:
        raise FormatError(
            f"{where}: 'first_episode_id' and 'episode_count' must be non-negative integers "
            f"(got {first!r}, {count!r})"
        )
    episodes = record.get("episodes", {})
    if not isinstance(episodes, dict):
        raise FormatError(f"{where}: 'episodes' must be a columnar table {{column: [values]}}")
    for name, values in episodes.items():
        if not isinstance(values, list) or len(values) != count:
            size = len(values) if isinstance(values, list) else type(values).__name__
            raise FormatError(
                f"{where}: provenance column {name!r} has {size} values for {count} episodes"
            )
    return ImportRecord(
        position=position, first=first, count=count, record=record, columns=episodes
    )
