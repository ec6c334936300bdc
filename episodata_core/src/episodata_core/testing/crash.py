"""Kill chains: one writer process after another SIGKILLed on the same dataset.

A chain creates one dataset, then, round after round, starts a fresh writer process
(``_crash_writer.py``) that reopens it and appends until the chain kills it with SIGKILL
at a random instant: mostly while it writes, sometimes while it opens and recovers. After
every kill the chain opens the dataset read-only (what a reader sees before anyone
recovers), then writable (the recovery), and checks both against what the writers
reported durable, rebuilding every expected row from the episode ids:

- every episode reported finalized is there, finalized, with its flags, and reads back
  bit-identical, every field;
- every episode reported flushed while ongoing holds at least its flushed rows (or was
  finalized since, whole);
- every other episode is whole and finalized, or an ongoing exact prefix: never
  half-visible; an episode written whole is never ongoing; a backend whose
  ``add_episodes`` commits at once keeps all of a call's episodes or none;
- ``verify()`` is clean after the recovering open.

At the end a new writer finishes the ongoing episodes and appends one more, and a last
read-only open checks everything again. :class:`KillChainFigures` counts what happened;
:func:`record` prints them and appends them as one JSON line to the file that the
environment variable ``EPISODATA_KILL_CHAIN_REPORT`` names. ``EPISODATA_KILL_CHAIN_SEEDS``
(comma-separated) replaces the chains' seeds, to replay one: a seed fixes every writer's
operations and where each kill is aimed; the exact instant depends on the machine.
``EPISODATA_KILL_CHAIN_KILLS`` makes every chain longer (or shorter).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Self

import numpy as np

from episodata_core.dataset import Dataset
from episodata_core.testing import _crash_writer
from episodata_core.testing._crash_checks import Reported, check_after_kill, finish

if TYPE_CHECKING:
    from collections.abc import Iterable

    from episodata_core.schema import DatasetSchema

__all__ = ["KillChainFigures", "chain_kills", "chain_seeds", "record", "run_kill_chain"]

REPORT_ENV = "EPISODATA_KILL_CHAIN_REPORT"
SEEDS_ENV = "EPISODATA_KILL_CHAIN_SEEDS"
KILLS_ENV = "EPISODATA_KILL_CHAIN_KILLS"
RECOVERY_KILLS = 0.2
"""The share of kills aimed at the writer's open (and recovery) rather than its writes."""

_INTENTS = frozenset({"add", "batch", "start", "step", "flush"})
_OVERSHOOT = 1.25  # some kills land just after a call returned, before its report


@dataclasses.dataclass
class KillChainFigures:
    """What one kill chain did and found; ``lost`` and the failure counts must stay 0.

    ``episodes_checked`` counts episode comparisons over every check of the chain (each
    episode is checked again after every kill, by a reader and after recovery).
    """

    backend: str
    seed: int
    kills: int = 0
    kills_in_open: int = 0  # kills before the writer had finished its writable open
    episodes: int = 0  # in the dataset at the end
    reported_finalized: int = 0
    flushes: int = 0
    episodes_checked: int = 0
    lost: int = 0  # episodes reported durable that are missing, short or changed
    torn: int = 0  # other episodes that are half-visible or hold wrong rows
    reopen_failures: int = 0
    verify_failures: int = 0
    seconds: float = 0.0
    check_seconds: float = 0.0  # of ``seconds``, the parent's opens and checks
    failure: str | None = None  # what stopped the chain, and after which kill

    def summary(self) -> str:
        """One line for the test log."""
        return (
            f"kill chain {self.backend} seed={self.seed}: {self.kills} kills "
            f"({self.kills_in_open} in open), {self.episodes} episodes "
            f"({self.reported_finalized} reported finalized, {self.flushes} flushes), "
            f"{self.episodes_checked} episode checks, {self.lost} lost, {self.torn} torn, "
            f"{self.reopen_failures} reopen failures, {self.verify_failures} verify "
            f"failures, {self.seconds:.1f} s ({self.check_seconds:.1f} s checking)"
            + (f"; FAILED {self.failure}" if self.failure else "")
        )


def chain_seeds(default: Iterable[int]) -> list[int]:
    """The seeds to run: ``default``, or those that ``EPISODATA_KILL_CHAIN_SEEDS`` lists."""
    given = os.environ.get(SEEDS_ENV, "").strip()
    return [int(s) for s in given.split(",") if s.strip()] if given else list(default)


def chain_kills(default: int) -> int:
    """Kills per chain: ``default``, or what ``EPISODATA_KILL_CHAIN_KILLS`` says."""
    given = os.environ.get(KILLS_ENV, "").strip()
    return int(given) if given else default


def record(figures: KillChainFigures) -> None:
    """Print ``figures`` (``pytest -s`` shows it) and append them to the report file."""
    print(figures.summary())
    path = os.environ.get(REPORT_ENV)
    if path:
        with open(path, "a") as out:
            out.write(json.dumps(dataclasses.asdict(figures)) + "\n")


