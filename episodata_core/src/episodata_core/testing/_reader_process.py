"""A reader of the concurrent-reader check: a process that samples while the writer writes.

Run as ``python -m episodata_core.testing._reader_process CONFIG`` (a JSON object). It
opens the dataset read-only, creates the ready file the configuration names, then loops
until the stop file appears: ``refresh()``, a check of the episode table, then reads
through the public API, each checked against the oracle (:mod:`._reader_checks`):

``sample`` mode
    ``sample_transitions``; a ``segment_stream`` without read-ahead (``episode-uniform``
    sampler) and one with the backend's default read-ahead (``uniform``, windows split
    into context and target), which keeps reading in its thread while this loop
    refreshes; ``segments()`` with prefix padding, read a loader batch at a time; whole
    episodes through ``episode(e).read()``, an ongoing one whenever there is one.
``loader`` mode
    a torch ``DataLoader`` with 2 forked workers over ``segments()``, a new pass each
    round (the workers reopen the dataset, so they see at least what this process saw).

Around every read the reader compares the backend's episode table with the one its last
``refresh()`` adopted: a change in between is a finding (unless the configuration allows
it, then it is counted), and each read is checked between the tables before and after it.
After the stop file appears it refreshes once more, checks the table and reads every
episode whole, and prints its figures as one JSON line on its standard output: what it
read, the problems found (``episode, row, field: expected, got``), and the table it saw
last, which the parent compares with what the writer left.
"""

from __future__ import annotations

import json
import sys
import time
import traceback
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from episodata_core.dataset import Dataset
from episodata_core.testing._reader_checks import TAG_KEY, Oracle, TableState

if TYPE_CHECKING:
    from collections.abc import Callable

    from episodata_core.sampling.segments import SegmentDataset
    from episodata_core.sampling.stream import SegmentStream

WINDOW = 5
"""Transitions per sampled window: longer than some episodes, so some windows are padded."""

_T = TypeVar("_T")
_SHOWN = 25  # problems kept in the figures (all are counted)
_LIFETIME_S = 600.0  # a reader whose parent died stops on its own


