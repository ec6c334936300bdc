"""Readers in other processes sample while one writer appends, flushes and folds.

:func:`run_concurrent_readers` creates a dataset, starts reader processes
(:mod:`episodata_core.testing._reader_process`) and then writes in this process through
the public API: many short episodes step by step (``new_episode``, ``add_step`` /
``add_steps``), a few of them left open for a long time while others start and finish,
so ids interleave; ``flush()`` while episodes are ongoing; whole episodes and
``add_episodes`` batches. Every row follows from its episode id
(:mod:`episodata_core.testing._reader_checks`), so each reader checks every row it
samples, and every flag, without asking the writer. When the backend's options have a
``fold_bytes`` field it is set to 64 KiB, so that the writer folds its log into the
arrays many times while the readers read.

The readers refresh and sample in a loop (see the reader module for the reads; one of
them reads through a torch ``DataLoader`` with forked workers); the set of finalized
episodes a reader sees may only grow, and no read may raise. After the writer closes,
each reader takes a last look, which must be exactly what the writer left.

:class:`ConcurrentReaderTests` runs it as a short default test (two sampling readers)
and as slow ones (with the DataLoader reader, and longer), next to a deterministic test
that a reader's episode table changes only at its ``refresh()``; a backend's test module
subclasses it and sets ``backend_name``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import pytest

from episodata_core import registry
from episodata_core.dataset import Dataset
from episodata_core.testing._crash_writer import bulk_episode, start_episode, write_steps
from episodata_core.testing._reader_checks import (
    TAG_KEY,
    Oracle,
    TableState,
    reader_episode,
    reader_schema,
)
from episodata_core.testing.examples import example_schema

if TYPE_CHECKING:
    from episodata_core.schema import DatasetSchema
    from episodata_core.writers import EpisodeWriter

__all__ = [
    "FOLD_BYTES",
    "TAG_KEY",
    "ConcurrentReaderTests",
    "ReaderFigures",
    "backend_options",
    "run_concurrent_readers",
]

FOLD_BYTES = 64 << 10
"""``fold_bytes`` for backends that have it: small, so folds happen during the check."""

_READER_MODULE = "episodata_core.testing._reader_process"  # run with -m, never imported here
_MAX_ONGOING = 4
_READY_TIMEOUT_S = 180.0  # readers import numpy, the backend and (one) torch first
_STOP_TIMEOUT_S = 180.0  # a reader's last look reads every episode once
_SHOWN = 12


@dataclasses.dataclass
class ReaderFigures:
    """What one run did and found; ``problems`` must stay empty."""

    backend: str
    seed: int
    seconds: float = 0.0  # of writing while every reader was reading
    episodes: int = 0  # written in all
    step_calls: int = 0
    whole: int = 0  # add_episode calls
    batches: int = 0  # add_episodes calls
    flushes: int = 0
    ongoing_at_close: int = 0
    readers: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    problems: list[str] = dataclasses.field(default_factory=list)

    def summary(self) -> str:
        """One line per run and per reader, for the test log."""
        lines = [
            (
                f"concurrent readers {self.backend} seed={self.seed}: {self.episodes} episodes "
                f"({self.step_calls} step calls, {self.whole} whole, {self.batches} batches, "
                f"{self.flushes} flushes, {self.ongoing_at_close} ongoing at close) in "
                f"{self.seconds:.1f} s of reading; {len(self.problems)} problems"
            )
        ]
        for reader in self.readers:
            reads = ", ".join(f"{k} {v}" for k, v in sorted(reader.get("reads", {}).items()))
            lines.append(
                f"  {reader.get('name')}: {reader.get('rounds', 0)} rounds, "
                f"{reader.get('rows_checked', 0)} rows checked "
                f"({reader.get('ongoing_rows_checked', 0)} of ongoing episodes), "
                f"episodes seen {_growth(reader.get('episodes_seen', []))}, "
                f"{reader.get('moves', 0)} table changes without refresh(); {reads}; "
                f"started in {reader.get('startup_s', 0):.1f} s, last look "
                f"{reader.get('finish_s', 0):.1f} s"
            )
        return "\n".join(lines)

    def report(self) -> str:
        """The summary and the first problems, for an assertion message."""
        return "\n".join([self.summary(), *self.problems[:_SHOWN]])


def _growth(seen: list[int]) -> str:
    return f"{seen[0]} -> {seen[-1]} in {len(seen)} steps" if seen else "none"


def backend_options(backend: str, options: dict[str, Any] | None = None) -> dict[str, Any]:
    """``options`` plus ``fold_bytes=FOLD_BYTES`` where the backend's Options have it."""
    backend_cls: Any = registry.get_backend(backend)
    fields = getattr(getattr(backend_cls, "Options", None), "model_fields", {})
    folds = {"fold_bytes": FOLD_BYTES} if "fold_bytes" in fields else {}
    return {**folds, **(options or {})}


