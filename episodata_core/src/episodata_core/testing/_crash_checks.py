"""The checks of a kill chain (``crash.py``): what the writers reported against what is read.

:class:`Reported` collects the writers' report lines; the ``check_*`` functions open the
dataset after a kill and compare every episode with the rows rebuilt from its id and
variant (``_crash_writer.chain_episode``), never with the backend under test.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import numpy as np

from episodata_core.dataset import Dataset
from episodata_core.protocols import GatherRequest
from episodata_core.testing._crash_writer import (
    ChainEpisode,
    bulk_episode,
    chain_episode,
    write_steps,
)

if TYPE_CHECKING:
    from pathlib import Path

    from episodata_core.protocols import EpisodeTable, Rows
    from episodata_core.schema import DatasetSchema
    from episodata_core.testing.crash import KillChainFigures

__all__ = ["Reported", "check_after_kill", "check_dataset", "finish"]

_SHOWN_PROBLEMS = 8


@dataclasses.dataclass
class Reported:
    """Everything the writers of a chain have reported so far."""

    final: set[int] = dataclasses.field(default_factory=set)
    flushed: dict[int, int] = dataclasses.field(default_factory=dict)  # episode -> rows
    whole: set[int] = dataclasses.field(default_factory=set)  # last written by add_episode(s)
    variant: dict[int, int] = dataclasses.field(default_factory=dict)  # episode -> variant
    batches: list[tuple[int, int]] = dataclasses.field(default_factory=list)
    flushes: int = 0
    offset: int = 0

    def read(self, path: Path) -> None:
        """Take in the lines written since the last read (a torn last line waits)."""
        data = path.read_bytes() if path.exists() else b""
        self.batches = []  # only the round just ended can have torn a batch; ids are reused
        end = data.rfind(b"\n", self.offset) + 1
        for line in data[self.offset : end].decode().splitlines():
            word, *args = line.split()
            if word == "add":
                self.whole.add(int(args[0]))
                self.variant[int(args[0])] = int(args[1])
            elif word == "start":
                # an id whose whole write died before it committed is free for the next one
                self.whole.discard(int(args[0]))
                self.variant[int(args[0])] = int(args[1])
            elif word == "batch":
                first, count, variant = map(int, args)
                self.batches.append((first, count))
                self.whole.update(range(first, first + count))
                self.variant.update(dict.fromkeys(range(first, first + count), variant))
            elif word == "final":
                self.final.update(map(int, args))
            elif word == "flushed":
                self.flushes += 1
                for pair in args:
                    episode, rows = map(int, pair.split(":"))
                    self.flushed[episode] = max(rows, self.flushed.get(episode, 0))
        self.offset = max(self.offset, end)

    def durable(self) -> set[int]:
        return self.final | set(self.flushed)

    def content(self, schema: DatasetSchema, episode: int) -> ChainEpisode:
        """What episode ``episode`` holds when whole, as the round that began it wrote it."""
        return chain_episode(schema, episode, self.variant.get(episode, 0))


def check_after_kill(
    location: str,
    schema: DatasetSchema,
    reported: Reported,
    figures: KillChainFigures,
    all_or_none: bool,
) -> str | None:
    """Check what a reader sees, then what the recovering open leaves; a failure or None."""
    for writable in (False, True):
        what = "the recovering open" if writable else "a read-only open"
        try:
            dataset = Dataset.open(location, read_only=not writable)
            if writable:
                dataset._prepare_write()
        except Exception as error:  # noqa: BLE001 (any failure to open is a finding)
            figures.reopen_failures += 1
            return f"{what} failed: {type(error).__name__}: {error}"
        try:
            problems = check_dataset(dataset, schema, reported, figures, all_or_none=all_or_none)
            verify = getattr(dataset.backend, "verify", None)
            if writable and not problems and verify is not None:
                damaged = verify()
                if damaged:
                    figures.verify_failures += 1
                    problems = [f"verify() after recovery: {damaged[:_SHOWN_PROBLEMS]}"]
        finally:
            dataset.close()
        if problems:
            return f"{what}: " + "; ".join(problems[:_SHOWN_PROBLEMS])
    return None


def finish(
    location: str, schema: DatasetSchema, reported: Reported, figures: KillChainFigures
) -> str | None:
    """A new writer ends every ongoing episode and appends one; a last check of it all."""
    try:
        dataset = Dataset.open(location)
        table = dataset.backend.episode_table()
        for episode in np.flatnonzero(table.ongoing).tolist():
            content = reported.content(schema, episode)
            writer = dataset.resume_episode(episode)
            write_steps(writer, schema, content, int(table.length[episode]) + 1, content.num_rows)
            reported.final.add(episode)
        new = dataset.num_episodes
        reported.whole.add(new)
        reported.variant[new] = 1 << 20  # a variant no writer round uses
        dataset.add_episode(bulk_episode(schema, reported.content(schema, new)))
        reported.final.add(new)
        dataset.close()
    except Exception as error:  # noqa: BLE001 (a writer that cannot append is a finding)
        return f"a new writer could not append: {type(error).__name__}: {error}"
    try:
        dataset = Dataset.open(location, read_only=True)
    except Exception as error:  # noqa: BLE001
        figures.reopen_failures += 1
        return f"the last read-only open failed: {type(error).__name__}: {error}"
    try:
        figures.episodes = dataset.num_episodes
        problems = check_dataset(dataset, schema, reported, figures, all_or_none=False)
        still = np.flatnonzero(dataset.backend.episode_table().ongoing).tolist()
        if still:
            problems.append(f"episodes {still} are still ongoing after they were ended")
        verify = getattr(dataset.backend, "verify", None)
        damaged = verify() if verify is not None and not problems else []
        if damaged:
            figures.verify_failures += 1
            problems = [f"verify(): {damaged[:_SHOWN_PROBLEMS]}"]
    finally:
        dataset.close()
    return "; ".join(problems[:_SHOWN_PROBLEMS]) if problems else None


def check_dataset(
    dataset: Dataset,
    schema: DatasetSchema,
    reported: Reported,
    figures: KillChainFigures,
    *,
    all_or_none: bool,
) -> list[str]:
    """Every episode of ``dataset`` against the oracle and the reports; the problems found."""
    table = dataset.backend.episode_table()
    count = len(table)
    problems: list[str] = []
    lost: set[int] = set()
    for episode in sorted(reported.durable()):
        if episode >= count:
            state = "finalized" if episode in reported.final else "flushed"
            problems.append(f"episode {episode} (reported {state}) is gone: {count} episodes")
            lost.add(episode)
    gathered = _gather_all(dataset, table)
    for episode in range(count):
        problem = _check_episode(dataset, table, gathered, schema, reported, episode)
        figures.episodes_checked += 1
        if problem is not None:
            problems.append(f"episode {episode}: {problem}")
            if episode in reported.durable():
                lost.add(episode)
            else:
                figures.torn += 1
    if all_or_none:
        for first, size in reported.batches:
            if first < count < first + size:
                problems.append(
                    f"{count - first} of the {size} episodes of the add_episodes call from "
                    f"episode {first} survived; expected all or none"
                )
    figures.lost += len(lost)
    return problems


def _gather_all(dataset: Dataset, table: EpisodeTable) -> Rows | None:
    """Every row of every episode in one batched read, ``[N, max rows, ...]`` per field.

    ``None`` when the read raises: the episodes are then read one by one, so that the
    check names the damaged one.
    """
    count = len(table)
    if count == 0:
        return None
    rows = (table.length + 1).astype(np.int64)
    zeros = np.zeros(count, dtype=np.int64)
    request = GatherRequest(
        np.arange(count, dtype=np.int64),
        zeros,
        rows,
        zeros,
        num_rows=int(rows.max()),
        fields=dataset.schema.qualified_keys,
    )
    try:
        return dataset.backend.gather_rows(request)
    except Exception:  # noqa: BLE001 (read again episode by episode to name the damage)
        return None


def _check_episode(
    dataset: Dataset,
    table: EpisodeTable,
    gathered: Rows | None,
    schema: DatasetSchema,
    reported: Reported,
    episode: int,
) -> str | None:
    """What is wrong with one stored episode, or None."""
    content = reported.content(schema, episode)
    kept = int(table.length[episode]) + 1
    if bool(table.ongoing[episode]):
        if episode in reported.final:
            return "reported finalized, but it is ongoing"
        if episode in reported.whole:
            return "written whole, but it is ongoing (half-visible)"
        flushed = reported.flushed.get(episode, 1)
        if kept < flushed:
            return f"holds {kept} rows, but {flushed} were reported flushed"
        if kept > content.num_rows:
            return f"holds {kept} rows, more than the {content.num_rows} ever written"
    else:
        if kept != content.num_rows:
            return f"finalized with {kept} of its {content.num_rows} rows"
        flags = (bool(table.terminated[episode]), bool(table.truncated[episode]))
        expected_flags = (content.terminated, content.truncated)
        if flags != expected_flags:
            return f"flags (terminated, truncated) are {flags}, expected {expected_flags}"
    present = {key for key in schema.qualified_keys if key not in table.present}
    present |= {key for key, column in table.present.items() if column[episode]}
    if present != set(content.rows):
        return f"holds fields {sorted(present)}, expected {sorted(content.rows)}"
    stored: Rows
    if gathered is not None:
        stored = {key: gathered[key][episode, :kept] for key in present}
    else:
        try:
            stored = dataset.backend.read_rows(episode, 0, kept, sorted(present))
        except Exception as error:  # noqa: BLE001 (a read that raises is damage, named here)
            return f"reading it raised {type(error).__name__}: {error}"
    for key in sorted(present):
        got, expected = np.asarray(stored[key]), content.rows[key][:kept]
        if got.dtype != expected.dtype or got.shape != expected.shape:
            return f"{key!r} is {got.dtype}{got.shape}, expected {expected.dtype}{expected.shape}"
        if got.tobytes() != expected.tobytes():
            return f"{key!r} differs from what was written"
    return None