class _Reader:
    """One reader's state: its dataset, oracle, last table and figures."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.dataset = Dataset.open(config["location"], read_only=True)
        self.oracle = Oracle(self.dataset.schema)
        self.rng = np.random.default_rng(config["seed"])
        self.table: TableState | None = None
        self.figures: dict[str, Any] = {
            "name": config["name"],
            "mode": config["mode"],
            "rounds": 0,
            "reads": {},
            "rows_checked": 0,
            "ongoing_rows_checked": 0,
            "episodes_seen": [],
            "moves": 0,  # tables that changed without refresh()
            "problem_count": 0,
            "problems": [],
            "warnings": [],
        }

    # -- bookkeeping ----------------------------------------------------------------------

    def problem(self, *messages: str) -> None:
        for message in messages:
            self.figures["problem_count"] += 1
            if len(self.figures["problems"]) < _SHOWN:
                self.figures["problems"].append(f"round {self.figures['rounds']}: {message}")

    def count(self, kind: str, rows: int = 0, ongoing: int = 0) -> None:
        reads = self.figures["reads"]
        reads[kind] = reads.get(kind, 0) + 1
        self.figures["rows_checked"] += rows
        self.figures["ongoing_rows_checked"] += ongoing

    def attempt(self, kind: str, read: Callable[..., _T], *args: Any) -> _T | None:
        """``read(*args)``; an exception is a finding, named with its kind and traceback tail."""
        try:
            return read(*args)
        except Exception as error:  # noqa: BLE001 (any exception in a reader is a finding)
            tail = traceback.format_exception(error)[-3:]
            self.problem(f"{kind} raised {type(error).__name__}: {error} | {''.join(tail)}")
            return None

    def snapshot(self) -> TableState:
        """Refresh, copy the table and check it against the oracle and the last one."""
        self.dataset.refresh()
        return self._adopt(TableState.of(self.dataset.backend.episode_table()))

    def current(self, when: str) -> TableState:
        """The table now, which must still be the one the last ``refresh()`` adopted.

        A backend whose reads adopt newer commits by themselves breaks the promise of one
        snapshot between refreshes: a finding, unless the configuration allows it (then
        only counted). Either way the newer table is checked and adopted.
        """
        assert self.table is not None
        table = TableState.of(self.dataset.backend.episode_table())
        moved = self.table.difference(table)
        if moved is None:
            return self.table
        self.figures["moves"] += 1
        if not self.config["moves_allowed"]:
            self.problem(f"the episode table changed without refresh() {when}: {moved}")
        return self._adopt(table)

    def _adopt(self, table: TableState) -> TableState:
        self.problem(*self.oracle.check_table(self.table, table))
        self.table = table
        seen = self.figures["episodes_seen"]
        if not seen or seen[-1] != len(table):
            seen.append(len(table))
        return table

    # -- reads: each checks the read against the tables before and after it --------------

    def transitions(self) -> None:
        older = self.current("before sample_transitions")
        batch = self.dataset.sample_transitions(32, seed=int(self.rng.integers(1 << 31)))
        newer = self.current("during sample_transitions")
        problems, rows, ongoing = self.oracle.check_transitions(
            "sample_transitions",
            batch.buffers,
            batch.terminated,
            batch.truncated,
            older=older,
            newer=newer,
        )
        self.problem(*problems)
        self.count("sample_transitions", rows, ongoing)

    def windows(self, kind: str, batch: Any, older: TableState, newer: TableState) -> None:
        problems, rows, ongoing = self.oracle.check_windows(
            kind,
            batch.buffers,
            batch.terminated,
            batch.truncated,
            batch.mask,
            older=older,
            newer=newer,
        )
        self.problem(*problems)
        self.count(kind, rows, ongoing)

    def stream(self, kind: str, stream: SegmentStream, since: TableState | None) -> None:
        """One batch; ``since``: the table when a read-ahead stream began, else None."""
        older = self.current(f"before {kind}")
        batch = stream.sample()
        newer = self.current(f"during {kind}")
        self.windows(kind, batch, older if since is None else since, newer)

    def segments(self, segments: SegmentDataset) -> None:
        older = self.current("before segments")
        segments.refresh()
        if not len(segments):
            return
        indices = self.rng.integers(len(segments), size=8).tolist()
        batch = segments.__getitems__(indices)
        self.windows("segments", batch, older, self.current("during segments"))

    def episode(self, episode: int) -> None:
        older = self.current("before episode.read")
        segment = self.dataset.episode(episode).read()
        newer = self.current("during episode.read")
        self.problem(
            *self.oracle.check_episode(
                "episode.read",
                episode,
                segment.buffers,
                segment.terminated,
                segment.truncated,
                older=older,
                newer=newer,
            )
        )
        rows = int(np.asarray(segment.buffers[TAG_KEY]).shape[0])
        self.count("episode.read", rows, rows * bool(newer.ongoing[episode]))

    def sweep(self, table: TableState) -> None:
        """Read every episode whole."""
        for episode in range(len(table)):
            self.attempt("episode.read", self.episode, episode)

    # -- modes ----------------------------------------------------------------------------

    def sample_loop(self, stop: Path, deadline: float) -> None:
        synced: SegmentStream | None = None
        ahead: SegmentStream | None = None
        ahead_since: TableState | None = None  # the table when the read-ahead stream began
        segments: SegmentDataset | None = None
        while not stop.exists() and time.monotonic() < deadline:
            self.figures["rounds"] += 1
            table = self.snapshot()
            if not table.length.sum():
                continue  # nothing to sample yet
            seed = int(self.rng.integers(1 << 31))
            if synced is None:
                synced = self.dataset.segment_stream(
                    WINDOW, batch_size=8, seed=seed, prefetch=0, sampler="episode-uniform"
                )
            if ahead is None or self.figures["rounds"] % 20 == 0:
                # a new read-ahead stream now and then, so its lower bound stays recent
                if ahead is not None:
                    ahead.close()
                ahead_since = table
                ahead = self.dataset.segment_stream(
                    context_length=2, target_length=WINDOW - 2, batch_size=8, seed=seed
                )
            if segments is None:
                segments = self.dataset.segments(WINDOW, pad="prefix")
            self.attempt("sample_transitions", self.transitions)
            self.attempt("stream", self.stream, "stream", synced, None)
            kind = "stream read-ahead"
            self.attempt(kind, self.stream, kind, ahead, ahead_since)
            self.attempt("segments", self.segments, segments)
            ongoing = np.flatnonzero(table.ongoing)
            picks = [int(self.rng.integers(len(table)))]
            if len(ongoing):
                picks.append(int(self.rng.choice(ongoing)))
            for episode in picks:
                self.attempt("episode.read", self.episode, episode)
        for stream in (synced, ahead):
            if stream is not None:
                stream.close()

    def loader_loop(self, stop: Path, deadline: float) -> None:
        import torch
        from torch.utils.data import DataLoader, RandomSampler

        segments: SegmentDataset | None = None
        while not stop.exists() and time.monotonic() < deadline:
            self.figures["rounds"] += 1
            older = self.snapshot()
            if not older.length.sum():
                continue
            if segments is None:
                segments = self.dataset.segments(WINDOW)
            segments.refresh()
            draws = RandomSampler(
                segments,
                replacement=True,
                num_samples=48,
                generator=torch.Generator().manual_seed(int(self.rng.integers(1 << 31))),
            )
            loader: DataLoader[Any] = DataLoader(
                segments,  # type: ignore[arg-type]
                batch_size=16,
                sampler=draws,
                num_workers=2,
                collate_fn=segments.collate,
                multiprocessing_context="fork",
            )
            batches: list[Any] = self.attempt("DataLoader", list, loader) or []
            # the workers opened the dataset after ``older``; this refresh is newer still
            newer = self.snapshot()
            for batch in batches:
                self.attempt("DataLoader", self.windows, "DataLoader", batch, older, newer)

    def finish(self) -> None:
        """The last look, after the writer closed: the whole table and every episode."""
        table = self.snapshot()
        self.sweep(table)
        last = self.table
        assert last is not None
        self.figures["final"] = {
            "length": last.length.tolist(),
            "ongoing": last.ongoing.tolist(),
        }


def main(argv: list[str]) -> int:
    """Run the reader described by ``argv[0]`` (JSON); print its figures."""
    began = time.perf_counter()
    config = json.loads(argv[0])
    stop = Path(config["stop"])
    deadline = time.monotonic() + _LIFETIME_S
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if config["mode"] == "loader":
            # torch first, so that ready means reading (its import takes seconds)
            import torch

            torch.set_num_threads(1)
        reader = _Reader(config)
        Path(config["ready"]).touch()
        reader.figures["startup_s"] = time.perf_counter() - began
        loop = reader.loader_loop if config["mode"] == "loader" else reader.sample_loop
        try:
            loop(stop, deadline)
            stopped = time.perf_counter()
            reader.finish()
            reader.figures["finish_s"] = time.perf_counter() - stopped
        except Exception as error:  # noqa: BLE001 (reported to the parent, which fails)
            reader.problem(f"the reader stopped: {''.join(traceback.format_exception(error))}")
        reader.dataset.close()
    reader.figures["warnings"] = [f"{w.category.__name__}: {w.message}" for w in caught][:_SHOWN]
    print(json.dumps(reader.figures), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