class _Writer:
    """The one writer: episodes step by step, whole and in batches, and flushes."""

    def __init__(self, dataset: Dataset, figures: ReaderFigures, seed: int) -> None:
        self.dataset = dataset
        self.schema = dataset.schema
        self.figures = figures
        self.rng = np.random.default_rng([seed, 0x4EAD])
        # episode -> (writer, rows written, how often it is picked: slow ones linger)
        self.ongoing: dict[int, tuple[EpisodeWriter, int, float]] = {}
        self.rows: dict[int, int] = {}  # rows written of every episode
        self.finalized: set[int] = set()

    def start(self) -> None:
        episode = self.dataset.num_episodes
        content = reader_episode(self.schema, episode)
        pace = 0.05 if self.rng.random() < 0.3 else 1.0
        self.ongoing[episode] = (start_episode(self.dataset, content), 1, pace)
        self.rows[episode] = 1

    def step(self) -> None:
        episodes = sorted(self.ongoing)
        paces = np.array([self.ongoing[e][2] for e in episodes])
        episode = int(self.rng.choice(episodes, p=paces / paces.sum()))
        writer, written, pace = self.ongoing[episode]
        content = reader_episode(self.schema, episode)
        stop = min(content.num_rows, written + int(self.rng.choice([1, 1, 1, 2, 5])))
        self.figures.step_calls += 1
        self.rows[episode] = stop
        if write_steps(writer, self.schema, content, written, stop):
            del self.ongoing[episode]
            self.finalized.add(episode)
        else:
            self.ongoing[episode] = (writer, stop, pace)

    def whole(self, count: int) -> None:
        first = self.dataset.num_episodes
        contents = [reader_episode(self.schema, first + k) for k in range(count)]
        bulks = [bulk_episode(self.schema, content) for content in contents]
        if count == 1:
            ids = [self.dataset.add_episode(bulks[0])]
            self.figures.whole += 1
        else:
            ids = self.dataset.add_episodes(bulks)
            self.figures.batches += 1
        assert ids == list(range(first, first + count)), f"the writes returned ids {ids}"
        for episode, content in zip(ids, contents, strict=True):
            self.rows[episode] = content.num_rows
            self.finalized.add(episode)

    def flush(self) -> None:
        self.dataset.flush()
        self.figures.flushes += 1

    def prime(self) -> None:
        """What readers find when they open: finalized episodes and a flushed ongoing one."""
        self.whole(3)
        self.start()
        self.step()
        self.whole(1)
        self.flush()

    def act(self) -> None:
        """One random write."""
        choice = self.rng.random()
        if choice < 0.12 and len(self.ongoing) < _MAX_ONGOING:
            self.start()
        elif choice < 0.2:
            self.whole(1)
        elif choice < 0.24:
            self.whole(int(self.rng.integers(2, 7)))
        elif self.ongoing:
            self.step()
        if self.ongoing and self.rng.random() < 0.08:
            self.flush()

    def expected(self) -> dict[str, list[Any]]:
        """The table every reader must see once the writer closed (close flushes)."""
        count = len(self.rows)
        return {
            "length": [self.rows[e] - 1 for e in range(count)],
            "ongoing": [e not in self.finalized for e in range(count)],
        }