def run_kill_chain(
    backend: str,
    location: str,
    schema: DatasetSchema,
    *,
    seed: int,
    kills: int = 10,
    kill_ops: int = 8,
    all_or_none: bool = False,
) -> KillChainFigures:
    """Create a dataset at ``location`` and run one kill chain on it.

    Parameters
    ----------
    backend
        The backend's registered name.
    location
        A folder that does not exist yet; the writers' report and error output go next
        to it (``<location>-chain.log``, ``-chain-<round>.err``), outside the dataset.
    seed
        Seeds the kill instants and every writer's choice of operations.
    kill_ops
        A writer that has opened is killed once it has begun a random number (up to
        ``kill_ops``) of write calls, a random fraction of the way through a typical
        call of that kind: the kill lands inside a call, however fast the machine is.
    all_or_none
        Whether a crash leaves all of one ``add_episodes`` call's episodes or none.
    """
    figures = KillChainFigures(backend=backend, seed=seed)
    started = time.perf_counter()
    Dataset.create(schema, location, backend=backend).close()
    log = Path(f"{location}-chain.log")
    reported = Reported()
    rng = np.random.default_rng(seed)
    calls = _CallTimes()
    with contextlib.ExitStack() as writers:
        # the next writer imports while this one writes and the chain checks; it opens
        # the dataset only when told to, after the check
        upcoming = writers.enter_context(_Writer(location, log, seed, 0))
        for kill in range(kills):
            writer = upcoming
            in_open = bool(rng.random() < RECOVERY_KILLS)
            ops, fraction = int(rng.integers(1, kill_ops + 1)), float(rng.random())
            writer.go()
            if kill + 1 < kills:
                upcoming = writers.enter_context(_Writer(location, log, seed, kill + 1))
            failure = writer.kill(ops=None if in_open else ops, fraction=fraction, calls=calls)
            if failure is not None:
                figures.failure = f"in round {kill + 1}: {failure}"
                break
            figures.kills += 1
            figures.kills_in_open += not writer.opened
            reported.read(log)
            checked = time.perf_counter()
            failure = check_after_kill(location, schema, reported, figures, all_or_none)
            figures.check_seconds += time.perf_counter() - checked
            if failure is not None:
                figures.failure = f"after kill {kill + 1}: {failure}"
                break
        else:
            checked = time.perf_counter()
            failure = finish(location, schema, reported, figures)
            figures.check_seconds += time.perf_counter() - checked
            if failure is not None:
                figures.failure = f"after the last kill: {failure}"
    figures.reported_finalized = len(reported.final)
    figures.flushes = reported.flushes
    figures.seconds = time.perf_counter() - started
    return figures


class _CallTimes:
    """How long the writers' calls of each kind take (means, as the chain sees them)."""

    def __init__(self) -> None:
        self._sums: dict[str, tuple[float, int]] = {}

    def add(self, kind: str, seconds: float) -> None:
        total, count = self._sums.get(kind, (0.0, 0))
        self._sums[kind] = (total + seconds, count + 1)

    def typical(self, kind: str) -> float:
        """The mean duration of ``kind`` calls; 0.1 s before the first was seen."""
        total, count = self._sums.get(kind, (0.0, 0))
        return total / count if count else 0.1


class _Writer:
    """One writer process of a chain: started, told to go, then SIGKILLed."""

    def __init__(self, location: str, log: Path, seed: int, round_: int) -> None:
        self._err = Path(f"{location}-chain-{round_}.err")
        self._command = [
            *(sys.executable, "-P", _crash_writer.__file__),
            *(location, str(log), str(seed), str(round_)),
        ]
        self._process: subprocess.Popen[str] | None = None
        self._went = 0.0
        self.opened = False  # it finished its writable open before the kill

    def __enter__(self) -> Self:
        with self._err.open("wb") as stderr:
            self._process = subprocess.Popen(
                self._command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
            )
        return self

    def __exit__(self, *exc: object) -> None:
        process = self._process
        if process is not None and process.poll() is None:
            process.kill()
        if process is not None:
            process.communicate()

    def go(self) -> None:
        """Let it open the dataset, once it has imported what it needs."""
        process = self._process
        assert process is not None
        assert process.stdin is not None
        assert process.stdout is not None
        if process.stdout.readline().strip() == "ready":
            process.stdin.write("go\n")
            process.stdin.flush()
        self._went = time.perf_counter()

    def kill(self, *, ops: int | None, fraction: float, calls: _CallTimes) -> str | None:
        """SIGKILL it; a failure or None.

        ``ops=None``: in its open, ``fraction`` of the way through 1.25 typical opens.
        Otherwise once it has announced its ``ops``-th write call, ``fraction`` of the way
        through 1.25 typical calls of that kind (``calls`` learns how long each takes).
        """
        process = self._process
        assert process is not None
        assert process.stdout is not None
        if ops is None:
            time.sleep(fraction * _OVERSHOOT * calls.typical("open"))
        elif process.stdout.readline().startswith("open"):
            self.opened = True
            calls.add("open", time.perf_counter() - self._went)
            kind, began = "", 0.0
            while True:
                line = process.stdout.readline()
                now = time.perf_counter()
                if not line:
                    break  # it died: the exit code says why
                if kind:
                    calls.add(kind, now - began)  # the call ended at its next line
                word = line.split()[0]
                kind, began = (word, now) if word in _INTENTS else ("", now)
                ops -= bool(kind)
                if ops <= 0:
                    time.sleep(fraction * _OVERSHOOT * calls.typical(kind))
                    break
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
        code = process.wait()
        # what it printed before the kill landed: a kill aimed at the open may come late
        self.opened |= "open" in process.stdout.read().split()
        if code == -signal.SIGKILL:
            return None
        tail = self._err.read_text(errors="replace").strip().splitlines()[-6:]
        return f"the writer exited with code {code} before the kill: " + " | ".join(tail)