class _ReaderProcess:
    """One reader subprocess, its ready file and its error output."""

    def __init__(
        self, location: str, name: str, mode: str, seed: int, stop: Path, moves_allowed: bool
    ) -> None:
        self.name = name
        self.ready = Path(f"{location}-{name}.ready")
        self.err = Path(f"{location}-{name}.err")
        config = {
            "location": location,
            "name": name,
            "mode": mode,
            "seed": seed,
            "stop": str(stop),
            "ready": str(self.ready),
            "moves_allowed": moves_allowed,
        }
        with self.err.open("wb") as stderr:
            self.process = subprocess.Popen(
                [sys.executable, "-m", _READER_MODULE, json.dumps(config)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
            )

    def failed_early(self) -> str | None:
        """Why it exited before the stop, if it did."""
        code = self.process.poll()
        if code is None:
            return None
        return f"{self.name} exited with code {code} while the writer wrote: {self._tail()}"

    def collect(self) -> tuple[dict[str, Any] | None, str | None]:
        """Its figures, or why there are none."""
        try:
            out, _ = self.process.communicate(timeout=_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.communicate()
            return None, f"{self.name} did not stop within {_STOP_TIMEOUT_S:.0f} s"
        lines = out.strip().splitlines()
        if self.process.returncode != 0 or not lines:
            return None, f"{self.name} exited with code {self.process.returncode}: {self._tail()}"
        return json.loads(lines[-1]), None

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.communicate()

    def _tail(self) -> str:
        return " | ".join(self.err.read_text(errors="replace").strip().splitlines()[-6:])


def run_concurrent_readers(
    backend: str,
    location: str,
    *,
    schema: DatasetSchema | None = None,
    seed: int = 0,
    seconds: float = 2.0,
    readers: int = 2,
    loader: bool = True,
    options: dict[str, Any] | None = None,
    moves_allowed: bool = False,
) -> ReaderFigures:
    """Write to a new dataset at ``location`` while reader processes sample it.

    Parameters
    ----------
    backend
        The backend's registered name (readers find it through the entry points).
    location
        A folder that does not exist yet; the readers' ready, stop and error files go
        next to it (``<location>-<reader>.err``).
    schema
        The fields besides the ``reader_tag`` info field that the check adds;
        :func:`~episodata_core.testing.example_schema` by default.
    seconds
        How long the writer goes on once every reader has started reading.
    readers
        Reader processes in ``sample`` mode; ``loader=True`` adds one that reads through
        a torch ``DataLoader`` with 2 forked workers (torch must be installed).
    options
        Backend options, on top of :func:`backend_options`'s ``fold_bytes``.
    moves_allowed
        Whether a reader's episode table may change without ``refresh()`` (a backend
        whose reads adopt newer commits by themselves). Such changes are counted either
        way; unless allowed, each is a problem. Reads are checked against the tables
        before and after them, so rows and flags are checked exactly all the same.
    """
    figures = ReaderFigures(backend=backend, seed=seed)
    schema = reader_schema(example_schema() if schema is None else schema)
    dataset = Dataset.create(schema, location, backend=backend, **backend_options(backend, options))
    writer = _Writer(dataset, figures, seed)
    writer.prime()
    stop = Path(f"{location}-stop")
    modes = [(f"reader-{i}", "sample") for i in range(readers)]
    modes += [("loader", "loader")] if loader else []
    with contextlib.ExitStack() as stack:
        procs = []
        for i, (name, mode) in enumerate(modes):
            proc = _ReaderProcess(location, name, mode, seed * 100 + i, stop, moves_allowed)
            stack.callback(proc.kill)
            procs.append(proc)
        failure = _write_while_reading(writer, procs, seconds, figures)
        figures.ongoing_at_close = len(writer.ongoing)
        dataset.close()
        figures.episodes = len(writer.rows)
        stop.touch()
        if failure is not None:
            figures.problems.append(failure)
        expected = writer.expected()
        for proc in procs:
            result, why = proc.collect()
            if result is None:
                figures.problems.append(why or f"{proc.name}: no figures")
                continue
            figures.readers.append(result)
            figures.problems += [f"{proc.name}: {p}" for p in result["problems"]]
            if result["problem_count"] > len(result["problems"]):
                hidden = result["problem_count"] - len(result["problems"])
                figures.problems.append(f"{proc.name}: {hidden} more problems")
            figures.problems += [f"{proc.name}: warning {w}" for w in result["warnings"]]
            final = result.get("final")
            if final is not None and final != expected:
                figures.problems.append(_final_difference(proc.name, final, expected))
    return figures


def _write_while_reading(
    writer: _Writer, procs: list[_ReaderProcess], seconds: float, figures: ReaderFigures
) -> str | None:
    """Write until every reader has read for ``seconds``; a failure or None."""
    began = time.monotonic()
    all_ready: float | None = None
    while True:
        writer.act()
        now = time.monotonic()
        for proc in procs:
            failure = proc.failed_early()
            if failure is not None:
                return failure
        if all_ready is None:
            if all(proc.ready.exists() for proc in procs):
                all_ready = now
            elif now - began > _READY_TIMEOUT_S:
                late = [proc.name for proc in procs if not proc.ready.exists()]
                return f"readers {late} did not open the dataset in {_READY_TIMEOUT_S:.0f} s"
        elif now - all_ready >= seconds:
            figures.seconds = now - all_ready
            return None


def _final_difference(name: str, got: dict[str, list[Any]], expected: dict[str, list[Any]]) -> str:
    """Where a reader's last table differs from what the writer left."""
    if len(got["length"]) != len(expected["length"]):
        return (
            f"{name}: its last look saw {len(got['length'])} episodes, the writer left "
            f"{len(expected['length'])}"
        )
    for episode, pair in enumerate(zip(got["length"], got["ongoing"], strict=True)):
        want = (expected["length"][episode], expected["ongoing"][episode])
        if tuple(pair) != want:
            return (
                f"{name}: its last look saw episode {episode} with (length, ongoing) = "
                f"{tuple(pair)}, the writer left {want}"
            )
    return f"{name}: its last look differs from what the writer left"


class ConcurrentReaderTests:
    """Readers in other processes during writes, for one persistent backend.

    Subclasses set ``backend_name``; :meth:`reader_options` adds backend options. The
    default run has two sampling readers; the DataLoader reader (whose process imports
    torch, seconds on a busy machine) runs in the ``slow`` tests.
    """

    backend_name: ClassVar[str]
    reader_seconds: ClassVar[float] = 1.5
    """Seconds of writing while every reader reads, in the default run."""
    soak_seconds: ClassVar[float] = 20.0
    """The same, per seed, in the slow soak."""
    reads_may_refresh: ClassVar[bool] = False
    """Whether the backend's reads may adopt newer commits without ``refresh()``.

    The promise is one snapshot between refreshes; a backend that breaks it sets this to
    keep the rest of the check useful (see ``moves_allowed`` of the run)."""

    def reader_options(self) -> dict[str, Any]:
        """Backend options for the check's dataset (besides ``fold_bytes``)."""
        return {}

    def _run(self, tmp_path: Path, **kwargs: Any) -> ReaderFigures:
        figures = run_concurrent_readers(
            self.backend_name,
            str(tmp_path / "dataset"),
            options=self.reader_options(),
            moves_allowed=self.reads_may_refresh,
            **kwargs,
        )
        print(figures.summary())
        assert not figures.problems, figures.report()
        _assert_exercised(figures)
        return figures

    def test_readers_during_writes(self, tmp_path: Path) -> None:
        """Two sampling readers see no torn episode and raise nothing while one writes."""
        self._run(tmp_path, seconds=self.reader_seconds, loader=False)

    def test_snapshot_holds_between_refreshes(self, tmp_path: Path) -> None:
        """A reader's episode table changes at ``refresh()`` only, not during its reads.

        The reader saw episode 1 ongoing with 4 flushed rows; the writer then finalizes it
        and adds episode 2. Until the reader refreshes, every read must come from the
        snapshot it holds: two episodes, the second ongoing with its flushed rows.
        """
        location = str(tmp_path / "dataset")
        schema = reader_schema(example_schema())
        options = backend_options(self.backend_name, self.reader_options())
        writer = Dataset.create(schema, location, backend=self.backend_name, **options)
        writer.add_episode(bulk_episode(schema, reader_episode(schema, 0)))
        content = reader_episode(schema, 1)
        assert content.num_rows > 4, "episode 1 of the oracle should be long"
        steps = start_episode(writer, content)
        write_steps(steps, schema, content, 1, 4)
        writer.flush()
        reader = Dataset.open(location, read_only=True)
        oracle = Oracle(schema)
        snapshot = TableState.of(reader.backend.episode_table())
        assert oracle.check_table(None, snapshot) == []
        assert snapshot.length.tolist() == [reader_episode(schema, 0).num_rows - 1, 3]
        write_steps(steps, schema, content, 4, content.num_rows)
        writer.add_episode(bulk_episode(schema, reader_episode(schema, 2)))
        read = reader.episode(1).read()
        sampled = reader.sample_transitions(64, seed=0)
        after = TableState.of(reader.backend.episode_table())
        assert snapshot.difference(after) is None, (
            f"the reader's table changed without refresh() during its reads: "
            f"{snapshot.difference(after)}"
        )
        parts = (read.buffers, read.terminated, read.truncated)
        found = oracle.check_episode("read", 1, *parts, older=snapshot, newer=snapshot)
        assert found == []
        parts = (sampled.buffers, sampled.terminated, sampled.truncated)
        found, _, _ = oracle.check_transitions("sample", *parts, older=snapshot, newer=snapshot)
        assert found == []
        reader.refresh()
        table = TableState.of(reader.backend.episode_table())
        assert oracle.check_table(snapshot, table) == []
        assert table.ongoing.tolist() == [False, False, False]
        reader.close()
        writer.close()

    @pytest.mark.slow
    def test_dataloader_reader_during_writes(self, tmp_path: Path) -> None:
        """A DataLoader with forked workers over a dataset opened during the writes."""
        pytest.importorskip("torch")
        self._run(tmp_path, seed=7, seconds=4.0, readers=1, loader=True)

    @pytest.mark.slow
    @pytest.mark.parametrize("seed", [1, 2, 3])
    def test_readers_during_writes_soak(self, tmp_path: Path, seed: int) -> None:
        """Three sampling readers and a DataLoader reader, ``soak_seconds`` per seed."""
        pytest.importorskip("torch")
        self._run(tmp_path, seed=seed, seconds=self.soak_seconds, readers=3, loader=True)


def _assert_exercised(figures: ReaderFigures) -> None:
    """A run that read nothing, or saw nothing happen, would pass without testing anything."""
    assert figures.flushes > 1, figures.summary()
    assert figures.batches > 0, figures.summary()
    for reader in figures.readers:
        assert reader["rows_checked"] > 0, figures.summary()
        seen = reader["episodes_seen"]
        assert len(seen) > 1, f"{reader['name']} never saw the dataset grow\n{figures.summary()}"
    sampled = [r for r in figures.readers if r["mode"] == "sample"]
    assert any(r["ongoing_rows_checked"] > 0 for r in sampled), figures.summary()
